//! `content_hash` (§3.2): `"blake3:"` + lowercase hex BLAKE3-256 over the whitespace-trimmed body,
//! the frontmatter, both `---` delimiters and any trailing `_Dispatched by …_` attribution line
//! excluded.
//!
//! Our reading of what §3.2 leaves open (G-AS-8): the body is UTF-8 bytes; "whitespace" is the
//! ASCII set (space, tab, LF, CR, FF, VT); no other normalisation (CRLF stays CRLF); the footer is
//! the last line when it matches `^_Dispatched by .*_$`. The producer hashes with the very same
//! function the verifier uses, so a body that genuinely ends in such a line still verifies.
//! The hash is integrity and deduplication, never authentication (§11).
//!
//! One tolerance on the verifier's side: a checkout that turned LF into CRLF (Git for Windows'
//! `core.autocrlf=true` on a share without our `.gitattributes`) still verifies, because a body
//! whose only difference is CRLF line ends is the body the producer hashed.

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
    /// The declared hash does not match: deliver with a warning (G-AS-8).
    Mismatch,
    /// The declared value is not `blake3:` followed by 64 lowercase hex digits (§3.2), so it
    /// cannot be checked at all.
    BadForm,
}

/// Whether `declared` has §3.2's form: `blake3:` and 64 lowercase hex digits.
pub fn is_well_formed(declared: &str) -> bool {
    declared.strip_prefix(PREFIX).is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

impl HashCheck {
    /// Checks `body` against `declared`.
    pub fn of(declared: Option<&str>, body: &str) -> HashCheck {
        match declared {
            None => HashCheck::Absent,
            Some(d) if !is_well_formed(d) => HashCheck::BadForm,
            Some(d) if d == content_hash(body) => HashCheck::Verified,
            Some(d) if body.contains("\r\n") && d == content_hash(&body.replace("\r\n", "\n")) => {
                HashCheck::Verified
            }
            Some(_) => HashCheck::Mismatch,
        }
    }

    /// The lowercase name used in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            HashCheck::Absent => "absent",
            HashCheck::Verified => "verified",
            HashCheck::Mismatch => "mismatch",
            HashCheck::BadForm => "bad_form",
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
