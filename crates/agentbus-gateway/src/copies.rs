//! Delivered copies: a stored message as one inbox receives it (its `data` opened under the
//! tenant key, the per-copy `to_id` and `sequence` added). Above the auth layer, whose tenant keys
//! open the data.

use serde_json::{Map, Value, json};

use agentbus_protocol::Code;
use agentbus_store::MessageRow;

use crate::error::{ApiError, ApiResult};
use crate::state::App;

impl App {
    /// The delivered copy of a stored message for one inbox: the stored attributes, `data`
    /// opened, and the per-copy `to_id` and `sequence`.
    pub async fn delivered_copy(
        &self,
        m: &MessageRow,
        to_id: &str,
        sequence: u64,
    ) -> ApiResult<Value> {
        let raw = self
            .delivered_copy_raw(&m.tenant_id, &m.attrs, &m.data, to_id, sequence)
            .await?;
        Ok(serde_json::from_str(raw.get()).unwrap_or(Value::Null))
    }

    /// [`App::delivered_copy`] as JSON text, built by appending `data`, `to_id` and `sequence` to
    /// the stored attribute text: every delivery pays for this, and parsing the attributes and
    /// `data` only to print them again cost more than the rest of the delivery.
    /// `attrs` and `sealed` are the stored attribute text and sealed `data` of a message of
    /// `tenant_id`.
    pub async fn delivered_copy_raw(
        &self,
        tenant_id: &str,
        attrs: &str,
        sealed: &[u8],
        to_id: &str,
        sequence: u64,
    ) -> ApiResult<Box<serde_json::value::RawValue>> {
        let key = self.tenant_key(tenant_id).await?;
        let unusable = || {
            ApiError::new(
                Code::StorageUnavailable,
                "stored data does not open under its tenant key",
            )
        };
        let data = key.open(sealed).ok_or_else(unusable)?;
        let data = std::str::from_utf8(&data).map_err(|_| unusable())?;
        let text = delivered_text(attrs, data, to_id, sequence);
        serde_json::value::RawValue::from_string(text).map_err(|_| unusable())
    }
}

/// The delivered copy's text: the stored attribute object `attrs` with `data` (JSON text),
/// `to_id` and `sequence` appended. The stored attributes never hold those three names (the
/// publish path strips them); a text that might (a name appears anywhere in it) is parsed and
/// rebuilt instead, which gives the same document.
fn delivered_text(attrs: &str, data: &str, to_id: &str, sequence: u64) -> String {
    let to_id = Value::from(to_id).to_string();
    let head = attrs.trim_end().strip_suffix('}').filter(|_| {
        !["\"data\"", "\"to_id\"", "\"sequence\""]
            .iter()
            .any(|k| attrs.contains(k))
    });
    match head {
        Some(head) => {
            let mut s = String::with_capacity(attrs.len() + data.len() + to_id.len() + 48);
            s.push_str(head);
            if head.trim_end() != "{" {
                s.push(',');
            }
            s.push_str("\"data\":");
            s.push_str(data);
            s.push_str(",\"to_id\":");
            s.push_str(&to_id);
            s.push_str(",\"sequence\":");
            s.push_str(&sequence.to_string());
            s.push('}');
            s
        }
        None => {
            let mut map: Map<String, Value> = serde_json::from_str(attrs).unwrap_or_default();
            map.insert(
                "data".into(),
                serde_json::from_str(data).unwrap_or(Value::Null),
            );
            map.insert(
                "to_id".into(),
                serde_json::from_str(&to_id).unwrap_or_default(),
            );
            map.insert("sequence".into(), json!(sequence));
            Value::Object(map).to_string()
        }
    }
}

#[cfg(test)]
mod delivered_text_tests {
    use super::*;

    /// The splice gives the same document, key order included, as parsing the stored attributes
    /// and inserting the three names; attribute texts that mention them take the parse path.
    #[test]
    fn splicing_matches_rebuilding() {
        let cases = [
            r#"{}"#,
            r#"{"specversion":"1.0","id":"msg_1","source":"agent://a/b/c","subject":"x"}"#,
            r#"{"subject":"mentions \"data\": inside a value"}"#,
            r#"{"to_id":"agt_stale","sequence":9,"a":1}"#,
        ];
        for attrs in cases {
            for data in [
                r#"{"text":"hi \u2028 \"q\""}"#,
                "null",
                r#"{"n":1.5,"l":[1,2]}"#,
            ] {
                // `data` is stored as serde_json prints it.
                let data = &serde_json::from_str::<Value>(data).unwrap().to_string();
                let mut want: Map<String, Value> = serde_json::from_str(attrs).unwrap();
                want.insert("data".into(), serde_json::from_str(data).unwrap());
                want.insert("to_id".into(), json!("agt_01\"x"));
                want.insert("sequence".into(), json!(42));
                let got = delivered_text(attrs, data, "agt_01\"x", 42);
                assert_eq!(got, Value::Object(want).to_string(), "{attrs} + {data}");
            }
        }
    }
}
