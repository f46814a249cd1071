//! The harness: the kit's console harness (`agentbus_testkit::console`: a real gateway with the
//! console mounted, agents with keys, signed envelopes, console sessions driven over real HTTP),
//! and what only these tests add: a page's text as a person reads it, and a check that a request
//! changed nothing stored.

pub use agentbus_testkit::Agent;
pub use agentbus_testkit::console::*;
pub use agentbus_testkit::gateway::sign;

/// Text of an HTML page with tags dropped and entities of the escaper decoded, whitespace
/// collapsed: what a person reads.
pub fn text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            c if !in_tag => out.push(c),
            _ => {}
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
