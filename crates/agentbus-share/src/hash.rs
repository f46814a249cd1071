//! `content_hash` (§3.2): `"blake3:"` + lowercase hex BLAKE3-256 over the whitespace-trimmed body,
//! the frontmatter, both `---` delimiters and any trailing `_Dispatched by …_` attribution line
//! excluded.
//!
//! Our reading of what §3.2 leaves open (G-AS-8): the body is UTF-8 bytes; "whitespace" is the
//! ASCII set (space, tab, LF, CR, FF, VT); no other normalisation (CRLF stays CRLF); the footer is
//! the last line when it matches `^_Dispatched by .*_$`. The producer hashes with the very same
//! function the verifier uses, so a body that genuinely ends in such a line still verifies.
//! The hash is integrity and deduplication, never authentication (§11).

/// The prefix of every `content_hash` value.
pub const PREFIX: &str = "blake3:";

/// The attribution footer's opening.
const FOOTER_START: &str = "_Dispatched by ";

fn is_ascii_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Trims the ASCII whitespace set from both ends.
pub fn trim(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_ascii() && is_ascii_ws(c as u8))
}

/// Whether `line` is an attribution footer `_Dispatched by …_`.
pub fn is_footer(line: &str) -> bool {
    let line = line.strip_suffix('\r').unwrap_or(line);
    line.len() > FOOTER_START.len() && line.starts_with(FOOTER_START) && line.ends_with('_')
}

/// The §3.2 preimage: the trimmed body with a trailing footer line removed and re-trimmed.
pub fn preimage(body: &str) -> &str {
    let t = trim(body);
    let last_start = t.rfind('\n').map_or(0, |i| i + 1);
    if is_footer(&t[last_start..]) {
        trim(&t[..last_start])
    } else {
        t
    }
}

/// The `content_hash` value of a body.
pub fn content_hash(body: &str) -> String {
    let digest = blake3::hash(preimage(body).as_bytes());
    format!("{PREFIX}{}", digest.to_hex())
}

/// The outcome of checking a body against its declared hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HashCheck {
    /// No `content_hash` was declared (the §3.1 default, null).
    Absent,
    /// The declared hash matches the body.
    Verified,
    /// The declared hash does not match (or is not a `blake3:` value): deliver with a warning
    /// (G-AS-8).
    Mismatch,
}

impl HashCheck {
    /// Checks `body` against `declared`.
    pub fn of(declared: Option<&str>, body: &str) -> HashCheck {
        match declared {
            None => HashCheck::Absent,
            Some(d) if d.eq_ignore_ascii_case(&content_hash(body)) => HashCheck::Verified,
            Some(_) => HashCheck::Mismatch,
        }
    }

    /// The lowercase name used in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            HashCheck::Absent => "absent",
            HashCheck::Verified => "verified",
            HashCheck::Mismatch => "mismatch",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_and_trim() {
        let plain = "\n  Hello\nworld \n";
        let footed = "Hello\nworld\n\n_Dispatched by agentbus 0.1.0_\n";
        assert_eq!(content_hash(plain), content_hash(footed));
        assert_ne!(content_hash("Hello\nworld!"), content_hash(plain));
        assert_eq!(preimage("_Dispatched by x_"), "");
        assert_eq!(preimage("a\n_not a footer"), "a\n_not a footer");
    }
}
