//! The JSON Canonicalization Scheme (RFC 8785), the byte form every signature covers (§3.1).
//!
//! Members are sorted by their names' UTF-16 code units (RFC 8785 §3.2.3), strings are escaped as
//! ECMAScript's `JSON.stringify` does (§3.2.2.2), and numbers are written as ECMAScript's
//! `Number.prototype.toString` writes a double (§3.2.2.3).

use serde_json::Value;

use crate::json::{JsonError, MAX_SAFE_INTEGER};

/// Why a value cannot be canonicalised without changing it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JcsError {
    /// An integer is beyond ±(2^53 − 1), where a double would round it.
    #[error("integer {0} is beyond ±(2^53−1); JCS would change it")]
    UnsafeInteger(String),
}

impl From<JcsError> for JsonError {
    fn from(e: JcsError) -> Self {
        match e {
            JcsError::UnsafeInteger(literal) => JsonError::IntegerOutOfRange {
                literal,
                path: String::new(),
            },
        }
    }
}

/// Canonicalises `value` into a new buffer.
pub fn canonicalize(value: &Value) -> Result<Vec<u8>, JcsError> {
    let mut out = Vec::with_capacity(256);
    write_value(value, &mut out)?;
    Ok(out)
}

/// Appends the canonical form of `value` to `out`.
pub fn write_value(value: &Value, out: &mut Vec<u8>) -> Result<(), JcsError> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                if u > MAX_SAFE_INTEGER {
                    return Err(JcsError::UnsafeInteger(u.to_string()));
                }
                // Integers within 2^53 print the same digits in ECMAScript.
                out.extend_from_slice(u.to_string().as_bytes());
            } else if let Some(i) = n.as_i64() {
                if i.unsigned_abs() > MAX_SAFE_INTEGER {
                    return Err(JcsError::UnsafeInteger(i.to_string()));
                }
                out.extend_from_slice(i.to_string().as_bytes());
            } else {
                // serde_json never holds a non-finite double.
                write_f64(n.as_f64().unwrap_or(0.0), out);
            }
        }
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(map) => write_members(map.iter().collect(), out)?,
    }
    Ok(())
}

/// Canonicalises the object `map` without the members whose names `skip` selects, without
/// copying the rest (signing leaves out `sig` and the gateway-set attributes this way).
pub fn canonicalize_object_without(
    map: &serde_json::Map<String, Value>,
    skip: impl Fn(&str) -> bool,
) -> Result<Vec<u8>, JcsError> {
    let mut out = Vec::with_capacity(256);
    write_members(map.iter().filter(|(k, _)| !skip(k)).collect(), &mut out)?;
    Ok(out)
}

fn write_members(mut members: Vec<(&String, &Value)>, out: &mut Vec<u8>) -> Result<(), JcsError> {
    // RFC 8785 §3.2.3: compare names as arrays of UTF-16 code units. Names made only of
    // characters below U+E000 sort the same by UTF-8 bytes, which is much cheaper.
    if members
        .iter()
        .all(|(k, _)| k.chars().all(|c| c < '\u{E000}'))
    {
        members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    } else {
        members.sort_unstable_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
    }
    out.push(b'{');
    for (i, (k, v)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(k, out);
        out.push(b':');
        write_value(v, out)?;
    }
    out.push(b'}');
    Ok(())
}

/// Writes a double as ECMAScript's `Number.prototype.toString` does (RFC 8785 §3.2.2.3).
pub fn write_f64(f: f64, out: &mut Vec<u8>) {
    out.extend_from_slice(format_f64(f).as_bytes());
}

/// Formats a double as ECMAScript's `Number.prototype.toString` does. `-0` is `0`.
pub fn format_f64(f: f64) -> String {
    if f == 0.0 {
        return "0".to_owned();
    }
    let mut buf = ryu_js::Buffer::new();
    buf.format_finite(f).to_owned()
}

/// Writes a string as ECMAScript's `JSON.stringify` does (RFC 8785 §3.2.2.2).
pub fn write_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0A => b"\\n",
            0x0C => b"\\f",
            0x0D => b"\\r",
            0x00..=0x1F => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xF)]);
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn es6_number_samples_from_the_upstream_readme() {
        let cases = [
            (0x4340000000000001u64, "9007199254740994"),
            (0x4340000000000002, "9007199254740996"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x8000000000000000, "0"),
            (0, "0"),
        ];
        for (bits, expected) in cases {
            assert_eq!(format_f64(f64::from_bits(bits)), expected, "{bits:x}");
        }
    }

    #[test]
    fn sorts_by_utf16_code_units() {
        // U+1F602 (surrogates D83D DE02) sorts before U+FB33 in UTF-16, after it in UTF-8.
        let v: Value = serde_json::json!({"\u{fb33}": 1, "\u{1f602}": 2});
        let c = String::from_utf8(canonicalize(&v).unwrap()).unwrap();
        assert_eq!(c, "{\"\u{1f602}\":2,\"\u{fb33}\":1}");
    }

    #[test]
    fn refuses_unsafe_integers_built_in_code() {
        let v = serde_json::json!({"n": 9_007_199_254_740_993u64});
        assert!(canonicalize(&v).is_err());
    }
}
