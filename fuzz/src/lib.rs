//! What each fuzz target checks, one function per target, so that the same entry points serve the
//! fuzzer (`fuzz_targets/<target>.rs` calls them) and the workspace's tests, which replay every
//! committed seed and every regression input through them (`crates/agentbus/tests/it/fuzz_seeds.rs`,
//! a dev-dependency on this package without its default features). Each panics on a broken
//! property and returns otherwise.

use agentbus_local::hook::{Harness, parse_event};
use agentbus_local::line::Line;
use agentbus_protocol::envelope::{Envelope, ValidateOptions};
use agentbus_protocol::jcs;
use agentbus_protocol::json::{self, JsonError};
use agentbus_protocol::signing::{self, Sig};
use agentbus_protocol::{frame, text};
use agentbus_share::frontmatter;

/// A target's check: panics on a broken property.
pub type Check = fn(&[u8]);

/// Every target, by name, as `cargo fuzz list` names them.
pub const TARGETS: &[(&str, Check)] = &[
    ("envelope", envelope),
    ("frame_text", frame_text),
    ("frontmatter", frontmatter),
    ("hook_event", hook_event),
    ("ijson_jcs", ijson_jcs),
    ("local_line", local_line),
    ("sig", sig),
];

/// Envelope parsing and §2 validation: never a panic; an envelope without violations has signing
/// bytes, and its violations are the same when validated twice.
pub fn envelope(data: &[u8]) {
    let Ok(env) = Envelope::parse(data) else {
        return;
    };
    let opts = ValidateOptions {
        received_bytes: Some(data.len()),
        ..ValidateOptions::default()
    };
    let first = env.validate(opts);
    if first.is_empty() {
        signing::signing_bytes(env.attrs()).expect("a valid envelope has signing bytes");
    }
    assert_eq!(first.len(), env.validate(opts).len());
    let _ = (env.id(), env.source(), env.task_id(), env.sequence());
}

/// Foreign text on its way to a model or a terminal: a body never closes or opens a frame, and
/// terminal text never carries an escape or a control character but newline and tab.
pub fn frame_text(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let body = frame::neutralize_body(s);
    assert!(
        !body.to_ascii_lowercase().contains("</agentbus"),
        "{body:?}"
    );
    assert!(!body.to_ascii_lowercase().contains("<agentbus"), "{body:?}");
    let shown = text::for_terminal(s);
    assert!(
        !shown
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "{shown:?}"
    );
    let quoted = text::shell_quote(s);
    assert!(!quoted.is_empty());
}

/// agentshare frontmatter, as another implementation might write it: the lenient readers never
/// panic, whatever the bytes.
pub fn frontmatter(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = frontmatter::split(text);
    let _ = frontmatter::read_message(text);
    let _ = frontmatter::read_publication(text);
}

/// The event JSON a harness hands the hook, for every harness.
pub fn hook_event(data: &[u8]) {
    for harness in [Harness::Claude, Harness::Codex, Harness::OpenCode] {
        let _ = parse_event(harness, data);
    }
}

/// The strict I-JSON reader and RFC 8785: whatever parses canonicalises, and the canonical bytes
/// parse back to a value with the same canonical bytes (JCS is idempotent).
///
/// One exception is by design (`docs/protocol.md`, "I-JSON input"): a non-integral literal such as
/// `33333338888888888833.3` is a double whose canonical form is bare integer digits
/// beyond 2^53, which the reader refuses as an integer literal; the signature covers those canonical
/// bytes, and nothing ever re-reads them as JSON.
pub fn ijson_jcs(data: &[u8]) {
    let Ok(value) = json::parse(data) else { return };
    let canonical = jcs::canonicalize(&value).expect("a parsed I-JSON value canonicalises");
    match json::parse(&canonical) {
        Ok(again) => assert_eq!(
            jcs::canonicalize(&again).expect("canonicalises"),
            canonical,
            "JCS is idempotent"
        ),
        Err(JsonError::IntegerOutOfRange { .. }) => {}
        Err(e) => panic!("canonical bytes are not I-JSON: {e}"),
    }
}

/// A line of the per-machine log, as any process on the machine might have written it.
pub fn local_line(data: &[u8]) {
    let _ = Line::parse(data);
}

/// The `sig` attribute: what parses renders back to the same value.
pub fn sig(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sig) = Sig::parse(text) else { return };
    assert_eq!(Sig::parse(&sig.render()).as_ref(), Ok(&sig));
}
