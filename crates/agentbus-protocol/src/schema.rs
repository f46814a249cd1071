//! Message types (§5) and their JSON Schemas (draft 2020-12).
//!
//! The schema files live in `crates/agentbus-protocol/schemas/`, laid out as their registry URLs
//! (`https://komsary.agentbus.exchange/schemas/<path>`), and are compiled into the crate. A schema
//! URL is an identifier matched exactly, never fetched (checklist G-WP-28): `$ref`s between the
//! files resolve from this table.
//!
//! Type names follow checklist G-WP-4: `agentbus(.<segment>)+.v<major>`, segments
//! `[a-z][a-z0-9_]*`; the schema URL is `…/schemas/<type without .vN>/vN.json`.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use serde_json::Value;

/// The host every registry URL starts with.
pub const REGISTRY_BASE: &str = "https://komsary.agentbus.exchange/schemas/";

/// Every schema file, by its path under [`REGISTRY_BASE`].
pub const SCHEMA_FILES: &[(&str, &str)] = &[
    (
        "agentbus.message/v1.json",
        include_str!("../schemas/agentbus.message/v1.json"),
    ),
    (
        "agentbus.task.request/v1.json",
        include_str!("../schemas/agentbus.task.request/v1.json"),
    ),
    (
        "agentbus.task.accept/v1.json",
        include_str!("../schemas/agentbus.task.accept/v1.json"),
    ),
    (
        "agentbus.task.progress/v1.json",
        include_str!("../schemas/agentbus.task.progress/v1.json"),
    ),
    (
        "agentbus.task.result/v1.json",
        include_str!("../schemas/agentbus.task.result/v1.json"),
    ),
    (
        "agentbus.task.error/v1.json",
        include_str!("../schemas/agentbus.task.error/v1.json"),
    ),
    (
        "agentbus.task.cancel/v1.json",
        include_str!("../schemas/agentbus.task.cancel/v1.json"),
    ),
    (
        "agentbus.task.needs_input/v1.json",
        include_str!("../schemas/agentbus.task.needs_input/v1.json"),
    ),
    (
        "agentbus.task.input/v1.json",
        include_str!("../schemas/agentbus.task.input/v1.json"),
    ),
    (
        "agentbus.ack/v1.json",
        include_str!("../schemas/agentbus.ack/v1.json"),
    ),
    (
        "agentbus.system.undeliverable/v1.json",
        include_str!("../schemas/agentbus.system.undeliverable/v1.json"),
    ),
    (
        "agentbus.system.expired/v1.json",
        include_str!("../schemas/agentbus.system.expired/v1.json"),
    ),
    (
        "common/usage/v1.json",
        include_str!("../schemas/common/usage/v1.json"),
    ),
    (
        "common/money/v1.json",
        include_str!("../schemas/common/money/v1.json"),
    ),
    (
        "common/attachments/v1.json",
        include_str!("../schemas/common/attachments/v1.json"),
    ),
];

/// A message type: `agentbus.task.request.v1` is name `agentbus.task.request`, major 1.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MessageType {
    name: String,
    major: u32,
}

/// A `type` string that breaks the grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a message type: agentbus.<family>[.<name>].v<major>, lowercase segments")]
pub struct TypeError(pub String);

impl MessageType {
    /// The type without its major: `agentbus.task.request`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The major version.
    pub fn major(&self) -> u32 {
        self.major
    }

    /// The registry URL of this type's schema.
    pub fn schema_url(&self) -> String {
        format!("{REGISTRY_BASE}{}/v{}.json", self.name, self.major)
    }

    /// Whether this type has a schema in this crate's registry.
    pub fn is_known(&self) -> bool {
        KnownType::from_type(self).is_some()
    }
}

impl FromStr for MessageType {
    type Err = TypeError;

    fn from_str(s: &str) -> Result<MessageType, TypeError> {
        let err = || TypeError(s.to_owned());
        let (name, major) = s.rsplit_once(".v").ok_or_else(err)?;
        if major.is_empty()
            || major.len() > 9
            || !major.bytes().all(|b| b.is_ascii_digit())
            || major.starts_with('0')
        {
            return Err(err());
        }
        let mut segments = name.split('.');
        if segments.next() != Some("agentbus") {
            return Err(err());
        }
        let mut count = 0;
        for seg in segments {
            count += 1;
            let b = seg.as_bytes();
            let ok = !b.is_empty()
                && b[0].is_ascii_lowercase()
                && b.iter()
                    .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_');
            if !ok {
                return Err(err());
            }
        }
        if count == 0 {
            return Err(err());
        }
        Ok(MessageType {
            name: name.to_owned(),
            major: major.parse().map_err(|_| err())?,
        })
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.v{}", self.name, self.major)
    }
}

/// The v1 types this crate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KnownType {
    /// `agentbus.message.v1` (§5.1).
    Message,
    /// `agentbus.task.request.v1` (§5.2).
    TaskRequest,
    /// `agentbus.task.accept.v1` (§5.3).
    TaskAccept,
    /// `agentbus.task.progress.v1` (§5.4).
    TaskProgress,
    /// `agentbus.task.result.v1` (§5.5).
    TaskResult,
    /// `agentbus.task.error.v1` (§5.6).
    TaskError,
    /// `agentbus.task.cancel.v1` (§5.7).
    TaskCancel,
    /// `agentbus.task.needs_input.v1` (§5.7a).
    TaskNeedsInput,
    /// `agentbus.task.input.v1` (§5.7b).
    TaskInput,
    /// `agentbus.ack.v1` (§5.8).
    Ack,
    /// `agentbus.system.undeliverable.v1` (§5.9).
    SystemUndeliverable,
    /// `agentbus.system.expired.v1` (§5.10).
    SystemExpired,
}

impl KnownType {
    /// Every known type.
    pub const ALL: [KnownType; 12] = [
        KnownType::Message,
        KnownType::TaskRequest,
        KnownType::TaskAccept,
        KnownType::TaskProgress,
        KnownType::TaskResult,
        KnownType::TaskError,
        KnownType::TaskCancel,
        KnownType::TaskNeedsInput,
        KnownType::TaskInput,
        KnownType::Ack,
        KnownType::SystemUndeliverable,
        KnownType::SystemExpired,
    ];

    /// The full `type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            KnownType::Message => "agentbus.message.v1",
            KnownType::TaskRequest => "agentbus.task.request.v1",
            KnownType::TaskAccept => "agentbus.task.accept.v1",
            KnownType::TaskProgress => "agentbus.task.progress.v1",
            KnownType::TaskResult => "agentbus.task.result.v1",
            KnownType::TaskError => "agentbus.task.error.v1",
            KnownType::TaskCancel => "agentbus.task.cancel.v1",
            KnownType::TaskNeedsInput => "agentbus.task.needs_input.v1",
            KnownType::TaskInput => "agentbus.task.input.v1",
            KnownType::Ack => "agentbus.ack.v1",
            KnownType::SystemUndeliverable => "agentbus.system.undeliverable.v1",
            KnownType::SystemExpired => "agentbus.system.expired.v1",
        }
    }

    /// The known type of a `type` string, if it is one.
    pub fn from_type_str(s: &str) -> Option<KnownType> {
        KnownType::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The known type of a parsed type, if it is one.
    pub fn from_type(t: &MessageType) -> Option<KnownType> {
        if t.major != 1 {
            return None;
        }
        KnownType::ALL
            .into_iter()
            .find(|k| k.as_str().strip_suffix(".v1") == Some(t.name()))
    }

    /// The registry URL of its schema.
    pub fn schema_url(self) -> String {
        let name = self.as_str().trim_end_matches(".v1");
        format!("{REGISTRY_BASE}{name}/v1.json")
    }

    /// Whether this is a task lifecycle type other than the request.
    pub fn is_task_followup(self) -> bool {
        matches!(
            self,
            KnownType::TaskAccept
                | KnownType::TaskProgress
                | KnownType::TaskResult
                | KnownType::TaskError
                | KnownType::TaskCancel
                | KnownType::TaskNeedsInput
                | KnownType::TaskInput
        )
    }

    /// Whether §2.1 (with G-WP-16) requires `correlation_id` on this type.
    pub fn requires_correlation(self) -> bool {
        self.is_task_followup() || self == KnownType::Ack
    }
}

/// One place where `data` fails its schema.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SchemaViolation {
    /// JSON Pointer into the envelope, such as `/data/constraints/accept_timeout_s`.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

/// Why `data` could not be checked or did not pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    /// No schema is registered for the type (§11.3: receivers treat it as opaque).
    #[error("no schema is registered for this type")]
    UnknownType,
    /// The data fails its schema at these places.
    #[error("`data` does not match its schema at {} place(s)", .0.len())]
    Invalid(Vec<SchemaViolation>),
}

struct Registry {
    validators: HashMap<&'static str, jsonschema::Validator>,
}

/// Serves `$ref`s from the compiled-in files; never fetches anything.
struct Embedded;

impl jsonschema::Retrieve for Embedded {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let wanted = uri.as_str();
        let path = wanted
            .strip_prefix(REGISTRY_BASE)
            .ok_or("not a registry URL")?;
        let (_, text) = SCHEMA_FILES
            .iter()
            .find(|(p, _)| *p == path)
            .ok_or("no such schema")?;
        Ok(serde_json::from_str(text)?)
    }
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut validators = HashMap::new();
        for (path, text) in SCHEMA_FILES {
            // The files are part of this crate and a unit test compiles every one of them, so a
            // failure here is a build defect, not an input problem.
            let schema: Value = serde_json::from_str(text).unwrap_or(Value::Bool(false));
            let validator = jsonschema::options()
                .with_draft(jsonschema::Draft::Draft202012)
                .should_validate_formats(true)
                .with_retriever(Embedded)
                .build(&schema);
            if let Ok(v) = validator {
                validators.insert(*path, v);
            }
        }
        Registry { validators }
    })
}

/// The text of a schema file by its path under [`REGISTRY_BASE`], such as
/// `agentbus.task.request/v1.json`.
pub fn schema_text(path: &str) -> Option<&'static str> {
    SCHEMA_FILES
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, text)| *text)
}

/// Validates `instance` against the schema at `path` (under [`REGISTRY_BASE`]), reporting
/// violations with pointers under `prefix`.
pub fn validate_at(path: &str, instance: &Value, prefix: &str) -> Result<(), DataError> {
    let validator = registry()
        .validators
        .get(path)
        .ok_or(DataError::UnknownType)?;
    if validator.is_valid(instance) {
        return Ok(());
    }
    let violations: Vec<SchemaViolation> = validator
        .iter_errors(instance)
        .map(|e| SchemaViolation {
            path: format!("{prefix}{}", e.instance_path()),
            message: e.to_string(),
        })
        .collect();
    Err(DataError::Invalid(violations))
}

/// Validates an envelope's `data` against the schema registered for `kind`.
pub fn validate_data(kind: KnownType, data: &Value) -> Result<(), DataError> {
    let url = kind.schema_url();
    let path = url.strip_prefix(REGISTRY_BASE).unwrap_or(&url);
    validate_at(path, data, "/data")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_schema_compiles_and_has_its_id() {
        for (path, text) in SCHEMA_FILES {
            let v: Value = serde_json::from_str(text).expect(path);
            assert_eq!(v["$id"], json!(format!("{REGISTRY_BASE}{path}")));
            assert!(
                registry().validators.contains_key(path),
                "{path} did not compile"
            );
        }
    }

    #[test]
    fn type_grammar() {
        for ok in [
            "agentbus.message.v1",
            "agentbus.task.needs_input.v1",
            "agentbus.foo.bar.v12",
        ] {
            assert!(ok.parse::<MessageType>().is_ok(), "{ok}");
        }
        for bad in [
            "agentbus.message",
            "AgentBus.message.v1",
            "agentbus.v1",
            "agentbus.message.v0",
            "agentbus.message.v01",
            "com.example.message.v1",
            "agentbus..message.v1",
            "agentbus.Message.v1",
        ] {
            assert!(bad.parse::<MessageType>().is_err(), "{bad}");
        }
        let t: MessageType = "agentbus.task.request.v1".parse().unwrap();
        assert_eq!(
            t.schema_url(),
            "https://komsary.agentbus.exchange/schemas/agentbus.task.request/v1.json"
        );
        assert_eq!(KnownType::from_type(&t), Some(KnownType::TaskRequest));
    }

    #[test]
    fn shared_schemas_resolve_through_refs() {
        let bad = json!({"task_id": "tsk_1", "status": "succeeded", "cost": {"currency": "usd", "amount": "1"}});
        let Err(DataError::Invalid(v)) = validate_data(KnownType::TaskResult, &bad) else {
            panic!("lowercase currency must fail the money schema");
        };
        assert_eq!(v[0].path, "/data/cost/currency");
    }

    #[test]
    fn formats_are_checked() {
        let bad = json!({"original_message_id": "msg_1", "expired_at": "not a time"});
        assert!(validate_data(KnownType::SystemExpired, &bad).is_err());
    }
}
