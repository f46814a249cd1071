//! `docs/errors.md` is generated from the catalogue; this fails when the two differ.

use agentbus_protocol::errors;

#[test]
fn docs_errors_md_is_generated_from_the_catalogue() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md");
    let expected = errors::render_markdown();
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    assert!(
        actual == expected,
        "docs/errors.md differs from the catalogue; run `UPDATE_EXPECT=1 cargo test -p agentbus-protocol --test it errors_doc`"
    );
}

/// Every entry tells a reader what went wrong and what to do, and has a kind, from which the
/// command line's exit code and the MCP answer derive; the fix the command line prints names no
/// HTTP route or header (`docs/cli.md`: fixes name this command's flags and commands).
#[test]
fn every_entry_has_a_kind_a_cause_and_a_fix() {
    for code in errors::Code::ALL {
        let e = code.entry();
        assert!(errors::Kind::ALL.contains(&e.kind), "{code}");
        assert!(!e.title.is_empty(), "{code} has no title");
        assert!(!e.cause.is_empty(), "{code} has no cause");
        assert!(!e.fix.trim().is_empty(), "{code} has no fix");
        assert!(
            !e.cli_fix().trim().is_empty(),
            "{code} has no command-line fix"
        );
        if let Some(cli) = e.cli_fix {
            assert!(
                !cli.contains("POST /") && !cli.contains("Authorization:"),
                "{code}: {cli}"
            );
        }
    }
}

/// A fix a person reads names a command or a console page, not an HTTP route: only where no
/// command exists (a raw WebSocket or schema client) may the route stand alone.
#[test]
fn fixes_name_a_command_where_one_exists() {
    const ROUTE_ONLY: &[errors::Code] = &[errors::Code::FrameTooLarge];
    for code in errors::Code::ALL {
        let fix = code.entry().fix;
        let names_route = ["GET /", "POST /", "PUT /", "PATCH /", "DELETE /"]
            .iter()
            .any(|m| fix.contains(m));
        let names_command = fix.contains("agentbus ") || fix.contains("console");
        assert!(
            !names_route || names_command || ROUTE_ONLY.contains(code),
            "{code}: {fix}"
        );
    }
}

/// The rule tying an entry's HTTP status to its kind (`Kind::admits_http_status`): refusals
/// answer 4xx, a gateway that cannot serve now answers 5xx, other kinds are never HTTP answers;
/// and every 4xx entry is a refusal, every 5xx one unavailable, so the status follows the kind.
#[test]
fn kind_and_http_status_agree() {
    use errors::Kind;
    for code in errors::Code::ALL {
        let e = code.entry();
        assert!(
            e.kind.admits_http_status(e.http_status),
            "{code} is {} and answers {}",
            e.kind.as_str(),
            e.http_status
        );
        match e.http_status {
            400..=499 => assert_eq!(e.kind, Kind::Refused, "{code}"),
            500..=599 => assert_eq!(e.kind, Kind::Unavailable, "{code}"),
            _ => {}
        }
    }
}

/// The exit codes `docs/cli.md` documents, one per kind, and every kind is a tool error for the
/// MCP server.
#[test]
fn each_kind_has_its_documented_exit_code() {
    use errors::Kind;
    let codes: Vec<(Kind, u8)> = Kind::ALL.iter().map(|k| (*k, k.exit_code())).collect();
    assert_eq!(
        codes,
        [
            (Kind::Usage, 2),
            (Kind::Input, 3),
            (Kind::Declined, 1),
            (Kind::Configuration, 4),
            (Kind::Unavailable, 5),
            (Kind::Refused, 6),
            (Kind::Internal, 70),
        ]
    );
    assert!(Kind::ALL.iter().all(|k| k.is_tool_error()));
}

/// `tests/data/errors/catalogue.json` is the catalogue as data, generated from it, for the Python
/// and TypeScript libraries' typed errors (code, title, cause, fix, doc path), with a copy inside
/// each library's package; this fails when a file differs from the catalogue.
#[test]
fn tests_data_errors_catalogue_json_is_generated_from_the_catalogue() {
    let codes: Vec<serde_json::Value> = errors::Code::ALL
        .iter()
        .map(|code| {
            let e = code.entry();
            let origin = match e.origin {
                errors::Origin::Spec => "spec",
                errors::Origin::Project => "project",
            };
            serde_json::json!({
                "code": code.to_string(),
                "http_status": e.http_status,
                "kind": e.kind.as_str(),
                "origin": origin,
                "title": e.title,
                "cause": e.cause,
                "fix": e.fix,
                "cli_fix": e.cli_fix,
                "doc_path": code.doc_path(),
            })
        })
        .collect();
    let doc = serde_json::json!({
        "generated_from": "crates/agentbus-protocol/src/errors.rs",
        "regenerate": "AGENTBUS_BLESS=1 cargo test -p agentbus-protocol --test it catalogue_json",
        "codes": codes,
    });
    let text = format!("{}\n", serde_json::to_string_pretty(&doc).unwrap());
    crate::expect_file("errors/catalogue.json", &text);
    // Each library ships the same bytes inside its package, where it reads them at run time.
    for copy in [
        "../../sdk/python/src/agentbus/catalogue.json",
        "../../sdk/typescript/catalogue.json",
    ] {
        crate::expect_file(copy, &text);
    }
}
