//! The settings model: one runner over the cases in `tests/data/settings/`, each
//! a TOML file with the flags, environment and `--config` file text given, and either the values
//! and origins expected or the error lines (`FILE` stands for the file's path).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentbus_gateway::config::{Config, DEFAULT_LISTEN, Resolved, SETTINGS, Sources, resolve};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/settings")
}

fn strings(t: Option<&toml::Value>) -> Vec<(String, String)> {
    t.and_then(toml::Value::as_table)
        .map(|t| {
            t.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

#[track_caller]
fn check(name: &str, case: &toml::Table, file: Option<PathBuf>) {
    let sources = Sources {
        flags: strings(case.get("flags")),
        env: strings(case.get("env")).into_iter().collect(),
        file: file.clone(),
    };
    let shown = file.map(|f| f.display().to_string()).unwrap_or_default();
    match (resolve(&sources), case.get("errors")) {
        (Ok(r), None) => {
            let expect = case["expect"].as_table().unwrap();
            for (setting, want) in expect {
                let want = want.as_array().unwrap();
                let (value, from) = (want[0].as_str().unwrap(), want[1].as_str().unwrap());
                let (_, got, origin) = r.rows().find(|(s, _, _)| s.name == setting).unwrap();
                assert_eq!(got, value, "{name}: {setting}");
                let origin = origin.to_string();
                if from == "file" {
                    assert_eq!(origin, format!("file {shown}"), "{name}: {setting}");
                } else {
                    assert_eq!(origin, from, "{name}: {setting}");
                }
            }
        }
        (Err(errors), Some(want)) => {
            let want: Vec<String> = want["lines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap().replace("FILE", &shown))
                .collect();
            let got: Vec<String> = errors
                .iter()
                .map(|e| format!("{e}; fix: {}", e.fix))
                .collect();
            assert_eq!(got, want, "{name}");
        }
        (Ok(_), Some(_)) => panic!("{name}: resolved, but errors were expected"),
        (Err(e), None) => panic!("{name}: {e:?}"),
    }
}

#[test]
fn settings_cases() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(data())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    assert!(cases.len() >= 5);
    for path in cases {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let case: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let file = case.get("file_text").map(|t| {
            let p = tmp.path().join("gateway.toml");
            std::fs::write(&p, t.as_str().unwrap()).unwrap();
            p
        });
        check(&name, &case, file);
    }
}

/// Every setting of the table can be given by its flag, its variable and its file key (the
/// test clock only by its flag), and the origin says which one it came from.
#[test]
fn every_setting_is_reachable_by_flag_environment_and_file() {
    let base = Config::new(DEFAULT_LISTEN, "/srv/agentbus".into());
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("gateway.toml");
    for s in SETTINGS {
        let value = s.value(&base);
        let origin = |r: &Resolved| r.origin(s.name).unwrap().to_string();
        let by_flag = resolve(&Sources {
            flags: vec![(s.name.to_owned(), value.clone())],
            ..Sources::default()
        })
        .unwrap();
        assert_eq!(origin(&by_flag), format!("flag --{}", s.flag));
        let Some(env) = s.env else {
            assert_eq!(
                s.name, "unsafe_test_clock",
                "only the test clock is flag-only"
            );
            continue;
        };
        let by_env = resolve(&Sources {
            env: BTreeMap::from([(env.to_owned(), value.clone())]),
            ..Sources::default()
        })
        .unwrap();
        assert_eq!(origin(&by_env), format!("env {env}"));
        std::fs::write(&file, format!("{} = {:?}\n", s.name, value)).unwrap();
        let by_file = resolve(&Sources {
            file: Some(file.clone()),
            ..Sources::default()
        })
        .unwrap();
        assert_eq!(origin(&by_file), format!("file {}", file.display()));
        assert_eq!(s.value(&by_file.config), value, "{}", s.name);
    }
}

/// `docs/settings.md` is generated from the table; `UPDATE_EXPECT=1` rewrites it.
#[test]
fn settings_doc_is_generated_from_the_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/settings.md");
    let want = agentbus_gateway::config::render_markdown();
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let got = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == want,
        "docs/settings.md differs from the settings table; run `UPDATE_EXPECT=1 cargo test -p agentbus-gateway --test it settings_doc`"
    );
}
