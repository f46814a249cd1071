//! The envelope (§2): a JSON object of attributes, kept as the sender wrote it.
//!
//! [`Envelope`] holds the attributes in a map that keeps every member, `x_` extensions and
//! attributes this version does not know included, with its value exactly as parsed, so the
//! canonical bytes a receiver recomputes are the bytes the sender signed. Typed accessors read the
//! spec's attributes; [`Envelope::validate`] checks §2's rules and names the `AB-` code of each
//! failure.

use serde_json::{Map, Value};

use crate::address::{Address, AgentAddress};
use crate::errors::Code;
use crate::ids::{Id, IdKind};
use crate::json::{self, JsonError};
use crate::schema::{self, DataError, KnownType, MessageType};
use crate::timestamp::Timestamp;

/// The largest serialised envelope, `data` included (§2.3).
pub const MAX_ENVELOPE_BYTES: usize = 1024 * 1024;
/// The longest `subject`, in Unicode code points (§2.3, checklist G-WP-18).
pub const MAX_SUBJECT_CHARS: usize = 200;
/// The longest `idempotency_key`, in Unicode code points (§2.3).
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 128;
/// The most attributes a sender may add beyond the spec's table (§2.3, checklist G-WP-27).
pub const MAX_EXTENSIONS: usize = 16;
/// The longest capability name (checklist G-WP-34).
pub const MAX_CAPABILITY_CHARS: usize = 100;

/// Attributes the sender sets (§2.1).
pub const SENDER_SET: &[&str] = &[
    "specversion",
    "id",
    "source",
    "type",
    "time",
    "datacontenttype",
    "dataschema",
    "subject",
    "data",
    "to",
    "conversation_id",
    "traceparent",
    "schema",
    "sig",
    "correlation_id",
    "reply_to",
    "idempotency_key",
    "expires_at",
    "capability",
    "capability_version",
    "priority",
    "budget",
    "usage",
];

/// Attributes the gateway sets, defined once and excluded from the signed bytes (decision 2,
/// checklist G-WP-2). §3.1's list lacks `to_id`, which §4.2 adds on delivery; it is gateway-set.
pub const GATEWAY_SET: &[&str] = &[
    "tenant",
    "workspace",
    "to_id",
    "sequence",
    "received_at",
    "receipt",
    "hops",
];

/// Attributes a sender must supply (§2.1; the gateway-set ones are required only on delivery).
pub const REQUIRED: &[&str] = &[
    "specversion",
    "id",
    "source",
    "type",
    "time",
    "datacontenttype",
    "to",
    "conversation_id",
    "traceparent",
    "schema",
    "sig",
    "data",
];

/// One broken rule, with its code and the JSON Pointer of the attribute.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// The catalogue code.
    pub code: Code,
    /// JSON Pointer of the offending attribute or data field, such as `/subject`.
    pub path: String,
    /// What is wrong, for a person or an agent.
    pub message: String,
}

impl Violation {
    fn new(code: Code, path: impl Into<String>, message: impl Into<String>) -> Violation {
        Violation {
            code,
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Why bytes are not an envelope at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Larger than [`MAX_ENVELOPE_BYTES`].
    #[error("the envelope is {0} bytes; the limit is 1 MiB (1,048,576 bytes)")]
    TooLarge(usize),
    /// Not I-JSON.
    #[error(transparent)]
    Json(#[from] JsonError),
    /// I-JSON, but not an object.
    #[error("an envelope is a JSON object")]
    NotAnObject,
}

impl ParseError {
    /// The catalogue code of this failure.
    pub fn code(&self) -> Code {
        match self {
            ParseError::TooLarge(_) => Code::EnvelopeTooLarge,
            ParseError::Json(_) | ParseError::NotAnObject => Code::MalformedJson,
        }
    }
}

/// What [`Envelope::validate`] checks beyond the attribute rules.
#[derive(Debug, Clone, Copy)]
pub struct ValidateOptions {
    /// The size of the received bytes, checked against 1 MiB; `None` measures the compact
    /// serialisation instead.
    pub received_bytes: Option<usize>,
    /// Whether to validate `data` against the type's schema (and refuse unknown types).
    pub check_data: bool,
    /// Whether to check the form of `sig`. Off only to validate the spec's examples, whose
    /// signatures are placeholders (checklist G-WP-20); its presence is always required.
    pub check_sig_form: bool,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        ValidateOptions {
            received_bytes: None,
            check_data: true,
            check_sig_form: true,
        }
    }
}

/// An envelope: its attributes, in the sender's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    attrs: Map<String, Value>,
}

impl Envelope {
    /// Parses the bytes of an envelope: at most 1 MiB, I-JSON, an object. It does not validate
    /// the attributes; see [`Envelope::validate`].
    pub fn parse(bytes: &[u8]) -> Result<Envelope, ParseError> {
        if bytes.len() > MAX_ENVELOPE_BYTES {
            return Err(ParseError::TooLarge(bytes.len()));
        }
        match json::parse(bytes)? {
            Value::Object(attrs) => Ok(Envelope { attrs }),
            _ => Err(ParseError::NotAnObject),
        }
    }

    /// Wraps attributes built in code.
    pub fn from_map(attrs: Map<String, Value>) -> Envelope {
        Envelope { attrs }
    }

    /// The attributes.
    pub fn attrs(&self) -> &Map<String, Value> {
        &self.attrs
    }

    /// The attributes, for changes (signing, gateway attributes on delivery).
    pub fn attrs_mut(&mut self) -> &mut Map<String, Value> {
        &mut self.attrs
    }

    /// The attributes, by value.
    pub fn into_map(self) -> Map<String, Value> {
        self.attrs
    }

    /// The compact JSON serialisation, in the stored member order.
    pub fn to_json(&self) -> String {
        Value::Object(self.attrs.clone()).to_string()
    }

    /// A string attribute, if present and a string.
    pub fn str_attr(&self, name: &str) -> Option<&str> {
        self.attrs.get(name).and_then(Value::as_str)
    }

    /// `id`.
    pub fn id(&self) -> Option<&str> {
        self.str_attr("id")
    }

    /// `source`.
    pub fn source(&self) -> Option<&str> {
        self.str_attr("source")
    }

    /// `type`.
    pub fn type_str(&self) -> Option<&str> {
        self.str_attr("type")
    }

    /// `type`, when it is one of the v1 types this crate knows.
    pub fn known_type(&self) -> Option<KnownType> {
        self.type_str().and_then(KnownType::from_type_str)
    }

    /// `to`.
    pub fn to(&self) -> Option<&str> {
        self.str_attr("to")
    }

    /// `time`, parsed.
    pub fn time(&self) -> Option<Timestamp> {
        self.str_attr("time").and_then(|s| s.parse().ok())
    }

    /// `expires_at`, parsed.
    pub fn expires_at(&self) -> Option<Timestamp> {
        self.str_attr("expires_at").and_then(|s| s.parse().ok())
    }

    /// `conversation_id`.
    pub fn conversation_id(&self) -> Option<&str> {
        self.str_attr("conversation_id")
    }

    /// `correlation_id`.
    pub fn correlation_id(&self) -> Option<&str> {
        self.str_attr("correlation_id")
    }

    /// `reply_to`, or `source` when absent (§2.1).
    pub fn reply_address(&self) -> Option<&str> {
        self.str_attr("reply_to").or_else(|| self.source())
    }

    /// `subject`.
    pub fn subject(&self) -> Option<&str> {
        self.str_attr("subject")
    }

    /// `schema`.
    pub fn schema_url(&self) -> Option<&str> {
        self.str_attr("schema")
    }

    /// `traceparent`.
    pub fn traceparent(&self) -> Option<&str> {
        self.str_attr("traceparent")
    }

    /// The trace id inside `traceparent` (§12.1's `trace_id`).
    pub fn trace_id(&self) -> Option<&str> {
        self.traceparent().and_then(|t| t.get(3..35))
    }

    /// `idempotency_key`.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.str_attr("idempotency_key")
    }

    /// `capability`.
    pub fn capability(&self) -> Option<&str> {
        self.str_attr("capability")
    }

    /// `priority`, `normal` when absent.
    pub fn priority(&self) -> &str {
        self.str_attr("priority").unwrap_or("normal")
    }

    /// `data`.
    pub fn data(&self) -> Option<&Value> {
        self.attrs.get("data")
    }

    /// `data.task_id`, for task lifecycle messages.
    pub fn task_id(&self) -> Option<&str> {
        self.data()?.get("task_id")?.as_str()
    }

    /// `sequence`, on a delivered copy.
    pub fn sequence(&self) -> Option<u64> {
        self.attrs.get("sequence").and_then(Value::as_u64)
    }

    /// Removes every gateway-set attribute (what a gateway does before setting its own).
    pub fn strip_gateway_attrs(&mut self) {
        for name in GATEWAY_SET {
            self.attrs.shift_remove(*name);
        }
    }

    /// Checks every rule of §2 and returns each violation found, in a stable order: names, required
    /// attributes, attribute forms, limits, type and schema agreement, type-specific attributes,
    /// and last `data` against its schema.
    pub fn validate(&self, opts: ValidateOptions) -> Vec<Violation> {
        let mut v = Vec::new();
        self.check_names(&mut v);
        for name in REQUIRED {
            if !self.attrs.contains_key(*name) {
                v.push(Violation::new(
                    Code::MissingAttribute,
                    format!("/{name}"),
                    format!("`{name}` is required (§2.1)"),
                ));
            }
        }
        self.check_forms(opts, &mut v);
        self.check_size(opts, &mut v);
        let kind = self.check_type_and_schema(&mut v);
        if let Some(kind) = kind {
            self.check_type_rules(kind, &mut v);
        }
        if opts.check_data {
            self.check_data(kind, &mut v);
        }
        v
    }

    fn check_names(&self, v: &mut Vec<Violation>) {
        let mut extensions = 0;
        for name in self.attrs.keys() {
            let well_formed = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !well_formed {
                v.push(Violation::new(
                    Code::InvalidAttributeName,
                    format!("/{}", name.replace('~', "~0").replace('/', "~1")),
                    format!("attribute name {name:?} is not lowercase [a-z0-9_] (§2.1)"),
                ));
                continue;
            }
            if !SENDER_SET.contains(&name.as_str()) && !GATEWAY_SET.contains(&name.as_str()) {
                extensions += 1;
            }
        }
        if extensions > MAX_EXTENSIONS {
            v.push(Violation::new(
                Code::TooManyExtensions,
                "",
                format!("{extensions} extension attributes; at most {MAX_EXTENSIONS} (§2.3)"),
            ));
        }
    }

    fn check_forms(&self, opts: ValidateOptions, v: &mut Vec<Violation>) {
        // Violations found inside nested values (`usage`) carry their own paths.
        let mut nested = Vec::new();
        let mut bad = |name: &str, code: Code, msg: String| {
            v.push(Violation::new(code, format!("/{name}"), msg));
        };
        for (name, value) in &self.attrs {
            let name = name.as_str();
            let s = value.as_str();
            let string_attr = !matches!(name, "data" | "budget" | "usage" | "sequence" | "hops")
                && (SENDER_SET.contains(&name) || GATEWAY_SET.contains(&name));
            if string_attr && s.is_none() {
                bad(
                    name,
                    Code::InvalidAttribute,
                    format!("`{name}` must be a string"),
                );
                continue;
            }
            let s = s.unwrap_or_default();
            match name {
                "specversion" if s != "1.0" => bad(
                    name,
                    Code::InvalidAttribute,
                    format!("`specversion` must be \"1.0\", not {s:?}"),
                ),
                "id" | "correlation_id" => {
                    if let Err(e) = Id::parse_kind(s, IdKind::Message) {
                        bad(name, Code::InvalidAttribute, format!("`{name}`: {e}"));
                    }
                }
                "conversation_id" => {
                    if let Err(e) = Id::parse_kind(s, IdKind::Conversation) {
                        bad(name, Code::InvalidAttribute, format!("`{name}`: {e}"));
                    }
                }
                "source" => {
                    if let Err(e) = s.parse::<AgentAddress>() {
                        bad(name, Code::InvalidAddress, format!("`source`: {e}"));
                    }
                }
                "to" => {
                    if let Err(e) = s.parse::<Address>() {
                        bad(name, Code::InvalidAddress, format!("`to`: {e}"));
                    }
                }
                "reply_to" => match s.parse::<Address>() {
                    Ok(Address::Topic(_)) => bad(
                        name,
                        Code::InvalidAddress,
                        "`reply_to` must name an agent, not a topic".to_owned(),
                    ),
                    Ok(_) => {}
                    Err(e) => bad(name, Code::InvalidAddress, format!("`reply_to`: {e}")),
                },
                "time" | "expires_at" | "received_at" => {
                    if let Err(e) = s.parse::<Timestamp>() {
                        bad(name, Code::InvalidAttribute, format!("`{name}`: {e}"));
                    }
                }
                "datacontenttype" if s != "application/json" => bad(
                    name,
                    Code::InvalidAttribute,
                    if s == "application/jose" {
                        "`datacontenttype: application/jose` (encrypted data) is post-MVP; send application/json".to_owned()
                    } else {
                        format!("`datacontenttype` must be application/json, not {s:?}")
                    },
                ),
                "traceparent" if !is_traceparent(s) => bad(
                    name,
                    Code::InvalidAttribute,
                    format!(
                        "`traceparent` {s:?} is not a W3C Trace Context value 00-<32 hex>-<16 hex>-<2 hex>"
                    ),
                ),
                "subject" => {
                    let chars = s.chars().count();
                    if chars > MAX_SUBJECT_CHARS {
                        bad(
                            name,
                            Code::AttributeTooLong,
                            format!(
                                "`subject` has {chars} characters; at most {MAX_SUBJECT_CHARS} (§2.3)"
                            ),
                        );
                    } else if s.chars().any(char::is_control) {
                        bad(
                            name,
                            Code::InvalidAttribute,
                            "`subject` is one line: no control characters or line breaks"
                                .to_owned(),
                        );
                    }
                }
                "idempotency_key" => {
                    let chars = s.chars().count();
                    if chars > MAX_IDEMPOTENCY_KEY_CHARS {
                        bad(
                            name,
                            Code::AttributeTooLong,
                            format!(
                                "`idempotency_key` has {chars} characters; at most {MAX_IDEMPOTENCY_KEY_CHARS} (§2.3)"
                            ),
                        );
                    } else if chars == 0 || s.chars().any(char::is_control) {
                        bad(
                            name,
                            Code::InvalidAttribute,
                            "`idempotency_key` must be non-empty, without control characters"
                                .to_owned(),
                        );
                    }
                }
                "capability" if !is_capability(s) => bad(
                    name,
                    Code::InvalidCapability,
                    format!(
                        "`capability` {s:?} must be dot-separated lowercase identifiers such as code.review"
                    ),
                ),
                "capability_version" if !is_major(s) => bad(
                    name,
                    Code::InvalidCapability,
                    format!("`capability_version` {s:?} must be a major version such as \"1\""),
                ),
                "priority" if !matches!(s, "low" | "normal" | "high") => bad(
                    name,
                    Code::InvalidAttribute,
                    format!("`priority` must be low, normal or high, not {s:?}"),
                ),
                "data" if !value.is_object() => bad(
                    name,
                    Code::InvalidAttribute,
                    "`data` must be a JSON object".to_owned(),
                ),
                "budget" => {
                    if let Err(msg) = check_budget(value) {
                        bad(name, Code::InvalidAttribute, msg);
                    }
                }
                "usage" => {
                    if let Err(DataError::Invalid(errs)) =
                        schema::validate_at("common/usage/v1.json", value, "/usage")
                    {
                        for e in errs {
                            nested.push(Violation::new(
                                Code::InvalidAttribute,
                                e.path,
                                format!("`usage`: {}", e.message),
                            ));
                        }
                    }
                }
                "tenant" => check_id(name, s, IdKind::Tenant, &mut bad),
                "workspace" => check_id(name, s, IdKind::Workspace, &mut bad),
                "to_id" => check_id(name, s, IdKind::Agent, &mut bad),
                "receipt" => check_id(name, s, IdKind::Receipt, &mut bad),
                "sequence" if value.as_u64().is_none() => bad(
                    name,
                    Code::InvalidAttribute,
                    "`sequence` must be a non-negative integer".to_owned(),
                ),
                "hops" if !value.is_array() => bad(
                    name,
                    Code::InvalidAttribute,
                    "`hops` must be an array".to_owned(),
                ),
                "sig" if opts.check_sig_form => {
                    if let Err(e) = crate::signing::Sig::parse(s) {
                        bad(name, e.code(), e.to_string());
                    }
                }
                _ => {}
            }
        }
        v.extend(nested);
        if self.attrs.contains_key("capability_version") && !self.attrs.contains_key("capability") {
            v.push(Violation::new(
                Code::InvalidCapability,
                "/capability",
                "`capability_version` is set without `capability`",
            ));
        }
        if self.attrs.contains_key("capability") && !self.attrs.contains_key("capability_version") {
            v.push(Violation::new(
                Code::InvalidCapability,
                "/capability_version",
                "`capability_version` is required when `capability` is set (§2.1)",
            ));
        }
    }

    fn check_size(&self, opts: ValidateOptions, v: &mut Vec<Violation>) {
        let size = opts.received_bytes.unwrap_or_else(|| self.to_json().len());
        if size > MAX_ENVELOPE_BYTES {
            v.push(Violation::new(
                Code::EnvelopeTooLarge,
                "",
                format!("the envelope is {size} bytes; at most {MAX_ENVELOPE_BYTES} (§2.3)"),
            ));
        }
    }

    /// Checks `type`, `schema` and `dataschema` and returns the known type, if any.
    fn check_type_and_schema(&self, v: &mut Vec<Violation>) -> Option<KnownType> {
        let t = self.type_str()?;
        let parsed: MessageType = match t.parse() {
            Ok(p) => p,
            Err(e) => {
                v.push(Violation::new(
                    Code::InvalidAttribute,
                    "/type",
                    e.to_string(),
                ));
                return None;
            }
        };
        if let Some(schema) = self.schema_url() {
            match schema_major(schema) {
                Some(m) if m == parsed.major() => {}
                Some(m) => v.push(Violation::new(
                    Code::SchemaMismatch,
                    "/schema",
                    format!("`type` is major {} but `schema` is major {m} (§13.5)", parsed.major()),
                )),
                None => v.push(Violation::new(
                    Code::SchemaMismatch,
                    "/schema",
                    format!("`schema` {schema:?} does not end in /v<major>.json, so its major cannot agree with `type`"),
                )),
            }
            if let Some(ds) = self.str_attr("dataschema")
                && ds != schema
            {
                v.push(Violation::new(
                    Code::SchemaMismatch,
                    "/dataschema",
                    "`dataschema` mirrors `schema` and must equal it (checklist G-WP-14)",
                ));
            }
        }
        KnownType::from_type(&parsed)
    }

    fn check_type_rules(&self, kind: KnownType, v: &mut Vec<Violation>) {
        if kind.requires_correlation() && !self.attrs.contains_key("correlation_id") {
            v.push(Violation::new(
                Code::MissingCorrelation,
                "/correlation_id",
                format!(
                    "`correlation_id` is required on {} (§2.1, §7)",
                    kind.as_str()
                ),
            ));
        }
        if kind == KnownType::TaskRequest {
            if !self.attrs.contains_key("capability") {
                v.push(Violation::new(
                    Code::InvalidCapability,
                    "/capability",
                    "`capability` is required on task.request (§5.2)",
                ));
            }
            if self.to().is_some_and(|t| t.starts_with("topic://")) {
                v.push(Violation::new(
                    Code::TaskToTopic,
                    "/to",
                    "a task.request has one recipient; topics are refused (checklist G-WP-17)",
                ));
            }
        }
        if let Some(attachments) = self
            .data()
            .and_then(|d| d.get("attachments"))
            .and_then(Value::as_array)
        {
            for (i, a) in attachments.iter().enumerate() {
                if let Some(name) = a.get("name").and_then(Value::as_str)
                    && let Err(msg) = check_attachment_name(name)
                {
                    v.push(Violation::new(
                        Code::InvalidAttachmentName,
                        format!("/data/attachments/{i}/name"),
                        msg,
                    ));
                }
            }
        }
    }

    fn check_data(&self, kind: Option<KnownType>, v: &mut Vec<Violation>) {
        let Some(data) = self.data().filter(|d| d.is_object()) else {
            return;
        };
        let Some(kind) = kind else {
            if let Some(t) = self.type_str().filter(|t| t.parse::<MessageType>().is_ok()) {
                v.push(Violation::new(
                    Code::UnknownType,
                    "/type",
                    format!("no schema is registered for {t}"),
                ));
            }
            return;
        };
        if let Some(schema) = self.schema_url()
            && schema_major(schema) == Some(1)
            && schema != kind.schema_url()
        {
            v.push(Violation::new(
                Code::UnknownType,
                "/schema",
                format!("`schema` must be the registry URL {} (the URL is an identifier, checklist G-WP-28)", kind.schema_url()),
            ));
        }
        if let Err(DataError::Invalid(errs)) = schema::validate_data(kind, data) {
            for e in errs {
                v.push(Violation::new(Code::DataInvalid, e.path, e.message));
            }
        }
    }
}

fn check_id(name: &str, s: &str, kind: IdKind, bad: &mut impl FnMut(&str, Code, String)) {
    if let Err(e) = Id::parse_kind(s, kind) {
        bad(name, Code::InvalidAttribute, format!("`{name}`: {e}"));
    }
}

/// The major of a schema URL ending in `/v<N>.json`.
pub fn schema_major(url: &str) -> Option<u32> {
    let last = url.rsplit('/').next()?;
    let digits = last.strip_prefix('v')?.strip_suffix(".json")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `s` is a W3C Trace Context `traceparent`: version, trace id, parent id and flags in
/// lowercase hex, version not `ff`, ids not all zero.
pub fn is_traceparent(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let hex = |p: &str, n: usize| {
        p.len() == n && p.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    match parts.as_slice() {
        [version, trace, parent, flags] => {
            hex(version, 2)
                && *version != "ff"
                && hex(trace, 32)
                && trace.bytes().any(|b| b != b'0')
                && hex(parent, 16)
                && parent.bytes().any(|b| b != b'0')
                && hex(flags, 2)
        }
        _ => false,
    }
}

/// Whether `s` is a capability name: dot-separated `[a-z][a-z0-9-]*` segments, at most 100 chars.
pub fn is_capability(s: &str) -> bool {
    s.len() <= MAX_CAPABILITY_CHARS
        && s.split('.').all(|seg| {
            let b = seg.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_lowercase()
                && b.iter()
                    .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        })
}

/// Whether `s` is a major version string: `0` or digits without a leading zero, at most 9.
pub fn is_major(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 9
        && s.bytes().all(|b| b.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'))
}

/// Whether `s` is a decimal amount as the money schema writes it.
pub fn is_decimal_amount(s: &str) -> bool {
    let body = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && (!body.contains('.') || (1..=6).contains(&frac.len()))
        && frac.bytes().all(|b| b.is_ascii_digit())
}

fn check_budget(value: &Value) -> Result<(), String> {
    let obj = value
        .as_object()
        .ok_or("`budget` must be an object {currency, max}")?;
    let currency = obj.get("currency").and_then(Value::as_str);
    if !currency.is_some_and(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase())) {
        return Err("`budget.currency` must be three upper-case letters such as USD".to_owned());
    }
    let max = obj.get("max").and_then(Value::as_str);
    if !max.is_some_and(|m| is_decimal_amount(m) && !m.starts_with('-')) {
        return Err("`budget.max` must be a decimal string such as \"2.00\"".to_owned());
    }
    Ok(())
}

/// Checks an attachment name: a plain file name (§9: no path separators; checklist G-WP-21).
pub fn check_attachment_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(format!("attachment name {name:?} is not a file name"));
    }
    if name.chars().count() > 255 {
        return Err("attachment names are at most 255 characters".to_owned());
    }
    if name.contains(['/', '\\']) {
        return Err(format!(
            "attachment name {name:?} contains a path separator"
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(format!(
            "attachment name {name:?} contains a control character"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents() {
        assert!(is_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        for bad in [
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert!(!is_traceparent(bad), "{bad}");
        }
    }

    #[test]
    fn capabilities_and_amounts() {
        assert!(is_capability("code.review"));
        assert!(!is_capability("Code.Review"));
        assert!(!is_capability("code..review"));
        assert!(is_major("1") && is_major("12") && !is_major("01") && !is_major("v1"));
        assert!(is_decimal_amount("0.42") && is_decimal_amount("-3"));
        assert!(
            !is_decimal_amount("0.1234567") && !is_decimal_amount("1.") && !is_decimal_amount(".5")
        );
    }

    #[test]
    fn schema_majors() {
        assert_eq!(
            schema_major("https://komsary.agentbus.exchange/schemas/agentbus.message/v1.json"),
            Some(1)
        );
        assert_eq!(schema_major("https://x/y/v2.json"), Some(2));
        assert_eq!(schema_major("https://x/y/latest.json"), None);
    }
}
