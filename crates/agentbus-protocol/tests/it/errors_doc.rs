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
