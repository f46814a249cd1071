//! The harness: the kit's console harness (`agentbus_testkit::console`: a real gateway with the
//! console mounted, agents with keys, signed envelopes, console sessions driven over real HTTP),
//! and what only these tests add: a page's text as a person reads it, and a check that a request
//! changed nothing stored.

pub use agentbus_testkit::Agent;
pub use agentbus_testkit::console::*;
pub use agentbus_testkit::gateway::sign;

/// Text of an HTML page with tags dropped and entities of the escaper decoded, whitespace
/// collapsed: what a person reads. Inline `<span>` and `<wbr>` tags join their text, as a browser
/// shows it (an address is written in parts); any other tag separates.
pub fn text(html: &str) -> String {
    let mut out = String::new();
    let mut tag: Option<String> = None;
    for c in html.chars() {
        match (&mut tag, c) {
            (None, '<') => tag = Some(String::new()),
            (Some(t), '>') => {
                let name = t.trim_start_matches('/').split_whitespace().next();
                if !matches!(name, Some("span" | "wbr")) {
                    out.push(' ');
                }
                tag = None;
            }
            (Some(t), c) => t.push(c),
            (None, c) => out.push(c),
        }
    }
    let decoded = out
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#38;", "&");
    decoded.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Fails, naming the rows that differ, unless two dumps of the store are the same.
pub fn unchanged(before: &[String], after: &[String], what: &str) {
    if before == after {
        return;
    }
    let gone: Vec<&String> = before.iter().filter(|l| !after.contains(l)).collect();
    let new: Vec<&String> = after.iter().filter(|l| !before.contains(l)).collect();
    let short = |v: Vec<&String>| {
        v.iter()
            .map(|l| l.chars().take(160).collect::<String>())
            .collect::<Vec<_>>()
    };
    panic!(
        "{what} changed what is stored:\n- {:?}\n+ {:?}",
        short(gone),
        short(new)
    );
}
