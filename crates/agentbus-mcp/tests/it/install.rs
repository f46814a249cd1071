//! The server's entry in each harness's configuration, one case a folder under
//! `tests/data/install/`: `harness`, the file `before` (absent: no file yet), and either the
//! file after install (`installed`) and after uninstall (`uninstalled`), or the `error` that
//! leaves it untouched. A second install changes nothing.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use agentbus_local::hook::Harness;
use agentbus_local::install::Change;
use agentbus_mcp::install::{Entry, install, uninstall, user_path};

use crate::data;

fn entry(h: Harness) -> Entry {
    Entry {
        program: "/opt/agentbus/bin/agentbus".into(),
        args: vec!["mcp".into(), "--harness".into(), h.as_str().into()],
        env: BTreeMap::from([("AGENTBUS_HOME".into(), "/home/u/.agentbus".into())]),
    }
}

#[test]
fn every_install_case_adds_ours_and_removes_only_ours() {
    let mut cases: Vec<_> = std::fs::read_dir(data("install"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    assert!(cases.len() >= 6);
    for dir in &cases {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        let h = Harness::parse(read("harness").unwrap().trim()).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("config");
        if let Some(before) = read("before") {
            std::fs::write(&file, before).unwrap();
        }
        if let Some(error) = read("error") {
            let before = std::fs::read_to_string(&file).ok();
            let e = install(h, &file, &entry(h)).unwrap_err();
            assert!(e.to_string().contains(error.trim()), "{name}: {e}");
            assert!(
                uninstall(h, &file).is_err(),
                "{name}: uninstall refuses too"
            );
            assert_eq!(
                std::fs::read_to_string(&file).ok(),
                before,
                "{name}: untouched"
            );
            continue;
        }
        assert_eq!(
            install(h, &file, &entry(h)).unwrap(),
            Change::Changed,
            "{name}"
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            read("installed").unwrap(),
            "{name}: installed"
        );
        assert_eq!(
            install(h, &file, &entry(h)).unwrap(),
            Change::Unchanged,
            "{name}"
        );
        assert_eq!(uninstall(h, &file).unwrap(), Change::Changed, "{name}");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            read("uninstalled").unwrap(),
            "{name}: uninstalled"
        );
        assert_eq!(uninstall(h, &file).unwrap(), Change::Unchanged, "{name}");
    }
}

#[test]
fn the_configuration_files_follow_the_harness_variables_as_hooks_install_does() {
    let home = Path::new("/home/u");
    let none = |_: &str| None;
    let set = |name: &str| {
        let v = match name {
            "CLAUDE_CONFIG_DIR" => "/cfg/claude",
            "CODEX_HOME" => "/cfg/codex",
            "XDG_CONFIG_HOME" => "/cfg/xdg",
            _ => return None,
        };
        Some(OsString::from(v))
    };
    let cases = [
        (
            Harness::Claude,
            "/home/u/.claude.json",
            "/cfg/claude/.claude.json",
        ),
        (
            Harness::Codex,
            "/home/u/.codex/config.toml",
            "/cfg/codex/config.toml",
        ),
        (
            Harness::OpenCode,
            "/home/u/.config/opencode/opencode.json",
            "/cfg/xdg/opencode/opencode.json",
        ),
    ];
    for (h, default, from_var) in cases {
        assert_eq!(user_path(h, home, none), Path::new(default), "{h:?}");
        assert_eq!(user_path(h, home, set), Path::new(from_var), "{h:?}");
    }
}
