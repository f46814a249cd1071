//! A lossless projection of envelopes onto CloudEvents-valid attributes, and back.
//!
//! §1 promises that any CloudEvents SDK parses an envelope, but §2.1's names (`conversation_id`,
//! `to_id`, `x_…`) break CloudEvents 1.0's attribute-name rule (`[a-z0-9]` only), and CloudEvents
//! extension values are scalars, while `budget`, `usage` and `hops` are objects and arrays. The
//! official Python SDK refuses such events (checklist G-WP-1). Decision 1 keeps the spec's names on
//! the wire, because the signatures cover them, and offers this projection for CloudEvents tooling:
//!
//! - the CloudEvents core attributes and `data` keep their names and values;
//! - every other name loses its underscores (`conversation_id` → `conversationid`); when that
//!   collides with another name, or with `abnames`/`abjson`, a number is appended;
//! - every value that is not a string is written as its JSON text;
//! - two string attributes record what changed, so the projection reverses exactly:
//!   `abnames` (a JSON object: projected name → original name, for renamed attributes) and
//!   `abjson` (a JSON array of the projected names whose values are JSON text).
//!
//! [`from_cloudevent`] undoes all of it, so a signature verifies after a round trip.

use serde_json::{Map, Value};

use crate::json::{self, JsonError};

/// The CloudEvents 1.0 context attributes and `data`, whose names are kept.
pub const CORE: &[&str] = &[
    "specversion",
    "id",
    "source",
    "type",
    "time",
    "datacontenttype",
    "dataschema",
    "subject",
    "data",
    "data_base64",
];

/// The attribute that maps projected names back to the original ones.
pub const NAMES_ATTR: &str = "abnames";
/// The attribute that lists projected attributes whose values are JSON text.
pub const JSON_ATTR: &str = "abjson";

/// Why a CloudEvent is not a projection of an envelope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectionError {
    /// `abnames` or `abjson` is not what the projection writes.
    #[error("`{0}` is not a projection map written by AgentBus")]
    BadMap(&'static str),
    /// A value listed in `abjson` is not I-JSON text.
    #[error("`{name}` is listed in abjson but is not JSON text: {source}")]
    BadJson {
        /// The projected attribute.
        name: String,
        /// The parse failure.
        source: JsonError,
    },
}

/// Projects an envelope's attributes onto CloudEvents-valid names and values.
pub fn to_cloudevent(envelope: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    let mut names = Map::new();
    let mut json_names = Vec::new();
    let mut taken: Vec<String> = envelope
        .keys()
        .filter(|k| is_ce_name(k) && *k != NAMES_ATTR && *k != JSON_ATTR)
        .cloned()
        .collect();
    taken.push(NAMES_ATTR.to_owned());
    taken.push(JSON_ATTR.to_owned());
    for (name, value) in envelope {
        if CORE.contains(&name.as_str()) {
            out.insert(name.clone(), value.clone());
            continue;
        }
        let projected = if is_ce_name(name) && name != NAMES_ATTR && name != JSON_ATTR {
            name.clone()
        } else {
            let base: String = name
                .chars()
                .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                .collect();
            let base = if base.is_empty() {
                "ext".to_owned()
            } else {
                base
            };
            let mut candidate = base.clone();
            let mut n = 1;
            while taken.contains(&candidate) || CORE.contains(&candidate.as_str()) {
                candidate = format!("{base}{n}");
                n += 1;
            }
            taken.push(candidate.clone());
            names.insert(candidate.clone(), Value::String(name.clone()));
            candidate
        };
        let value = match value {
            Value::String(_) => value.clone(),
            other => {
                json_names.push(Value::String(projected.clone()));
                Value::String(other.to_string())
            }
        };
        out.insert(projected, value);
    }
    if !names.is_empty() {
        out.insert(
            NAMES_ATTR.to_owned(),
            Value::String(Value::Object(names).to_string()),
        );
    }
    if !json_names.is_empty() {
        out.insert(
            JSON_ATTR.to_owned(),
            Value::String(Value::Array(json_names).to_string()),
        );
    }
    out
}

/// Restores the envelope from its projection.
pub fn from_cloudevent(event: &Map<String, Value>) -> Result<Map<String, Value>, ProjectionError> {
    let names: Map<String, Value> = match event.get(NAMES_ATTR) {
        None => Map::new(),
        Some(Value::String(s)) => {
            json::parse_object(s.as_bytes()).map_err(|_| ProjectionError::BadMap(NAMES_ATTR))?
        }
        Some(_) => return Err(ProjectionError::BadMap(NAMES_ATTR)),
    };
    let json_names: Vec<String> = match event.get(JSON_ATTR) {
        None => Vec::new(),
        Some(Value::String(s)) => match json::parse(s.as_bytes()) {
            Ok(Value::Array(items)) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    _ => Err(ProjectionError::BadMap(JSON_ATTR)),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(ProjectionError::BadMap(JSON_ATTR)),
        },
        Some(_) => return Err(ProjectionError::BadMap(JSON_ATTR)),
    };
    let mut out = Map::new();
    for (name, value) in event {
        if name == NAMES_ATTR || name == JSON_ATTR {
            continue;
        }
        let original = match names.get(name) {
            Some(Value::String(o)) => o.clone(),
            Some(_) => return Err(ProjectionError::BadMap(NAMES_ATTR)),
            None => name.clone(),
        };
        let value = if json_names.contains(name) {
            let text = value.as_str().ok_or(ProjectionError::BadMap(JSON_ATTR))?;
            json::parse(text.as_bytes()).map_err(|source| ProjectionError::BadJson {
                name: name.clone(),
                source,
            })?
        } else {
            value.clone()
        };
        out.insert(original, value);
    }
    Ok(out)
}

/// Whether a name is a valid CloudEvents 1.0 attribute name.
pub fn is_ce_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_and_names_are_valid() {
        let env = json!({
            "specversion": "1.0", "id": "msg_01J9ZK6Q8R2M3N4P5Q6R7S8T9V", "type": "agentbus.message.v1",
            "conversation_id": "cnv_01J9ZK6Q8R2M3N4P5Q6R7S8T9W", "conversationid": "collides",
            "x_foo": {"a": [1, 2]}, "abnames": "mine", "sequence": 4182, "budget": {"currency": "USD", "max": "2.00"},
            "data": {"text": "hi"}
        });
        let map = env.as_object().unwrap();
        let ce = to_cloudevent(map);
        for (k, v) in &ce {
            assert!(is_ce_name(k), "{k}");
            if k != "data" {
                assert!(v.is_string(), "{k} must be a string");
            }
        }
        assert_eq!(&from_cloudevent(&ce).unwrap(), map);
    }
}
