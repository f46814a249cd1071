//! §13.1 framing: every case under the repository's `tests/data/frames/` renders as its `.frame`
//! file, adversarial bodies and attributes included, and the invariant that no content ends the frame or adds one (WP-13.1-2,
//! WP-13.1-3).

use serde::Deserialize;

use agentbus_protocol::frame::{self, Frame, Transport, Verified};

#[derive(Deserialize)]
struct Case {
    id: String,
    #[serde(default)]
    local_id: Option<String>,
    from: String,
    r#type: String,
    verified: Verified,
    conversation: Option<String>,
    transport: Transport,
    subject: Option<String>,
    task: Option<String>,
    late: bool,
    attachments: Vec<String>,
    reply_command: Option<String>,
    rest_command: Option<String>,
    body: String,
}

/// Counts opening and closing tags the way a lenient reader (or a model) might see them: any case,
/// spaces and `/` after the `<`, full-width forms folded.
pub fn count_tags(text: &str) -> (usize, usize) {
    let folded: String = text
        .chars()
        .map(|c| match c {
            '\u{FF1C}' | '\u{FE64}' => '<',
            '\u{FF0F}' => '/',
            '\u{FF41}'..='\u{FF5A}' => char::from_u32(c as u32 - 0xFF41 + 'a' as u32).unwrap(),
            '\u{FF21}'..='\u{FF3A}' => char::from_u32(c as u32 - 0xFF21 + 'a' as u32).unwrap(),
            c => c.to_ascii_lowercase(),
        })
        .filter(|c| !frame::is_hidden(*c))
        .collect();
    let (mut open, mut close) = (0, 0);
    let chars: Vec<char> = folded.chars().collect();
    for i in 0..chars.len() {
        if chars[i] != '<' {
            continue;
        }
        let mut j = i + 1;
        let mut slash = false;
        while j < chars.len() && (chars[j].is_whitespace() || chars[j] == '/') {
            slash |= chars[j] == '/';
            j += 1;
        }
        let rest: String = chars[j..chars.len().min(j + 16)].iter().collect();
        if rest.starts_with("agentbus-message") {
            if slash {
                close += 1;
            } else {
                open += 1;
            }
        }
    }
    (open, close)
}

#[test]
fn wp_13_1_frames_render_as_snapshotted_and_stay_one_frame() {
    insta::glob!("../../../../tests/data/frames", "*.json", |path| {
        let case: Case = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let f = Frame {
            id: &case.id,
            local_id: case.local_id.as_deref(),
            from: &case.from,
            kind: &case.r#type,
            verified: case.verified,
            conversation: case.conversation.as_deref(),
            transport: case.transport,
            subject: case.subject.as_deref(),
            task: case.task.as_deref(),
            late: case.late,
            expired: None,
            attachments: &case.attachments,
            reply_command: case.reply_command.as_deref(),
            rest_command: case.rest_command.as_deref(),
            body: &case.body,
        };
        let out = frame::render(&f);
        assert_eq!(count_tags(&out), (1, 1), "{}", path.display());
        assert!(out.starts_with("<agentbus-message id=\""));
        assert!(out.ends_with("</agentbus-message>\n"));
        // No hidden or control character survives anywhere in the frame.
        assert!(
            !out.chars()
                .any(|c| frame::is_hidden(c) || (c.is_control() && c != '\n' && c != '\t')),
            "{}",
            path.display()
        );
        // The header line keeps exactly the attributes we wrote: quotes in values are escaped.
        let header = out.lines().next().unwrap();
        assert_eq!(header.matches('"').count() % 2, 0);
        assert!(header.contains(&format!(" verified=\"{}\"", case.verified.as_str())));
        crate::expect_file(&expected_name("frames", path), &out);
    });
}

/// The expected-output file of a case: `<dir>/<case>.frame` beside `<dir>/<case>.json`.
fn expected_name(dir: &str, case: &std::path::Path) -> String {
    let stem = case.file_stem().and_then(|s| s.to_str()).unwrap();
    format!("{dir}/{stem}.frame")
}

#[derive(Deserialize)]
struct EnvelopeCase {
    envelope: serde_json::Map<String, serde_json::Value>,
    request_task: Option<String>,
    late: bool,
    profile: Option<String>,
    local_id: Option<String>,
}

/// A delivered envelope framed as a receiver frames it: `id` is the envelope's `msg_` id with the
/// local id beside it, `task` names the task, a late result says so, a schema of an unknown major
/// is opaque, and each type suggests the command that answers it (WP-13.1-2, WP-6.3-3, WP-11.3-4).
#[test]
fn wp_13_1_wp_6_3_3_wp_11_3_4_envelopes_frame_as_section_13_1_writes_them() {
    insta::glob!("../../../../tests/data/envelope-frames", "*.json", |path| {
        let case: EnvelopeCase = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let env = agentbus_protocol::envelope::Envelope::from_map(case.envelope.clone());
        let d = frame::describe(&env, case.request_task.as_deref(), case.profile.as_deref());
        let out = frame::render(&Frame {
            id: &d.id,
            local_id: case.local_id.as_deref(),
            from: &d.from,
            kind: &d.kind,
            verified: Verified::True,
            conversation: d.conversation.as_deref(),
            transport: Transport::Gateway,
            subject: d.subject.as_deref(),
            task: d.task.as_deref(),
            late: case.late,
            expired: None,
            attachments: &[],
            reply_command: d.answer.as_deref(),
            rest_command: None,
            body: &d.body,
        });
        let header = out.lines().next().unwrap();
        assert!(header.starts_with(&format!("<agentbus-message id=\"{}\"", d.id)));
        assert!(d.id.starts_with("msg_"), "{}", path.display());
        if let Some(t) = d.task.as_deref() {
            assert!(header.contains(&format!(" task=\"{t}\"")), "{header}");
        }
        assert_eq!(header.contains(" late=\"true\""), case.late);
        assert_eq!(
            out.contains("Warning: this arrived after the task had ended"),
            case.late
        );
        if frame::receiver_type(&env).is_none() {
            assert!(d.body.starts_with("An opaque message"), "{}", d.body);
            let text = env.data().and_then(|v| v["text"].as_str()).unwrap_or("");
            assert!(text.is_empty() || !out.contains(text), "{out}");
        }
        crate::expect_file(&expected_name("envelope-frames", path), &out);
    });
}
