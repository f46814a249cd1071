//! §2 validation, data-driven: every `tests/data/envelopes/{ok,err}/*.case` file holds a comment,
//! the expected `(code, path)` pairs and, after `---`, the envelope's bytes. The spec's own
//! examples under `spec/` validate with their placeholder signatures set aside (WP-2.2-1).

use agentbus_protocol::envelope::{Envelope, ValidateOptions};

use crate::{data_dir, read};

/// The violations of one envelope as `(code, path)` pairs, sorted; a parse failure is its code
/// with an empty path.
fn violations(bytes: &[u8], opts: ValidateOptions) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = match Envelope::parse(bytes) {
        Err(e) => vec![(e.code().to_string(), String::new())],
        Ok(env) => env
            .validate(opts)
            .into_iter()
            .map(|v| (v.code.to_string(), v.path))
            .collect(),
    };
    out.sort();
    out.dedup();
    out
}

#[track_caller]
fn check(rel: &str) {
    let text = String::from_utf8(read(rel)).unwrap();
    let (header, body) = text
        .split_once("---\n")
        .expect("a --- line separates header and body");
    let mut expected: Vec<(String, String)> = header
        .lines()
        .filter_map(|l| l.strip_prefix("# expect: "))
        .map(|l| {
            let (code, path) = l.split_once(' ').unwrap_or((l, ""));
            (code.to_owned(), path.to_owned())
        })
        .collect();
    expected.sort();
    let got = violations(body.as_bytes(), ValidateOptions::default());
    assert_eq!(
        got,
        expected,
        "{rel}: {}",
        header.lines().next().unwrap_or_default()
    );
}

fn cases(dir: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data_dir().join("envelopes").join(dir))
        .unwrap()
        .map(|e| {
            format!(
                "envelopes/{dir}/{}",
                e.unwrap().file_name().into_string().unwrap()
            )
        })
        .collect();
    names.sort();
    names
}

#[test]
fn valid_envelopes_have_no_violations() {
    let names = cases("ok");
    assert!(names.len() >= 10);
    for name in names {
        check(&name);
    }
}

#[test]
fn each_invalid_envelope_names_its_code_and_path() {
    let names = cases("err");
    assert!(names.len() >= 50);
    for name in names {
        check(&name);
    }
}

#[test]
fn wp_2_2_1_and_wp_12_the_spec_examples_validate_signatures_aside() {
    let opts = ValidateOptions {
        check_sig_form: false,
        ..ValidateOptions::default()
    };
    for name in cases("spec") {
        let got = violations(&read(&name), opts);
        assert!(got.is_empty(), "{name}: {got:?}");
        // With the signature check on, only the placeholder `sig` is at fault (G-WP-20).
        let strict = violations(&read(&name), ValidateOptions::default());
        assert_eq!(
            strict,
            [("AB-1010".to_owned(), "/sig".to_owned())],
            "{name}"
        );
    }
}

#[test]
fn wp_2_3_1_size_limit_is_exactly_one_mebibyte() {
    let env = Envelope::parse(b"{}").unwrap();
    let at_limit = ValidateOptions {
        received_bytes: Some(1_048_576),
        ..ValidateOptions::default()
    };
    let over = ValidateOptions {
        received_bytes: Some(1_048_577),
        ..ValidateOptions::default()
    };
    let too_large = |o| {
        env.validate(o)
            .iter()
            .any(|v| v.code == agentbus_protocol::Code::EnvelopeTooLarge)
    };
    assert!(!too_large(at_limit));
    assert!(too_large(over));
    let big = vec![b' '; 1_048_577];
    assert_eq!(
        Envelope::parse(&big).unwrap_err().code(),
        agentbus_protocol::Code::EnvelopeTooLarge
    );
}

#[test]
fn wp_5_1_1_text_is_at_most_500000_characters() {
    let base = String::from_utf8(read("envelopes/ok/wp-12-1-request-signed-shape.case")).unwrap();
    let body = base.split_once("---\n").unwrap().1;
    for (n, ok) in [(500_000, true), (500_001, false)] {
        let mut env = Envelope::parse(body.as_bytes()).unwrap();
        env.attrs_mut()["data"]["text"] = serde_json::Value::String("é".repeat(n));
        let v = env.validate(ValidateOptions::default());
        assert_eq!(v.is_empty(), ok, "{n}: {v:?}");
        if !ok {
            assert_eq!(v[0].path, "/data/text");
        }
    }
}
