//! A strict I-JSON (RFC 7493) parser for everything that is signed.
//!
//! A common JSON parser silently keeps the last of two duplicate member names and rounds integers
//! above 2^53 to the nearest double; a signature verified after either would cover a value the
//! sender never wrote. This parser refuses, instead of changing:
//!
//! - duplicate member names at any depth (RFC 7493 §2.3),
//! - escapes that form lone surrogates (RFC 7493 §2.1),
//! - integer literals beyond ±(2^53 − 1) and numbers that overflow a double (RFC 7493 §2.2),
//! - nesting deeper than [`MAX_DEPTH`] (so hostile input cannot exhaust the stack),
//! - anything RFC 8259 refuses (leading zeros, trailing commas, raw control characters, …).
//!
//! It produces a [`serde_json::Value`] whose objects keep the sender's member order.

use serde_json::{Map, Number, Value};

/// The deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 64;

/// The largest integer magnitude a double represents exactly, and so the largest I-JSON allows.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why a text is not I-JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// The text breaks the JSON grammar.
    #[error("invalid JSON at byte {offset}: {reason}")]
    Syntax {
        /// Byte offset of the problem.
        offset: usize,
        /// What was expected or found.
        reason: &'static str,
    },
    /// An object has the same member name twice.
    #[error("duplicate member name {name:?} in {} (RFC 7493 §2.3)", place(path))]
    DuplicateKey {
        /// The repeated name.
        name: String,
        /// JSON Pointer of the object holding it.
        path: String,
    },
    /// A `\u` escape forms a lone surrogate.
    #[error("lone surrogate escape at byte {offset} (RFC 7493 §2.1)")]
    LoneSurrogate {
        /// Byte offset of the escape.
        offset: usize,
    },
    /// An integer literal is beyond what a double holds exactly.
    #[error(
        "integer {literal} at {} is beyond ±(2^53−1) (RFC 7493 §2.2); send it as a string",
        place(path)
    )]
    IntegerOutOfRange {
        /// The literal as written.
        literal: String,
        /// JSON Pointer of the value.
        path: String,
    },
    /// A number overflows a double.
    #[error(
        "number {literal} at {} overflows a double (RFC 7493 §2.2)",
        place(path)
    )]
    NumberOutOfRange {
        /// The literal as written.
        literal: String,
        /// JSON Pointer of the value.
        path: String,
    },
    /// Nesting is deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {MAX_DEPTH} levels at byte {offset}")]
    TooDeep {
        /// Byte offset where the limit was crossed.
        offset: usize,
    },
}

/// A JSON Pointer for messages: the empty pointer is the top level.
fn place(path: &str) -> &str {
    if path.is_empty() {
        "the top-level value"
    } else {
        path
    }
}

impl JsonError {
    /// The catalogue code for every I-JSON failure.
    pub fn code(&self) -> crate::Code {
        crate::Code::MalformedJson
    }
}

/// Parses `input` as one I-JSON value.
pub fn parse(input: &[u8]) -> Result<Value, JsonError> {
    let mut p = Parser {
        bytes: input,
        pos: 0,
        path: Vec::new(),
    };
    // RFC 8259 §8.1: a UTF-8 byte order mark may be ignored; I-JSON forbids it, so refuse.
    p.skip_ws();
    let value = p.value(0)?;
    p.skip_ws();
    if p.pos != input.len() {
        return Err(p.syntax("trailing characters after the value"));
    }
    Ok(value)
}

/// Parses `input` and requires a JSON object at the top.
pub fn parse_object(input: &[u8]) -> Result<Map<String, Value>, JsonError> {
    match parse(input)? {
        Value::Object(map) => Ok(map),
        _ => Err(JsonError::Syntax {
            offset: 0,
            reason: "expected a JSON object at the top level",
        }),
    }
}

/// Checks that an already-built value is within I-JSON's number range, so that canonicalising it
/// cannot change it. Values from [`parse`] always pass.
pub fn check_numbers(value: &Value) -> Result<(), JsonError> {
    fn walk(v: &Value, path: &mut Vec<String>) -> Result<(), JsonError> {
        match v {
            Value::Number(n) => {
                let too_big = match (n.as_u64(), n.as_i64()) {
                    (Some(u), _) => u > MAX_SAFE_INTEGER,
                    (None, Some(i)) => i.unsigned_abs() > MAX_SAFE_INTEGER,
                    _ => false,
                };
                if too_big {
                    return Err(JsonError::IntegerOutOfRange {
                        literal: n.to_string(),
                        path: pointer(path),
                    });
                }
                Ok(())
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    path.push(i.to_string());
                    walk(item, path)?;
                    path.pop();
                }
                Ok(())
            }
            Value::Object(map) => {
                for (k, item) in map {
                    path.push(k.clone());
                    walk(item, path)?;
                    path.pop();
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    walk(value, &mut Vec::new())
}

/// Renders a path as an RFC 6901 JSON Pointer.
pub fn pointer(segments: &[String]) -> String {
    let mut out = String::new();
    for s in segments {
        out.push('/');
        out.push_str(&s.replace('~', "~0").replace('/', "~1"));
    }
    out
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: Vec<String>,
}

impl Parser<'_> {
    fn syntax(&self, reason: &'static str) -> JsonError {
        JsonError::Syntax {
            offset: self.pos,
            reason,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect_literal(&mut self, lit: &'static [u8], value: Value) -> Result<Value, JsonError> {
        if self.bytes[self.pos..].starts_with(lit) {
            self.pos += lit.len();
            Ok(value)
        } else {
            Err(self.syntax("unknown literal"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
        match self.peek() {
            None => Err(self.syntax("unexpected end of input")),
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.expect_literal(b"true", Value::Bool(true)),
            Some(b'f') => self.expect_literal(b"false", Value::Bool(false)),
            Some(b'n') => self.expect_literal(b"null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.syntax("expected a value")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonError> {
        if depth > MAX_DEPTH {
            return Err(JsonError::TooDeep { offset: self.pos });
        }
        self.pos += 1;
        let mut map = Map::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("expected a member name"));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.syntax("expected ':' after a member name"));
            }
            self.pos += 1;
            self.skip_ws();
            self.path.push(key);
            let value = self.value(depth)?;
            let key = self.path.pop().unwrap_or_default();
            if map.contains_key(&key) {
                return Err(JsonError::DuplicateKey {
                    name: key,
                    path: pointer(&self.path),
                });
            }
            map.insert(key, value);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.syntax("expected ',' or '}' in an object")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonError> {
        if depth > MAX_DEPTH {
            return Err(JsonError::TooDeep { offset: self.pos });
        }
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            self.path.push(items.len().to_string());
            let item = self.value(depth)?;
            self.path.pop();
            items.push(item);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.syntax("expected ',' or ']' in an array")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.syntax("truncated \\u escape"))?;
        let mut v = 0u32;
        for &d in digits {
            let n = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                b'A'..=b'F' => d - b'A' + 10,
                _ => return Err(self.syntax("invalid hex digit in \\u escape")),
            };
            v = (v << 4) | u32::from(n);
        }
        self.pos += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        // The opening quote.
        self.pos += 1;
        let mut out = String::new();
        loop {
            // Copy the longest run of plain bytes at once; it is validated as UTF-8 below.
            let start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            if self.pos > start {
                let chunk = std::str::from_utf8(&self.bytes[start..self.pos]).map_err(|e| {
                    JsonError::Syntax {
                        offset: start + e.valid_up_to(),
                        reason: "invalid UTF-8",
                    }
                })?;
                out.push_str(chunk);
            }
            match self.peek() {
                None => return Err(self.syntax("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    let escape_at = self.pos;
                    self.pos += 1;
                    let c = self
                        .peek()
                        .ok_or_else(|| self.syntax("unterminated escape"))?;
                    self.pos += 1;
                    match c {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let ch = if (0xD800..0xDC00).contains(&hi) {
                                if self.bytes.get(self.pos..self.pos + 2) != Some(b"\\u") {
                                    return Err(JsonError::LoneSurrogate { offset: escape_at });
                                }
                                self.pos += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(JsonError::LoneSurrogate { offset: escape_at });
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else if (0xDC00..0xE000).contains(&hi) {
                                return Err(JsonError::LoneSurrogate { offset: escape_at });
                            } else {
                                hi
                            };
                            // Every value reaching here is a valid scalar value.
                            out.push(
                                char::from_u32(ch)
                                    .ok_or(JsonError::LoneSurrogate { offset: escape_at })?,
                            );
                        }
                        _ => {
                            self.pos = escape_at;
                            return Err(self.syntax("invalid escape"));
                        }
                    }
                }
                Some(_) => return Err(self.syntax("raw control character in a string")),
            }
        }
    }

    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if matches!(self.peek(), Some(b'0'..=b'9')) {
                    return Err(self.syntax("leading zero in a number"));
                }
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.syntax("expected a digit")),
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            integer = false;
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.syntax("expected a digit after '.'"));
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            integer = false;
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.syntax("expected a digit in the exponent"));
            }
            self.digits();
        }
        // The slice holds only ASCII digits, signs, '.', 'e' and 'E'.
        let literal = std::str::from_utf8(&self.bytes[start..self.pos]).unwrap_or_default();
        if integer {
            let magnitude = literal.trim_start_matches('-');
            let in_range = magnitude.len() <= 16
                && magnitude
                    .parse::<u64>()
                    .is_ok_and(|m| m <= MAX_SAFE_INTEGER);
            if !in_range {
                return Err(JsonError::IntegerOutOfRange {
                    literal: literal.to_owned(),
                    path: pointer(&self.path),
                });
            }
            let n = if literal.starts_with('-') {
                // "-0" is the double negative zero; JCS writes it as 0, like every zero.
                let i: i64 = literal.parse().unwrap_or(0);
                if i == 0 {
                    Number::from(0u64)
                } else {
                    Number::from(i)
                }
            } else {
                Number::from(literal.parse::<u64>().unwrap_or(0))
            };
            return Ok(Value::Number(n));
        }
        // Rust's float parsing is correctly rounded (the nearest double, ties to even).
        let f: f64 = literal
            .parse()
            .map_err(|_| self.syntax("unparseable number"))?;
        match Number::from_f64(f) {
            Some(n) if f.is_finite() => Ok(Value::Number(n)),
            _ => Err(JsonError::NumberOutOfRange {
                literal: literal.to_owned(),
                path: pointer(&self.path),
            }),
        }
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> JsonError {
        parse(s.as_bytes()).expect_err(s)
    }

    #[test]
    fn refuses_duplicates_at_any_depth() {
        assert!(matches!(
            err(r#"{"a":1,"a":2}"#),
            JsonError::DuplicateKey { .. }
        ));
        let e = err(r#"{"x":[{"b":1,"b":1}]}"#);
        assert_eq!(
            e,
            JsonError::DuplicateKey {
                name: "b".into(),
                path: "/x/0".into()
            }
        );
        // Names equal after unescaping are duplicates too.
        assert!(matches!(
            err(r#"{"a":1,"\u0061":2}"#),
            JsonError::DuplicateKey { .. }
        ));
    }

    #[test]
    fn refuses_lone_surrogates() {
        assert!(matches!(
            err(r#""\ud800""#),
            JsonError::LoneSurrogate { .. }
        ));
        assert!(matches!(
            err(r#""\udc00x""#),
            JsonError::LoneSurrogate { .. }
        ));
        assert!(matches!(
            err(r#""\ud800\u0041""#),
            JsonError::LoneSurrogate { .. }
        ));
        assert_eq!(parse(br#""\ud83d\ude02""#), Ok(Value::String("😂".into())));
    }

    #[test]
    fn refuses_unsafe_integers_but_keeps_safe_ones() {
        assert!(matches!(
            err("9007199254740993"),
            JsonError::IntegerOutOfRange { .. }
        ));
        assert!(matches!(
            err("9007199254740992"),
            JsonError::IntegerOutOfRange { .. }
        ));
        assert!(matches!(
            err("-9007199254740992"),
            JsonError::IntegerOutOfRange { .. }
        ));
        assert!(matches!(
            err("123456789012345678901234567890"),
            JsonError::IntegerOutOfRange { .. }
        ));
        assert_eq!(
            parse(b"9007199254740991").unwrap().as_u64(),
            Some(MAX_SAFE_INTEGER)
        );
        assert_eq!(
            parse(b"-9007199254740991").unwrap().as_i64(),
            Some(-(MAX_SAFE_INTEGER as i64))
        );
        // A float literal is a double by definition and stays one.
        assert!(parse(b"1E30").unwrap().is_f64());
        assert!(matches!(err("1e400"), JsonError::NumberOutOfRange { .. }));
    }

    /// Found by the `ijson_jcs` fuzz target: a fractional literal above 2^53 is a double, kept; its
    /// canonical form is integer digits, which this reader refuses as a literal (by design,
    /// `docs/protocol.md`, "I-JSON input"). Signing covers those bytes; nothing re-reads them.
    #[test]
    fn a_fractional_literal_beyond_2_53_canonicalises_to_digits_it_would_refuse() {
        let v = parse(b"[33333338888888888833.331111111111111111]").unwrap();
        let canonical = crate::jcs::canonicalize(&v).unwrap();
        assert_eq!(canonical, b"[33333338888888890000]");
        assert!(matches!(
            parse(&canonical),
            Err(JsonError::IntegerOutOfRange { .. })
        ));
    }

    #[test]
    fn refuses_what_rfc_8259_refuses() {
        for bad in [
            "01",
            "1.",
            ".5",
            "+1",
            "[1,]",
            "{\"a\":1,}",
            "\"\u{1}\"",
            "nul",
            "[1 2]",
            "\"\\x\"",
            "{} {}",
            "\u{feff}{}",
            "",
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad:?} should fail");
        }
        assert!(matches!(
            parse(b"\"\xff\""),
            Err(JsonError::Syntax {
                reason: "invalid UTF-8",
                ..
            })
        ));
    }

    #[test]
    fn bounds_depth() {
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(matches!(err(&deep), JsonError::TooDeep { .. }));
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(ok.as_bytes()).is_ok());
    }

    #[test]
    fn keeps_member_order() {
        let v = parse(br#"{"z":1,"a":2}"#).unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["z", "a"]);
    }
}
