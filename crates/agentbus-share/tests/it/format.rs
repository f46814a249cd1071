//! Reading and writing the format without git: lenient reading of the frontmatter cases under
//! `tests/data/frontmatter/` (§3.1, §9), and `content_hash` against the published BLAKE3 vectors
//! and §3.2's preimage rule.

use agentbus_share::frontmatter::{self, MessageType, Version};
use agentbus_share::hash::{self, HashCheck};
use serde_json::{Value, json};

use crate::data_dir;

fn read_case(name: &str) -> Result<frontmatter::Message, frontmatter::FormatError> {
    let text = std::fs::read_to_string(data_dir().join("frontmatter").join(name)).unwrap();
    frontmatter::read_message(&text)
}

#[test]
fn as_9_lenient_reading_of_every_frontmatter_case() {
    insta::glob!("../data/frontmatter", "*.md", |path| {
        let text = std::fs::read_to_string(path).unwrap();
        let value = match frontmatter::read_message(&text) {
            Ok(m) => json!({"message": m, "effective_type": m.kind.effective().as_str()}),
            Err(e) => json!({"malformed": e.to_string()}),
        };
        let name = path.file_name().unwrap().to_str().unwrap();
        // Files named err-* are the malformed ones: reported, never fatal.
        assert_eq!(
            name.starts_with("err-"),
            value.get("malformed").is_some(),
            "{name}"
        );
        insta::assert_json_snapshot!(value);
    });
}

#[test]
fn as_3_1_4_and_as_3_1_5_a_minimal_file_takes_every_default() {
    let m = read_case("minimal-0.1.0.md").unwrap();
    assert_eq!(m.recipients, vec![m.to.clone()]);
    assert_eq!(m.sender_clan.operator, "balazs");
    assert_eq!(m.sender_clan.instance.as_deref(), Some("claude-fleet"));
    assert_eq!(m.group, None);
    assert_eq!(m.retention_tier, "standard");
    assert_eq!(m.content_hash, None);
    assert_eq!(m.hash_check, HashCheck::Absent);
    assert!(!m.recipients_emitted);
    // G-AS-6: status defaults to open, thread to the message itself.
    assert_eq!(m.status, "open");
    assert_eq!(m.thread, m.id);
}

#[test]
fn as_9_5_legacy_versions_are_read_with_the_defaults() {
    let current = read_case("minimal-0.1.0.md").unwrap();
    for v in ["0.0.1", "0.0.2", "0.0.3"] {
        let m = read_case(&format!("legacy-{v}.md")).unwrap();
        assert_eq!(m.version, Version::Legacy(v.into()));
        assert_eq!(
            (m.id, m.recipients, m.retention_tier),
            (
                current.id.clone(),
                current.recipients.clone(),
                current.retention_tier.clone()
            )
        );
    }
    let m = read_case("legacy-0.0.4-envelope.md").unwrap();
    assert_eq!(m.version, Version::Legacy("0.0.4".into()));
    assert_eq!(m.recipients.len(), 2);
    assert_eq!(m.retention_tier, "ephemeral");
    assert_eq!(m.group.as_deref(), Some("reviewers"));
    // An unquoted timestamp (which YAML 1.1 loaders type as a datetime) is normalised (G-AS-14).
    assert_eq!(
        m.created.unwrap().at.unwrap().to_string(),
        "2026-08-01T09:00:00.000Z"
    );
}

#[test]
fn as_9_7_protocol_1_0_0_reads_as_0_1_0() {
    let twin = read_case("minimal-0.1.0.md").unwrap();
    let m = read_case("withdrawn-1.0.0.md").unwrap();
    assert_eq!(m.version, Version::Withdrawn);
    let strip = |mut m: frontmatter::Message| {
        m.protocol.clear();
        m.version = Version::Current;
        m
    };
    assert_eq!(strip(m), strip(twin));
}

#[test]
fn as_9_3_and_as_9_4_unknown_keys_are_ignored_and_unknown_types_are_fyi() {
    let m = read_case("unknown-keys-and-type.md").unwrap();
    assert_eq!(m.kind, MessageType::Unknown("poll".into()));
    assert_eq!(m.kind.effective(), MessageType::Fyi);
    assert!(m.keys.contains(&"zzz".to_owned()));
    // An offset is read as the instant it names.
    assert_eq!(
        m.created.unwrap().at.unwrap().to_string(),
        "2026-08-08T08:15:00.000Z"
    );
}

#[test]
fn g_as_6_null_reads_as_absent() {
    let m = read_case("nulls-and-empty-re.md").unwrap();
    assert_eq!(m.re, None);
    assert_eq!(m.group, None);
    assert_eq!(m.content_hash, None);
}

#[test]
fn as_3_2_1_blake3_matches_the_published_vectors() {
    let text = std::fs::read_to_string(data_dir().join("blake3/test_vectors.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() > 30);
    for case in cases {
        let len = case["input_len"].as_u64().unwrap() as usize;
        let input: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let expected = case["hash"].as_str().unwrap();
        assert_eq!(
            blake3::hash(&input).to_hex().as_str(),
            &expected[..64],
            "len {len}"
        );
        let mut xof = vec![0u8; expected.len() / 2];
        blake3::Hasher::new()
            .update(&input)
            .finalize_xof()
            .fill(&mut xof);
        let hex: String = xof.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, expected, "extended output, len {len}");
    }
}

#[test]
fn as_3_2_1_content_hash_is_blake3_of_the_trimmed_body_only() {
    let body = "\n\n  # Title\n\nSome text.\t\n\n";
    let expected = format!("blake3:{}", blake3::hash(b"# Title\n\nSome text.").to_hex());
    assert_eq!(hash::content_hash(body), expected);
    // Inner whitespace and CRLF are not normalised (G-AS-8).
    assert_ne!(hash::content_hash("a\r\nb"), hash::content_hash("a\nb"));
}

#[test]
fn as_3_2_2_and_as_3_2_3_a_footer_is_excluded_and_tampering_is_caught() {
    let plain = "Hello\n";
    let footed = "Hello\n\n_Dispatched by agentbus 0.1.0_\n";
    assert_eq!(hash::content_hash(plain), hash::content_hash(footed));
    let declared = hash::content_hash(plain);
    assert_eq!(HashCheck::of(Some(&declared), footed), HashCheck::Verified);
    assert_eq!(
        HashCheck::of(Some(&declared), "Hello!\n"),
        HashCheck::Mismatch
    );
    // §3.2's form is blake3: and 64 lowercase hex digits; anything else cannot be checked.
    assert_eq!(HashCheck::of(Some("sha256:abc"), plain), HashCheck::BadForm);
    assert_eq!(
        HashCheck::of(
            Some(&declared.to_uppercase().replace("BLAKE3:", "blake3:")),
            plain
        ),
        HashCheck::BadForm
    );
    // Only the last line, and only when it is a whole footer line.
    assert_ne!(
        hash::content_hash("_Dispatched by x_\nHello"),
        hash::content_hash("Hello")
    );
}

#[test]
fn as_3_6_a_publication_reads_with_its_keys() {
    let doc = "---\nprotocol: 0.1.0\nid: 2026-08-08-balazs-example-survey\npublisher: { operator: balazs, instance: claude-fleet, agent: architect-agent }\ntopic: example-topic\nsource: { repo: \"\", commit: \"\", path: \"\" }\ncreated: 2026-08-08T10:01:00Z\nsupersedes:\nlast_verified: 2026-08-08\n---\nSurvey.\n";
    let p = frontmatter::read_publication(doc).unwrap();
    assert_eq!(p.id, "2026-08-08-balazs-example-survey");
    assert_eq!(p.supersedes, None);
    assert_eq!(p.last_verified.as_deref(), Some("2026-08-08"));
    let s = p.source.unwrap();
    assert_eq!((s.repo, s.commit, s.path), (None, None, None));
}
