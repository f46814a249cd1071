//! Redaction of credentials before a text is stored or hashed (LM-18, G-LM-13).
//!
//! The store is a plain file every session on the machine reads, and its lines reach prompts and
//! terminals, so a token pasted into a tell must not land there. The rules are a documented list
//! (`docs/local.md`), applied in order, each replacing the secret with `[REDACTED:<rule>]`:
//!
//! 1. PEM private key blocks (`-----BEGIN … PRIVATE KEY-----` … `-----END … -----`);
//! 2. well-known token prefixes followed by at least 16 token characters (GitHub `ghp_`, `gho_`,
//!    `ghu_`, `ghs_`, `ghr_`, `github_pat_`; OpenAI/Anthropic `sk-`; Slack `xox?-`; GitLab
//!    `glpat-`; npm `npm_`; Hugging Face `hf_`; Google `AIza`; AWS `AKIA`/`ASIA`);
//! 3. a password in a URL (`scheme://user:password@host`);
//! 4. `Bearer <token>` and `Basic <token>`;
//! 5. the value after a secret-sounding key (`password`, `passwd`, `secret`, `token`,
//!    `api_key`, `apikey`, `access_key`, `secret_key`, `client_secret`, `private_key`) and `=` or
//!    `:`, when the value is at least 8 characters.
//!
//! No regular-expression engine is needed: each rule is a small scanner over the text.

/// Token prefixes and the rule name each reports.
const PREFIXES: &[(&str, &str)] = &[
    ("github_pat_", "github"),
    ("ghp_", "github"),
    ("gho_", "github"),
    ("ghu_", "github"),
    ("ghs_", "github"),
    ("ghr_", "github"),
    ("sk-", "api-key"),
    ("xoxb-", "slack"),
    ("xoxp-", "slack"),
    ("xoxa-", "slack"),
    ("xoxr-", "slack"),
    ("xoxs-", "slack"),
    ("xoxo-", "slack"),
    ("glpat-", "gitlab"),
    ("npm_", "npm"),
    ("hf_", "huggingface"),
    ("AIza", "google"),
    ("AKIA", "aws"),
    ("ASIA", "aws"),
];

/// Keys whose value is a secret.
const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "api-key",
    "access_key",
    "secret_key",
    "client_secret",
    "private_key",
];

/// The least token characters after a known prefix for it to count as a token.
const MIN_TOKEN: usize = 16;
/// The least characters of a value after a secret key for it to count.
const MIN_VALUE: usize = 8;

/// Returns `text` with every credential the rules find replaced.
pub fn redact(text: &str) -> String {
    let text = redact_pem(text);
    let text = redact_prefixed_tokens(&text);
    let text = redact_url_passwords(&text);
    let text = redact_auth_schemes(&text);
    redact_key_values(&text)
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-')
}

fn redact_pem(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let header_end = rest[start..].find("PRIVATE KEY-----");
        let Some(h) = header_end else { break };
        let after_header = start + h + "PRIVATE KEY-----".len();
        // The block ends at the matching END line, or at the end of the text when it was cut.
        let end = rest[after_header..]
            .find("-----END ")
            .and_then(|e| {
                let from = after_header + e;
                rest[from + 9..].find("-----").map(|t| from + 9 + t + 5)
            })
            .unwrap_or(rest.len());
        out.push_str(&rest[..start]);
        out.push_str("[REDACTED:private-key]");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn redact_prefixed_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let bytes = text.as_bytes();
    while i < text.len() {
        let at_word_start = i == 0 || !is_token_char(char::from(bytes[i - 1]));
        if at_word_start && let Some((len, rule)) = token_at(&text[i..]) {
            out.push_str("[REDACTED:");
            out.push_str(rule);
            out.push(']');
            i += len;
            continue;
        }
        let c = text[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The length of a token starting `s`, with its rule, if one does.
fn token_at(s: &str) -> Option<(usize, &'static str)> {
    for (prefix, rule) in PREFIXES {
        if let Some(rest) = s.strip_prefix(prefix) {
            let n = rest.chars().take_while(|&c| is_token_char(c)).count();
            if n >= MIN_TOKEN {
                return Some((prefix.len() + n, rule));
            }
        }
    }
    None
}

fn redact_url_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(p) = rest.find("://") {
        let auth_start = p + 3;
        out.push_str(&rest[..auth_start]);
        let tail = &rest[auth_start..];
        let authority_end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(tail.len());
        let authority = &tail[..authority_end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at && at > colon + 1 => {
                out.push_str(&authority[..=colon]);
                out.push_str("[REDACTED:url-password]");
                out.push_str(&authority[at..]);
                rest = &tail[authority_end..];
            }
            _ => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

fn redact_auth_schemes(text: &str) -> String {
    let mut out = text.to_owned();
    for scheme in ["Bearer ", "bearer ", "Basic "] {
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(p) = rest.find(scheme) {
            let after = &rest[p + scheme.len()..];
            let n = after
                .chars()
                .take_while(|&c| is_token_char(c) || matches!(c, '.' | '=' | '+' | '/' | '~'))
                .map(char::len_utf8)
                .sum::<usize>();
            result.push_str(&rest[..p + scheme.len()]);
            if n >= MIN_TOKEN {
                result.push_str("[REDACTED:auth]");
                rest = &after[n..];
            } else {
                rest = after;
            }
        }
        result.push_str(rest);
        out = result;
    }
    out
}

fn redact_key_values(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if let Some((value_start, value_end)) = secret_value_at(text, &lower, i) {
            out.push_str(&text[i..value_start]);
            out.push_str("[REDACTED:secret]");
            i = value_end;
            continue;
        }
        let c = text[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Where the secret value after a key at byte `i` starts and ends, if a key starts there.
fn secret_value_at(text: &str, lower: &str, i: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
        return None;
    }
    let key = SECRET_KEYS.iter().find(|k| lower[i..].starts_with(*k))?;
    let mut j = i + key.len();
    // Allow a closing quote of a JSON key, spaces, then `=` or `:`, then spaces and a quote.
    while j < text.len() && matches!(bytes[j], b'"' | b'\'' | b' ') {
        j += 1;
    }
    if j >= text.len() || !matches!(bytes[j], b'=' | b':') {
        return None;
    }
    j += 1;
    while j < text.len() && matches!(bytes[j], b'"' | b'\'' | b' ') {
        j += 1;
    }
    let start = j;
    let n: usize = text[start..]
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, '"' | '\'' | ',' | ';' | '&'))
        .map(char::len_utf8)
        .sum();
    if text[start..start + n].chars().count() < MIN_VALUE
        || text[start..start + n].starts_with("[REDACTED")
    {
        return None;
    }
    Some((start, start + n))
}
