//! §13.1 framing: snapshots of every case under `tests/data/frames/`, adversarial bodies and
//! attributes included, and the invariant that no content ends the frame or adds one (WP-13.1-2,
//! WP-13.1-3).

use serde::Deserialize;

use agentbus_protocol::frame::{self, Frame, Transport, Verified};

#[derive(Deserialize)]
struct Case {
    id: String,
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
    insta::glob!("../data/frames", "*.json", |path| {
        let case: Case = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let f = Frame {
            id: &case.id,
            from: &case.from,
            kind: &case.r#type,
            verified: case.verified,
            conversation: case.conversation.as_deref(),
            transport: case.transport,
            subject: case.subject.as_deref(),
            task: case.task.as_deref(),
            late: case.late,
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
        insta::assert_snapshot!(out);
    });
}
