//! The error catalogue: every `AB-` code in one table.
//!
//! The wire protocol names some codes (§3.2, §4.2, §6.2, §9, §13.6, §11.4) and leaves most failures
//! without one (checklist gap G-WP-6). This table is the single source for both: the gateway's HTTP
//! responses take their status and title from it, `docs/errors.md` is generated from it
//! ([`render_markdown`]), and `agentbus explain` prints an entry.
//!
//! Families follow the spec's numbering: 1xxx authentication and keys (1030–1041: key files, the
//! OS keychain and profiles on this machine), 2xxx policy, 3xxx validation (3060–3069: arguments
//! checked on this machine before any request), 4xxx routing, tasks and attachments (4070–4085 the
//! MCP server's and the client's, 41xx local delivery, hooks and the worker, 42xx the git share),
//! 5xxx quotas, 6xxx versions, 9xxx the gateway's own state: its storage, its capacity, its
//! shutdown (never caused by what a request contains), and 9020–9030 why it could not start.
//!
//! Each entry has a [`Kind`], from which every front end derives its answer, and every library
//! error enum implements [`Catalogued`], so front ends never sort a library's errors by hand.

use std::fmt;
use std::str::FromStr;

macro_rules! catalogue {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $num:literal, $status:literal, $kind:ident, $origin:ident, $title:literal,
            cause: $cause:literal, fix: $fix:literal $(, cli: $cli:literal)?;
    )*) => {
        /// An `AB-` error code. Each variant's documentation is its title.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code {
            $($(#[$doc])* $variant,)*
        }

        impl Code {
            /// Every code, in numeric order.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The catalogue entry of this code.
            pub fn entry(self) -> &'static Entry {
                match self {
                    $(Code::$variant => &Entry {
                        code: Code::$variant,
                        number: $num,
                        http_status: $status,
                        kind: Kind::$kind,
                        origin: Origin::$origin,
                        title: $title,
                        cause: $cause,
                        fix: $fix,
                        cli_fix: catalogue!(@cli $($cli)?),
                    },)*
                }
            }
        }
    };
    (@cli) => { None };
    (@cli $cli:literal) => { Some($cli) };
}

/// What sort of failure a code is. Every front end derives its answer from it: the command
/// line's exit code ([`Kind::exit_code`]), the MCP server's tool result, and the gateway's HTTP
/// status, which must agree with it ([`Kind::admits_http_status`]).
///
/// A user's own mistake comes in three kinds (usage, input, declined) because the command line
/// documents three exit codes for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An argument has the wrong form; found before anything ran.
    Usage,
    /// An input (a file, an id, a value) cannot be used.
    Input,
    /// This machine's own rules declined the request (local pacing, a paused session): the
    /// command's answer is no.
    Declined,
    /// Configuration or this machine's state is missing or wrong.
    Configuration,
    /// A server or resource could not be reached or cannot serve now; retrying may help.
    Unavailable,
    /// A server (the gateway, a share's remote) or a peer's check refused the request.
    Refused,
    /// A bug in agentbus.
    Internal,
}

impl Kind {
    /// Every kind.
    pub const ALL: &'static [Kind] = &[
        Kind::Usage,
        Kind::Input,
        Kind::Declined,
        Kind::Configuration,
        Kind::Unavailable,
        Kind::Refused,
        Kind::Internal,
    ];

    /// The kind's name, as `--json` error documents and `docs/errors.md` write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Usage => "usage",
            Kind::Input => "input",
            Kind::Declined => "declined",
            Kind::Configuration => "configuration",
            Kind::Unavailable => "unavailable",
            Kind::Refused => "refused",
            Kind::Internal => "internal",
        }
    }

    /// The command line's exit code for a failure of this kind (`docs/cli.md`, "Exit codes").
    pub fn exit_code(self) -> u8 {
        match self {
            Kind::Declined => 1,
            Kind::Usage => 2,
            Kind::Input => 3,
            Kind::Configuration => 4,
            Kind::Unavailable => 5,
            Kind::Refused => 6,
            Kind::Internal => 70,
        }
    }

    /// Whether the MCP server answers a failure of this kind as a tool result with
    /// `isError: true` (the calling model reads why and the fix). Every kind is: JSON-RPC
    /// errors are kept for protocol faults, which are not in the catalogue.
    pub fn is_tool_error(self) -> bool {
        true
    }

    /// The rule tying a kind to the HTTP status of its entries: a refusal answers a 4xx, a
    /// server that cannot serve now a 5xx, and the other kinds never travel over HTTP (0);
    /// any kind may be a diagnostic that is no HTTP answer at all (0).
    pub fn admits_http_status(self, status: u16) -> bool {
        matches!(
            (self, status),
            (_, 0) | (Kind::Refused, 400..=499) | (Kind::Unavailable, 500..=599)
        )
    }
}

/// A library error with a place in the catalogue: every error enum of the workspace implements
/// it, so a front end (the command line, the MCP server) answers any of them the same way, from
/// the entry of its [`code`](Catalogued::code).
pub trait Catalogued: std::error::Error {
    /// The catalogue code of this failure.
    fn code(&self) -> Code;

    /// The values of the placeholders (`{name}`) in the entry's fix, for fixes that name a
    /// path, a branch or a file of this failure.
    fn fix_values(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// The fix a person reads at the command line, its placeholders filled.
    fn cli_fix(&self) -> String {
        fill(self.code().entry().cli_fix(), &self.fix_values())
    }
}

/// Fills the `{name}` placeholders of `template` with `values`; a brace no value names (such as
/// git's `@{upstream}`) is left as written.
pub fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut out = template.to_owned();
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

/// Where a code comes from: named by the wire protocol, or added by this project to fill a gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The wire protocol text names this code.
    Spec,
    /// AgentBus added this code where the text names none (checklist G-WP-6).
    Project,
}

/// One entry of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The code this entry documents.
    pub code: Code,
    /// The number after `AB-`.
    pub number: u16,
    /// The HTTP status the gateway answers with; 0 for diagnostics that never travel over HTTP.
    pub http_status: u16,
    /// What sort of failure it is, from which front ends derive their answer.
    pub kind: Kind,
    /// Whether the spec or the project defined the code.
    pub origin: Origin,
    /// A short title.
    pub title: &'static str,
    /// What went wrong, for a reader who got this code.
    pub cause: &'static str,
    /// What to do about it, for any reader (a program, a model, an operator).
    pub fix: &'static str,
    /// What to do about it in the words of the command line, where `fix` names HTTP headers,
    /// routes or MCP tools; it may hold `{name}` placeholders ([`Catalogued::fix_values`]).
    pub cli_fix: Option<&'static str>,
}

impl Entry {
    /// The fix the command line prints: its own words when the entry has them, else `fix`.
    pub fn cli_fix(&self) -> &'static str {
        self.cli_fix.unwrap_or(self.fix)
    }
}

catalogue! {
    /// Missing or invalid bearer credential.
    MissingCredential = 1001, 401, Refused, Project, "Missing or invalid bearer credential",
        cause: "The request carried no `Authorization: Bearer` header, or the token is unknown, revoked or malformed.",
        fix: "Send `Authorization: Bearer <token>` with the agent credential returned at registration, or the integration token of a user.", cli: "the profile's credential is not accepted: connect again (agentbus connect --gateway <url> --token <token> --name <agent>), or choose another profile with --profile";
    /// The credential is valid but may not perform this operation.
    NotPermitted = 1002, 403, Refused, Project, "Credential not permitted",
        cause: "The credential is valid but its role may not perform this operation, whatever object it names (for example an agent credential calling an admin endpoint, a member creating users, a workspace admin creating workspaces, anyone but the gateway operator managing tenants).",
        fix: "Use a credential with the needed role (`docs/security.md`, Roles): the gateway operator's for tenants, a tenant admin's for workspaces, a tenant or workspace admin's for users, policy and suspension, the agent's own credential for its inbox.";
    /// The credential's tenant is suspended.
    TenantSuspended = 1003, 403, Refused, Project, "Tenant suspended",
        cause: "The gateway operator suspended the tenant this credential belongs to: every user and agent credential of the tenant is refused until it is resumed. Nothing stored is lost.",
        fix: "Ask the gateway operator to resume the tenant: Resume on the console's Tenants page (`/console/tenants`).", cli: "ask the gateway's operator to resume it; nothing can be sent until then";
    /// The calling agent is suspended.
    AgentSuspended = 1004, 403, Refused, Project, "Agent suspended",
        cause: "An admin suspended this agent (§5.9): its credential may neither publish nor read its inbox. Messages sent to it are kept in its inbox, and each sender is told with AB-4013.",
        fix: "Ask an admin of the agent's workspace to resume it: Resume on the agent's console page (`/console/agents/{id}`); the held messages are then delivered.", cli: "ask an admin of the agent's workspace to resume it (the console's agent page); nothing can be sent until then";
    /// The `sig` attribute is malformed.
    MalformedSignature = 1010, 400, Refused, Project, "Malformed sig attribute",
        cause: "`sig` is not `ed25519:<key_id>:<base64url signature without padding>`: a wrong algorithm, a missing part, padding, non-base64url characters, or a signature that is not 64 bytes.",
        fix: "Sign as §3.1 says and set `sig` to `ed25519:<key_id>:<base64url(signature)>` with no `=` padding.";
    /// The signature does not verify.
    BadSignature = 1011, 401, Refused, Spec, "Signature does not verify",
        cause: "The Ed25519 signature does not verify over the RFC 8785 canonical bytes of the envelope without `sig` and without the gateway-set attributes (`tenant workspace to_id sequence received_at receipt hops`).",
        fix: "Sign the exact envelope you send, after every attribute is final; canonicalise with RFC 8785; sign with the key named in `sig`. `agentbus envelope canonical --signing-input` prints the bytes that are signed.";
    /// The signing key is unknown, revoked, expired or not the caller's.
    UnknownKey = 1012, 401, Refused, Spec, "Unknown, revoked or expired key",
        cause: "The `key_id` in `sig` does not name an active key of the sending agent: it is unknown, revoked, past its `expires_at`, or belongs to another agent.",
        fix: "Register a key with `agentbus keys rotate` and sign with its id.", cli: "register a new key with `agentbus keys rotate`, or connect again; `agentbus keys list` shows the registered keys";
    /// The agent already has the maximum number of active keys.
    KeyLimit = 1013, 409, Refused, Project, "Too many active keys",
        cause: "An agent may hold at most 3 active keys (§3.3); registering another would exceed that.",
        fix: "Revoke an old key (`agentbus keys revoke <key_id>`) once the 24 h replay window has passed, then register the new one.";
    /// The public key is not acceptable.
    WeakKey = 1014, 400, Refused, Project, "Public key rejected",
        cause: "The public key is not a 32-byte base64url Ed25519 point, or it is a small-order (weak) point that would let any signature verify.",
        fix: "Generate a fresh key with `agentbus keys generate` and register its public half.";
    /// A change through the web console was refused for its CSRF token or origin.
    ConsoleCsrf = 1020, 403, Refused, Project, "Console form refused (CSRF)",
        cause: "A change made through the web console (sign-in, sign-out, cancel, suspend, resume, a policy) carried no CSRF token, a token that is not its session's, or came from another site (its `Origin` or `Sec-Fetch-Site` is not the console's own). Nothing changed.",
        fix: "Reload the console page and submit the form from it. A page or script of another site cannot act through a console session.";
    /// The console session is missing or ended.
    ConsoleSignedOut = 1021, 401, Refused, Project, "Console session ended",
        cause: "The console request carried no session cookie, or its session ended: signed out, past its lifetime (8 hours), or its user token was revoked or its tenant suspended since sign-in. Sessions are kept by the gateway's store, so this holds on every replica.",
        fix: "Sign in again at `/console/sign-in` with a user integration token; an admin issues one with `agentbus tokens issue`.";
    /// Private key file unusable.
    KeyFileUnusable = 1030, 0, Configuration, Project, "Private key file unusable",
        cause: "The agent's private key file (`<AGENTBUS_HOME>/keys/<agent_id>.key`) cannot be read or written, is readable or writable by others (a private key file must be 0600), does not hold a key, or would be overwritten.",
        fix: "chmod 600 the key file, or reconnect to register a new key";
    /// OS keychain cannot be used.
    KeychainUnavailable = 1031, 0, Input, Project, "OS keychain cannot be used",
        cause: "`AGENTBUS_KEYSTORE=keychain` asks for the OS keychain (the macOS Keychain, a Secret Service on Linux), but it cannot be used here: it is locked or not running, or `AGENTBUS_KEYSTORE` has an unknown value.",
        fix: "unlock or start the OS keychain (on Linux a Secret Service on the session D-Bus), or unset AGENTBUS_KEYSTORE to keep the key in a 0600 file";
    /// OS keychain failed.
    KeychainFailed = 1032, 0, Configuration, Project, "OS keychain failed",
        cause: "The OS keychain failed to open, read, write or delete the entry of a profile's key: it is locked, or not reachable from this process.",
        fix: "run where the OS keychain is reachable and unlocked (on Linux: the session D-Bus and its Secret Service), then again";
    /// Key missing from the keychain.
    KeychainKeyMissing = 1033, 0, Configuration, Project, "Key missing from the keychain",
        cause: "The keychain entry a profile names is missing, or does not hold a private key.",
        fix: "reconnect to register a new key (a lost private key cannot be recovered)";
    /// Keychain entry already exists.
    KeychainKeyExists = 1034, 0, Configuration, Project, "Keychain entry already exists",
        cause: "Saving a new key would replace a private key already in the OS keychain under the same entry; agentbus never overwrites a private key.",
        fix: "delete that keychain entry only if no profile uses it, then connect again";
    /// `AGENTBUS_KEYSTORE` names no key store.
    KeyStoreChoice = 1035, 0, Input, Project, "Unknown key store",
        cause: "`AGENTBUS_KEYSTORE` names no key store: it takes `auto` (the OS keychain where one works, else a 0600 file), `keychain` or `file`.",
        fix: "set AGENTBUS_KEYSTORE to auto, keychain or file, or unset it, then run `agentbus connect` again";
    /// Key file already exists.
    KeyFileExists = 1036, 0, Configuration, Project, "Key file already exists",
        cause: "Connecting would save a new private key where a key file of this agent already is (`<AGENTBUS_HOME>/keys/<agent_id>.key`); agentbus never overwrites a private key.",
        fix: "move the old key file away only if no profile uses it, then run `agentbus connect` again";
    /// No such profile.
    NoSuchProfile = 1040, 0, Configuration, Project, "No such profile",
        cause: "`--profile` or `AGENTBUS_PROFILE` names a profile that is not saved on this machine.",
        fix: "run `agentbus connect` for it, or pick a saved one with --profile";
    /// Several profiles, none chosen.
    ProfileNotChosen = 1041, 0, Configuration, Project, "Several profiles, none chosen",
        cause: "Several agent profiles are saved on this machine and the command was not told which one to use.",
        fix: "pass --profile <name> or set AGENTBUS_PROFILE";
    /// The profile is connected to another gateway.
    ProfileOtherGateway = 1042, 0, Configuration, Project, "Profile of another gateway",
        cause: "`agentbus connect` names a profile (by `--profile`, else the agent's name) that is saved here for another gateway; a profile holds one gateway's agent.",
        fix: "connect under another profile name: agentbus --profile <new name> connect --gateway <url> …, or use that profile's gateway";
    /// The profile's key is not active at the gateway.
    ProfileKeyInactive = 1043, 0, Configuration, Project, "Profile key revoked or unknown",
        cause: "The key the saved profile signs with is revoked, or not registered at the gateway, so the profile cannot act as its agent.",
        fix: "run `agentbus keys rotate` with a working key, or register a new key with the owner's token (agentbus connect --token abu_… --name <name>)";
    /// Re-verification of a delivered envelope failed at the receiver.
    ReverifyFailed = 1303, 0, Refused, Spec, "Re-verification failed at the receiver",
        cause: "The receiving sidecar re-verified a delivered envelope against the sender's registered keys and the signature did not verify. The message is kept and framed with `verified=\"false\"`; it is never dropped.",
        fix: "Treat the message as unauthenticated. Check `agentbus doctor`; if it repeats for one sender, that sender's key or the path between you is at fault.";
    /// A command run inside a harness session that could not say which session it is.
    SessionUnknown = 1304, 0, Input, Project, "Harness session not identified",
        cause: "The command runs inside a Claude Code, Codex or OpenCode session (the harness marked its environment), but no session id was found (`AGENTBUS_SESSION`, `CLAUDE_CODE_SESSION_ID`, `CODEX_THREAD_ID`, `OPENCODE_SESSION_ID`), so it is not sent: a session must never act with the engineer's authority.",
        fix: "Pass `--from <session id>` (every frame's answering command gives it), or run the command from the engineer's own terminal.";
    /// `--from` names someone other than the session the command runs in.
    NotYourself = 1305, 0, Input, Project, "Sessions act as themselves",
        cause: "`--from` names the engineer or another session, but the command runs inside a harness session that its environment identifies; a session may send only as itself.",
        fix: "Drop `--from`, or pass the session's own id; the engineer sends from a terminal outside any harness session.";

    /// Policy denies this sender this recipient.
    PolicyDenied = 2001, 403, Refused, Spec, "Denied by policy",
        cause: "The address resolved, but the workspace policy does not allow this sender to message this recipient.",
        fix: "Ask a workspace admin to allow the route, or send to a recipient the policy allows.";
    /// `source` does not match the authenticated agent.
    SourceMismatch = 2002, 403, Refused, Spec, "source does not match the credential",
        cause: "`source` must equal the calling agent's canonical address (§3.2, §13.3); an alias, another agent's address or a different workspace is refused.",
        fix: "Set `source` to the address returned at registration (`agentbus whoami`), and send with that agent's own credential.";
    /// The caller may not see or change this resource.
    Forbidden = 2003, 403, Refused, Project, "Not a party",
        cause: "The resource exists in the caller's workspace but the caller is neither a party to it nor a workspace admin.",
        fix: "Ask a party of the task or conversation, or a workspace admin, to act.";
    /// A lifecycle message from a sender §6.2 does not allow.
    WrongTaskSender = 2004, 403, Refused, Spec, "Not allowed to send this task message",
        cause: "§6.2: accept, progress, result, error and needs_input come only from the task's recipient; input only from its requester; cancel from the requester or a workspace admin. A lifecycle message naming a task the sender is not a party of gets this code whether or not that task exists, so the answer never tells.",
        fix: "Send the message from the agent §6.2 names, or address a task you are a party of.";

    /// The body is not well-formed I-JSON.
    MalformedJson = 3001, 400, Refused, Project, "Body is not valid I-JSON",
        cause: "The body is not a JSON object that RFC 7493 (I-JSON) accepts: a syntax error, a duplicate member name at any depth, a lone surrogate escape, an integer beyond ±(2^53−1), a number out of range, or nesting deeper than 64 levels. These are refused rather than changed, because a signature would otherwise cover a value the sender never wrote.",
        fix: "Send one JSON object, UTF-8, without duplicate keys; write integers above 2^53−1 as strings.";
    /// A required attribute is missing.
    MissingAttribute = 3002, 400, Refused, Project, "Required attribute missing",
        cause: "An attribute §2.1 requires from the sender is absent (`specversion id source type time datacontenttype to conversation_id traceparent schema sig data`).",
        fix: "Add the attribute named in the message. `agentbus envelope validate` lists every problem at once.";
    /// An attribute has a wrong type or form.
    InvalidAttribute = 3003, 400, Refused, Project, "Attribute value invalid",
        cause: "An attribute has the wrong JSON type or form: for example `specversion` other than \"1.0\", an `id` that is not a `msg_` id, a `time` that is not RFC 3339 with a zone, a malformed `traceparent`, an unknown `priority`, or `datacontenttype` other than `application/json`.",
        fix: "Correct the attribute as the message says; §2.1 gives each attribute's form.";
    /// `type` and `schema` disagree on the major version.
    SchemaMismatch = 3004, 400, Refused, Spec, "type and schema disagree",
        cause: "The major version in `type` (`.vN`) and in the `schema` URL (`/vN.json`) differ, or `dataschema` is present and differs from `schema` (§13.5).",
        fix: "Use the schema URL of the type's own major: `https://komsary.agentbus.exchange/schemas/<type without .vN>/vN.json`.";
    /// `time` is too far from the gateway clock.
    ClockSkew = 3005, 400, Refused, Spec, "Clock skew too large",
        cause: "`time` differs from the gateway clock by more than 300 s (§3.2).",
        fix: "Synchronise the sender's clock (NTP) and set `time` when the envelope is built; `agentbus doctor` shows the skew.";
    /// The `id` was already used by this source with a different body.
    DuplicateId = 3006, 409, Refused, Spec, "Message id already used",
        cause: "This source already published this `id` within the 24 h replay window with different content (§3.2, §8). A retry of identical bytes returns the original receipt instead.",
        fix: "Mint a new `msg_` id for new content; to retry safely, resend the identical envelope or set `idempotency_key`.";
    /// The envelope is too large.
    EnvelopeTooLarge = 3007, 413, Refused, Project, "Envelope too large",
        cause: "The serialised envelope exceeds 1 MiB (1,048,576 bytes, §2.3).",
        fix: "Move large content into a claim-check attachment (§9): `agentbus send --attach FILE`.";
    /// An attribute is longer than its limit.
    AttributeTooLong = 3008, 400, Refused, Project, "Attribute too long",
        cause: "`subject` is limited to 200 characters and `idempotency_key` to 128 (§2.3), counted in Unicode code points.",
        fix: "Shorten the attribute; put detail in `data`.";
    /// An attribute name breaks the naming rule.
    InvalidAttributeName = 3009, 400, Refused, Project, "Attribute name invalid",
        cause: "Attribute names are lowercase `[a-z0-9_]` (§2.1).",
        fix: "Rename the attribute; extensions conventionally start with `x_`.";
    /// More than 16 extension attributes.
    TooManyExtensions = 3010, 400, Refused, Project, "Too many extension attributes",
        cause: "A sender may add at most 16 attributes beyond the spec's table (§2.3).",
        fix: "Fold extra information into one extension object or into `data`.";
    /// `data` does not match the type's schema.
    DataInvalid = 3011, 422, Refused, Project, "data does not match its schema",
        cause: "`data` fails the JSON Schema registered for the message type (§5); the message names the JSON path of each failure.",
        fix: "Correct the fields at the paths given; `agentbus envelope validate` checks locally, and `GET /schemas/<type>/v1.json` returns the schema.";
    /// The gateway has no schema for this type.
    UnknownType = 3012, 400, Refused, Project, "Unknown message type",
        cause: "The gateway has no schema registered for this `type` and `schema` (checklist G-WP-10). Receivers treat unknown types as opaque (§11.3), but the gateway only accepts types it can validate.",
        fix: "Use a registered type (`agentbus envelope validate` checks an envelope's type locally); `GET /.well-known/agentbus.json` and `/schemas/` list them.";
    /// `correlation_id` is required for this type.
    MissingCorrelation = 3013, 400, Refused, Project, "correlation_id required",
        cause: "Every `task.*` message except `task.request`, and every `ack.v1`, must carry `correlation_id` = the id of the message it answers (§2.1, §7).",
        fix: "Set `correlation_id` to the `msg_` id of the request or message being answered; `agentbus reply` does this for you.";
    /// `capability` or `capability_version` is missing or malformed.
    InvalidCapability = 3014, 400, Refused, Project, "capability invalid",
        cause: "`task.request` requires `capability` (dot-separated lowercase identifiers) and `capability_version` (a major version such as \"1\"); `capability_version` is required whenever `capability` is set (§2.1, §5.2).",
        fix: "Set both, for example `capability: \"code.review\"`, `capability_version: \"1\"`.";
    /// An address breaks the §4.1 grammar.
    InvalidAddress = 3015, 400, Refused, Project, "Address invalid",
        cause: "An address must be `agent://<tenant>/<workspace>/<name>`, `topic://<tenant>/<workspace>/<topic>` or an `agt_` id; slugs and names are 3–40 characters of lowercase letters, digits and `-` (topic names may also use `.`) (§4.1).",
        fix: "Correct the address; `agentbus agents` lists the addresses you can reach.";
    /// A request body (other than an envelope) is invalid.
    InvalidRequest = 3016, 400, Refused, Project, "Request invalid",
        cause: "A request body or query parameter does not have the documented form.",
        fix: "Correct the field named in the message; `docs/api.md` and the OpenAPI document at `/v1/openapi.json` describe every request.";
    /// `task_id` and `correlation_id` name different tasks.
    TaskMismatch = 3017, 400, Refused, Project, "task_id does not match the correlation",
        cause: "A task lifecycle message's `data.task_id` names a different task than the request its `correlation_id` points at (checklist G-WP-16).",
        fix: "Copy `task_id` from the receipt or the request's delivery, and `correlation_id` from the request's `id`.";
    /// A task request addressed to a topic.
    TaskToTopic = 3018, 400, Refused, Project, "task.request to a topic",
        cause: "A task has one recipient; a `task.request` addressed to `topic://` is refused in v1 (checklist G-WP-17).",
        fix: "Address the task to one agent; use a topic message.v1 to find a worker first.";
    /// Uploaded blob content does not match its declaration.
    BlobMismatch = 3020, 400, Refused, Project, "Blob content does not match",
        cause: "The uploaded bytes' size or sha256 differ from those declared at `POST /v1/blobs` (§9).",
        fix: "Declare the exact size and lowercase hex sha256 of the file, then upload the same bytes.";
    /// An attachment reference disagrees with the stored blob.
    AttachmentMismatch = 3021, 400, Refused, Project, "Attachment reference does not match its blob",
        cause: "An attachment's `size` or `sha256` differs from the blob it references (§9).",
        fix: "Copy `size` and `sha256` from the blob's registration.";
    /// An attachment name is not a plain file name.
    InvalidAttachmentName = 3022, 400, Refused, Project, "Attachment name invalid",
        cause: "Attachment names are plain file names: no `/` or `\\`, no NUL or other control character, not `.` or `..`, at most 255 characters (§9, checklist G-WP-21).",
        fix: "Use the file's base name.";
    /// A task lifecycle message names another conversation than its task's.
    TaskConversation = 3023, 400, Refused, Project, "Task message outside its conversation",
        cause: "Every lifecycle message of a task (accept, progress, needs_input, input, result, error, cancel) carries the `conversation_id` of its `task.request` (§7); this one names another conversation.",
        fix: "Use `agentbus accept`, `progress`, `complete` and the other task commands, which copy the request's `conversation_id`; `agentbus trace TASK` shows it.";
    /// `data.input` fails the capability's `input_schema`.
    CapabilityInputInvalid = 3024, 422, Refused, Project, "Input does not match the capability",
        cause: "`data.input` of a `task.request` fails the `input_schema` the recipient's card declares for this capability and version (§5.2, §10); an absent `input` is checked as `{}`. `details.violations` lists each failure with its JSON Pointer.",
        fix: "Correct the input at the paths given; `agentbus agents show <worker>` prints the capability's `input_schema`.", cli: "correct --input at the paths given; `agentbus agents show <worker>` prints the capability's input_schema";
    /// A card's capability declaration is malformed.
    InvalidCapabilityDeclaration = 3025, 422, Refused, Project, "Capability declaration invalid",
        cause: "An entry of the card's `capabilities` is not valid (§10): not an object, a `name` that is not dot-separated lowercase identifiers, a `version` that is not a major such as \"1\", a name and version declared twice, a field of the wrong type, or an `input_schema`/`output_schema` that is not a JSON Schema (draft 2020-12) the gateway can compile without fetching anything. `details.violations` lists each problem with its JSON Pointer.",
        fix: "Correct the declaration at the paths given; schemas must be self-contained (no remote `$ref`).";
    /// A workspace policy document does not match the policy schema.
    InvalidPolicy = 3026, 422, Refused, Project, "Policy document invalid",
        cause: "The policy does not match `/schemas/gateway/policy/v1.json`: an unknown field, a wrong type, a `from` or `to` that is not an address pattern, or an `effect` other than `allow` or `deny`. `details.violations` lists each problem with its JSON Pointer; nothing was changed.",
        fix: "Correct the document at the paths given: the console's Policy page shows each error beside its field, `/schemas/gateway/policy/v1.json` is the schema and `docs/api.md` explains the patterns.";
    /// The body's media type is not the one the endpoint takes.
    UnsupportedMediaType = 3030, 415, Refused, Project, "Unsupported media type",
        cause: "The endpoint takes a JSON body and the request's `Content-Type` names something else (a form, plain text), or a WebSocket client sent a binary frame where the socket takes JSON text frames.",
        fix: "Send `Content-Type: application/json` with a JSON body (`curl -H 'content-type: application/json'`); on the WebSocket, send text frames.";
    /// The request body did not arrive within the body timeout.
    BodyTimeout = 3031, 408, Refused, Project, "Request body too slow",
        cause: "The request body did not arrive in full within the gateway's `body_timeout` (60 s by default) after its headers; the gateway closes the connection.",
        fix: "Send the body at once after the headers; for a large upload over a slow link, ask the operator to raise `body_timeout` (docs/settings.md).";
    /// A blob is larger than the plan allows.
    BlobTooLarge = 3040, 413, Refused, Spec, "Blob too large",
        cause: "The declared blob size is above the effective maximum: the plan's `blob_bytes`, and without an S3 store also the inline cap `AGENTBUS_BLOB_INLINE_MAX` (8 MiB by default).",
        fix: "Split or compress the content; or ask the gateway's operator to store blobs in S3 (`agentbus gateway --s3-endpoint URL --s3-bucket NAME`, docs/deploy.md), which takes files up to the plan's `blob_bytes`, or to raise the inline cap (`agentbus gateway --blob-inline-max 64MiB`).";
    /// An agent card is larger than the gateway accepts.
    CardTooLarge = 3041, 413, Refused, Project, "Agent card too large",
        cause: "The body of `POST /v1/agents` or `PATCH /v1/agents/{id}` is larger than the gateway's `card_max_bytes` (64 KiB by default). Cards travel in every directory listing (§10), so they are kept small.",
        fix: "Shorten the description, capabilities or tags; put long documentation behind a URL in the card.";
    /// A WebSocket frame from the client is larger than the gateway reads.
    FrameTooLarge = 3042, 0, Refused, Project, "WebSocket frame too large",
        cause: "A frame sent on `GET /v1/inbox/ws` is larger than 64 KiB. The gateway answers with an `error` frame carrying this code, then closes the socket with close code 1009.",
        fix: "Ack in frames of at most 1,000 acks (an `acks` frame of 1,000 fits), or ack over HTTP (`POST /v1/inbox/acks`).";
    /// The blob's upload window closed before its content was completed.
    UploadWindowClosed = 3055, 410, Refused, Project, "Upload window closed",
        cause: "With an S3 store, a blob's pre-signed upload is valid for 15 minutes from `POST /v1/blobs` (§9), and `POST /v1/blobs/{id}/complete` is accepted only within that window; a blob never completed in it expires and its object is deleted.",
        fix: "Send again with `--attach PATH` (`agentbus send`, `delegate`, `complete`, `answer`), which registers, uploads and completes the file at once.";
    /// `complete` found no object to verify.
    ContentNotUploaded = 3056, 409, Refused, Project, "Blob content not uploaded",
        cause: "`POST /v1/blobs/{id}/complete` found no object for the blob in the store: the pre-signed PUT was not made, failed, or went to another URL (§9). Without an S3 store there is no pre-signed target and content is uploaded with `PUT /v1/blobs/{id}/content`.",
        fix: "PUT the sealed content to the `upload.url` of the registration, with exactly its `upload.headers`, then call complete again.";
    /// The uploaded object is not the content sealed under the blob's key.
    ContentNotSealed = 3057, 400, Refused, Project, "Blob content not sealed under its key",
        cause: "The object uploaded to the pre-signed target does not open under the blob's content key (`upload.sealing.key`): it was sent unsealed, sealed under another key, cut short or changed (§9, docs/security.md). The object was deleted; the blob stays pending until its window closes.",
        fix: "Seal the file as `upload.sealing` describes (agentbus-chunked-v1: 1 MiB pieces, XChaCha20-Poly1305, nonce = piece index and a last-piece flag) and PUT it again, or let `agentbus … --attach` do it.";

    /// Not a gateway URL.
    NotAGatewayUrl = 3060, 0, Usage, Project, "Not a gateway URL",
        cause: "`--gateway` is not an `http://` or `https://` URL with a host; this is checked before any request.",
        fix: "write the whole URL, e.g. --gateway http://127.0.0.1:7700";
    /// Not an address.
    NotAnAddress = 3061, 0, Usage, Project, "Not an address",
        cause: "A destination is not `agent://<tenant>/<workspace>/<name>`, `topic://<tenant>/<workspace>/<topic>` or an `agt_` id (§4.1); this is checked before any request.",
        fix: "write agent://<tenant>/<workspace>/<name>, topic://<tenant>/<workspace>/<topic> or an agt_ id; `agentbus agents` lists the addresses";
    /// Value cannot be used.
    ValueInvalid = 3062, 0, Input, Project, "Value cannot be used",
        cause: "An argument or input value does not have the form the command takes.",
        fix: "check the value; `agentbus <command> --help` shows the expected form";
    /// Id of another kind.
    WrongIdKind = 3063, 0, Usage, Project, "Id of another kind",
        cause: "The id names another kind of thing than the command takes: a task's `tsk_` id where a message is needed, or a message only this machine holds (`lm_`) where a gateway message is.",
        fix: "`agentbus inbox --json` and `agentbus tasks` show every id of a message and its task";
    /// An agent credential without the agent's id.
    AgentIdMissing = 3064, 0, Usage, Project, "Agent credential without its agent",
        cause: "An agent credential (`aba_…`) connects a machine to an existing agent, which must be named by its `agt_` id; this is checked before any request.",
        fix: "pass --agent agt_… with the credential, or connect with a user token (abu_…) to register a new agent: agentbus connect --gateway <url> --token abu_… --name <name>";
    /// No agent of this short name in the workspace.
    UnknownShortName = 3065, 0, Input, Project, "No agent of this name in the workspace",
        cause: "A bare name (`reviewer`) stands for `agent://<tenant>/<workspace>/reviewer` of the profile's workspace, and the directory this agent sees holds no agent of that name or alias there; this is checked before anything is sent.",
        fix: "run `agentbus agents` to list the directory; write an agent outside the workspace by its whole address (agent://<tenant>/<workspace>/<name>)";
    /// A short name several agents answer to.
    AmbiguousShortName = 3066, 0, Usage, Project, "Name several agents answer to",
        cause: "A bare name stands for an agent only when exactly one agent of the directory this agent sees has that name or alias, and several do (in several workspaces, or one by its name and another by an alias); this is checked before anything is sent.",
        fix: "write the whole address of the one you mean; `agentbus agents` lists the directory";
    /// A search query that cannot be run.
    InvalidSearch = 3080, 400, Refused, Project, "Search query not usable",
        cause: "The query is longer than 512 bytes, has more than 16 words, has an unclosed `\"`, names a filter other than from, to, type, conversation, capability, state, failure, attachment, since and until, or gives one a value it cannot take. Queries are bounded so that none is slow.",
        fix: "Shorten or correct the query: words, \"quoted phrases\" and filters such as `from:reviewer since:7d` (`agentbus search --help`).";
    /// No agent has this address or id.
    UnknownAgent = 4001, 404, Refused, Spec, "Unknown agent",
        cause: "No agent of the caller's tenant has this address, alias or `agt_` id (§4.2).",
        fix: "Check the address with `agentbus agents`; aliases resolve only within their own workspace.", cli: "check the address; `agentbus agents` lists the directory";
    /// No topic has this address.
    UnknownTopic = 4002, 404, Refused, Spec, "Unknown topic",
        cause: "The topic does not exist. Topics are created on the first subscription in their workspace (§4.4).",
        fix: "Subscribe first (`agentbus topic subscribe <name>`), or check the topic's workspace.";
    /// The agent was deleted.
    AgentDeleted = 4003, 410, Refused, Spec, "Agent deleted",
        cause: "The address or id names an agent that was deleted (§4.2).",
        fix: "Send to another agent; a new agent with the same name has a new `agt_` id.";
    /// The resource does not exist, or the caller may not know that it does.
    NotFound = 4004, 404, Refused, Project, "Not found",
        cause: "No resource with this id exists for the caller. Resources of other tenants answer exactly as ones that do not exist.",
        fix: "Check the id; list what you can see with the matching `GET` collection.";
    /// The agent name is taken in this workspace.
    NameTaken = 4005, 409, Refused, Project, "Name already taken",
        cause: "Agent names and aliases are unique within a workspace (§4.1, §4.3); slugs never change once created.",
        fix: "Choose another name or alias.", cli: "pick another --name or alias; to connect this machine to the agent of that name, use its credential: agentbus connect --token aba_… --agent agt_… --name <name>";
    /// The card asks for more than 5 aliases.
    TooManyAliases = 4006, 400, Refused, Project, "Too many aliases",
        cause: "An agent card may declare at most 5 aliases (§4.3).",
        fix: "Keep at most 5 aliases.";
    /// A field of the card cannot be changed.
    ImmutableField = 4007, 400, Refused, Project, "Field cannot change",
        cause: "Slugs (`name`, `address`, `id`) never change after creation (§4.1); only `display_name`, `description`, `aliases`, `visibility`, `capabilities`, `tags`, `harness`, `pricing` and `status` may be patched.",
        fix: "Patch `display_name` to rename an agent for people.";
    /// The attachment references an unknown blob.
    UnknownAttachment = 4008, 422, Refused, Spec, "Attachment unknown",
        cause: "An attachment `ref` names no blob (§9).",
        fix: "Attach files with `--attach PATH` (`agentbus send`, `delegate`, `complete`, `answer`), which uploads them and references the returned `ref`.";
    /// The blob expired.
    BlobExpired = 4009, 410, Refused, Project, "Blob expired",
        cause: "Blobs expire after `AGENTBUS_BLOB_TTL` (30 days by default, §9).",
        fix: "Upload the content again.";
    /// The delivery was already acknowledged or was redelivered.
    StaleAck = 4010, 409, Refused, Project, "Ack refused",
        cause: "The ack names a delivery that is no longer outstanding: it was acked already, or its visibility timeout passed and the message was handed out again under a new delivery token.",
        fix: "Ack the latest delivery of the message; redelivered copies carry the same `id` and `sequence`, so a receiver's dedupe keeps one.";
    /// The topic belongs to another workspace.
    TopicScope = 4011, 403, Refused, Project, "Topic outside your workspace",
        cause: "Topics are workspace-scoped in v1 (§4.4): an agent may publish and subscribe only to topics of its own workspace.",
        fix: "Use a topic of your workspace.";
    /// No task has this id.
    UnknownTask = 4012, 404, Refused, Project, "Unknown task",
        cause: "No task with this id exists for the caller: it does not exist, or the caller is neither a party of it nor an admin whose scope covers it (both answer alike).",
        fix: "Use the `task_id` from the request's receipt or delivery.";
    /// The recipient is suspended; the message is held.
    RecipientSuspended = 4013, 409, Refused, Project, "Recipient suspended",
        cause: "The recipient agent is suspended (§5.9). The message was stored and is held in its inbox until an admin resumes the agent. This code reaches the sender in an `agentbus.system.undeliverable.v1` notice with `dead_lettered: false`, for each held message.",
        fix: "Wait for the recipient to be resumed, or send to another agent; the held message is delivered on resumption unless it expires first.";
    /// A lifecycle message is not addressed to the task's counterpart.
    TaskCounterpart = 4014, 400, Refused, Project, "Task message not addressed to the counterpart",
        cause: "Task lifecycle messages go between the task's parties (§6.2, §7): the worker's to the requester, the requester's to the worker. This one's `to` resolves to another agent, or to a topic.",
        fix: "Use the `agentbus` task commands (`accept`, `progress`, `complete`, `answer` …), which address the other party for you; `agentbus trace TASK` lists both.";
    /// The recipient's card does not declare the requested capability.
    CapabilityNotDeclared = 4015, 422, Refused, Project, "Capability not declared",
        cause: "A `task.request` names a `capability` and `capability_version` the recipient's card does not declare (§5.2, §10).",
        fix: "Read the recipient's capabilities with `agentbus agents show <agent>`, or ask its owner to declare the capability (`agentbus card edit --capability name@major`).";
    /// Delivery was tried as often as the gateway allows, and never acknowledged.
    DeadLettered = 4016, 410, Refused, Project, "Dead-lettered",
        cause: "The recipient's inbox handed the message out `max_attempts` times (a gateway setting) and no delivery was acknowledged within the visibility timeout (§8); it is kept as a dead letter and not delivered again. This code reaches the sender in an `agentbus.system.undeliverable.v1` notice with `dead_lettered: true`.",
        fix: "Check that the recipient's sidecar or worker runs and acknowledges (`agentbus doctor` on its machine), then send the message again.";
    /// task.input while no question is open.
    NoOpenQuestion = 4020, 409, Refused, Spec, "No question is open",
        cause: "`task.input` is accepted only while the task is `needs_input` (§5.7b).",
        fix: "Wait for the worker's `task.needs_input`; to add information otherwise, send a message.v1 in the task's conversation.";
    /// The attachment's blob is still pending.
    AttachmentPending = 4021, 409, Refused, Spec, "Attachment still pending",
        cause: "The referenced blob was registered but its content was not uploaded and verified yet (§9).",
        fix: "Attach with `--attach PATH` (`agentbus send`, `delegate`, `complete`, `answer`), which finishes each upload before it publishes.";
    /// The blob is not the caller's to use.
    AttachmentForbidden = 4022, 403, Refused, Spec, "Attachment not accessible",
        cause: "The blob belongs to another tenant, or the caller is neither its uploader nor a party of a message referencing it (§9).",
        fix: "Reference only blobs you uploaded or received.";
    /// The recipient's inbox is full.
    InboxFull = 4040, 429, Refused, Spec, "Inbox full",
        cause: "The recipient's inbox holds its maximum number of unacknowledged messages (§13.6).",
        fix: "Retry later (see `Retry-After`); the recipient must drain its inbox.";
    /// The path exists but does not take this method.
    MethodNotAllowed = 4041, 405, Refused, Project, "Method not allowed",
        cause: "The endpoint exists but does not take this HTTP method; the `Allow` header lists the methods it takes.",
        fix: "Use a method from the `Allow` header; `docs/api.md` and `/v1/openapi.json` list every operation.";
    /// A receipt names no delivery of the caller's inbox.
    UnknownDelivery = 4050, 404, Refused, Project, "Unknown delivery",
        cause: "A receipt (`POST /v1/inbox/receipts`) names an inbox sequence at which the calling agent has no delivery, or a message id other than the one delivered there. Receipts are reported only by a message's recipient, for copies it received.",
        fix: "Report each message with the `sequence` and `id` it was delivered with; `agentbus sidecar` does this for you.";
    /// No message of the caller has this id.
    UnknownMessage = 4051, 404, Refused, Project, "Unknown message",
        cause: "`GET /v1/messages/{id}/delivery` answers only the sender of a message; no message with this id was sent by the calling agent (a message sent by someone else answers exactly the same).",
        fix: "Pass the `msg_` id of a message this agent sent (`agentbus trace msg_…` on the sending machine).";
    /// An MCP tool's arguments do not fit its schema.
    ToolArguments = 4070, 0, Usage, Project, "Tool arguments do not fit the tool",
        cause: "An MCP tool was called with a missing or unknown argument, or one of the wrong type or value (see the tool's input schema in `tools/list`).",
        fix: "Call the tool again with the arguments its schema names; `docs/mcp.md` lists each tool.";
    /// No agent profile is connected for a gateway address.
    NoAgentConnected = 4071, 0, Configuration, Project, "No agent connected for the gateway",
        cause: "The address names the gateway (agent://, topic://, agt_, tsk_, msg_), but the MCP server runs without a connected agent profile.",
        fix: "Run `agentbus connect` on this machine (or start `agentbus mcp --profile <name>`), then restart the MCP server.", cli: "run: agentbus connect --gateway <url> --token <token> --name <agent>";
    /// The transport an address names is not set up here.
    TransportNotSetUp = 4072, 0, Configuration, Project, "Transport not set up here",
        cause: "The address names a git share (share:<operator>/<agent>), but no share checkout is configured for this server.",
        fix: "Start `agentbus mcp --share <checkout>` (or set AGENTBUS_SHARE) after `agentbus share join`.";
    /// The local store refused the message.
    LocalRefused = 4073, 0, Declined, Project, "Refused by the local store",
        cause: "The local log refused the message: the recipient has not read your earlier messages (its pacing window is full), the clock runs behind, or the text is malformed.",
        fix: "Wait until the recipient reads your earlier messages (`directory` lists sessions with unread counts), then send again.", cli: "wait until the recipient reads your earlier messages (agentbus sessions shows unread counts)";
    /// A local address names no one session.
    UnknownRecipient = 4074, 0, Input, Project, "No such recipient here",
        cause: "The local address is not an address, or names no session of this machine, or several.",
        fix: "Use local, all, engineer, or a session id from the `directory` tool (give more of the id when several match).", cli: "give more of the session id, or its full id";
    /// The id names nothing held here.
    NothingHeldHere = 4075, 0, Input, Project, "Not held here",
        cause: "No message or task with that id was received or sent by this agent or session on this machine.",
        fix: "Use an id from `read_inbox` or `trace`; a message not received yet cannot be answered.", cli: "check the id; `agentbus sidecar --once` receives what is waiting";
    /// The session is paused by the engineer.
    SessionPaused = 4076, 0, Declined, Project, "Session paused",
        cause: "The engineer paused this session (`agentbus pause`); its tool calls are refused until they resume it.",
        fix: "Stop and wait for the engineer; `agentbus resume <session>` lifts the pause.";
    /// The gateway could not be reached.
    GatewayUnreachable = 4077, 0, Unavailable, Project, "Gateway unreachable",
        cause: "The connected agent's gateway did not answer (refused, timed out, TLS or DNS failure). Nothing was sent.",
        fix: "Check that the gateway runs and its URL in the profile (`agentbus doctor`), then retry.", cli: "check that the gateway is running and its URL in the profile (agentbus doctor)";
    /// A file to attach cannot be used.
    AttachmentUnreadable = 4078, 0, Input, Project, "Attachment cannot be read",
        cause: "A path in `attachments` does not name a readable file on this machine.",
        fix: "Pass paths of existing files (absolute, or relative to the MCP server's working directory).", cli: "check the path given to --attach";
    /// This machine's state failed.
    LocalStateFailed = 4079, 0, Configuration, Project, "Local state failed",
        cause: "Reading or writing this machine's AgentBus state (AGENTBUS_HOME: the local log, the agent's inbox, a share checkout) failed.",
        fix: "Check that AGENTBUS_HOME (and the share checkout) exist and are writable; the message says which file.", cli: "check that the agentbus state directory (AGENTBUS_HOME) is writable";
    /// No gateway listening.
    NoGatewayListening = 4080, 0, Unavailable, Project, "No gateway listening",
        cause: "The connection to the profile's gateway URL was refused: nothing listens at that address and port.",
        fix: "start the gateway (agentbus gateway), or connect again with its right URL: agentbus connect --gateway <url> …";
    /// Not an AgentBus gateway.
    NotAGateway = 4081, 0, Unavailable, Project, "Not an AgentBus gateway",
        cause: "The server at the gateway URL answered, but not as the AgentBus API promises: another service, or a gateway of an incompatible version.",
        fix: "check that the URL is an AgentBus gateway of a compatible version";
    /// Refused with a code this build does not know.
    UnknownGatewayCode = 4082, 0, Refused, Project, "Refused with a code this build does not know",
        cause: "The gateway refused the request with an `AB-` code this version of agentbus does not know; the code and the gateway's message are shown as it wrote them.",
        fix: "see the gateway's documentation for this error";
    /// No home for agentbus state.
    NoStateHome = 4083, 0, Configuration, Project, "No home for agentbus state",
        cause: "Neither `AGENTBUS_HOME` nor `HOME` is set, so this machine's agentbus state (profiles, keys, the local log) has no place.",
        fix: "export AGENTBUS_HOME=/path/to/state";
    /// Local delivery refused the message.
    ImportFailed = 4084, 0, Configuration, Project, "Local delivery refused the message",
        cause: "A message received from the gateway could not be handed to this machine's local delivery (its store under AGENTBUS_HOME).",
        fix: "check that the local store (AGENTBUS_HOME) is writable";
    /// No task with that request.
    UnknownTaskRequest = 4085, 0, Input, Project, "No task with that request",
        cause: "No task of this agent has the request id given.",
        fix: "pass the task's tsk_ id";
    /// Another worker runs for the agent.
    WorkerRunning = 4100, 0, Configuration, Project, "A worker already runs for the agent",
        cause: "`agentbus work` holds a lock per agent (`<AGENTBUS_HOME>/agents/<agent_id>/work.lock`), and another worker process holds it.",
        fix: "Run one worker per agent: stop the other one, or start this one with another `--profile`.";
    /// The worker has no capability to serve.
    NothingToServe = 4101, 0, Configuration, Project, "The worker serves no capability",
        cause: "The agent's card declares no capability, or a `--capability` given to `agentbus work` is not on the card.",
        fix: "Declare what the agent serves (`agentbus card edit --capability name@major`), or pass only capabilities its card declares.";
    /// The worker's harness program cannot be run.
    HarnessMissing = 4102, 0, Configuration, Project, "The harness program cannot be run",
        cause: "`agentbus work` checks its harness program at start: `--program` (a path is read against the folder the worker was started in; a bare name is looked up on PATH), else `claude`, `codex` or `opencode` on PATH, is missing or not an executable file.",
        fix: "Install the harness, or pass its path: `agentbus work --harness <name> --program /path/to/program`.";

    /// Worker setting unusable.
    WorkerSetting = 4103, 0, Input, Project, "Worker setting unusable",
        cause: "A setting of `agentbus work` (a flag, or its environment variable) cannot be used.",
        fix: "see agentbus work --help";
    /// The harness could not be started.
    HarnessDidNotStart = 4104, 0, Configuration, Project, "The harness could not be started",
        cause: "`agentbus work` could not start its harness program for a task.",
        fix: "check --program and that the harness is installed (docs/work.md)";
    /// Not a session id.
    BadSessionId = 4110, 0, Input, Project, "Not a session id",
        cause: "A session id names files of the local store, so it may hold only letters, digits, '.', '_' and '-', at most 128 of them.",
        fix: "run `agentbus sessions` to list the sessions of this machine";
    /// Every reader would drop the message.
    LocalMalformed = 4111, 0, Input, Project, "Every reader would drop the message",
        cause: "Every reader of the local log would drop this message (LM-68): a field is too long or holds control characters.",
        fix: "remove control characters and shorten the message, then send it again";
    /// Paced.
    Paced = 4112, 0, Declined, Project, "Paced",
        cause: "The recipient takes messages from you at a fixed pace (one per 10 s to `local`, `all` and the engineer), and the next one is not admitted yet.",
        fix: "send it again when that time has passed, or to one session by name (agentbus sessions lists them)";
    /// Steer not admitted.
    SteerNotAdmitted = 4113, 0, Declined, Project, "Steer not admitted",
        cause: "Steers come from the engineer's terminal, to sessions of this machine; this sender's steers would not count (LM-13, LM-14).",
        fix: "steer only sessions of this machine, from the engineer's terminal";
    /// Clock behind.
    ClockBehind = 4114, 0, Declined, Project, "Clock behind",
        cause: "This machine's clock is behind a message already sent to the same recipient, so the new one would be ordered before it (LM-66).",
        fix: "check this machine's clock";
    /// Not a local address.
    NotALocalAddress = 4115, 0, Usage, Project, "Not a local address",
        cause: "A local address is `local`, `all`, `engineer[:<email>]`, `<session>@<node>` or a session id prefix.",
        fix: "run `agentbus sessions` to list the sessions of this machine";
    /// Unknown session.
    UnknownSession = 4116, 0, Input, Project, "Unknown session",
        cause: "No session of this id is known on this machine.",
        fix: "run `agentbus sessions` to list them";
    /// Not an agent identity.
    NotAnAgentIdentity = 4117, 0, Usage, Project, "Not an agent identity",
        cause: "A session is bound to an agent identity: `agent://<tenant>/<workspace>/<name>` or `share:<operator>/<agent>`.",
        fix: "use agent://<tenant>/<workspace>/<name> or share:<operator>/<agent>";
    /// Hook input unreadable.
    BadHookEvent = 4118, 0, Input, Project, "Hook input unreadable",
        cause: "The hook read standard input that is not its harness's event JSON (a `session_id` and the event's name).",
        fix: "let the harness run the hook (agentbus hooks install); `agentbus hooks status` shows what is installed";
    /// Import refused.
    ImportRefused = 4119, 0, Internal, Project, "Import refused",
        cause: "Another transport handed local delivery a message it cannot import: a local message, a sender or recipient that is not an agent identity, or a field that is not well-formed.",
        fix: "this is a bug in agentbus; please report it with the command you ran";
    /// Codex configuration unreadable.
    CodexConfigUnreadable = 4120, 0, Configuration, Project, "Codex configuration unreadable",
        cause: "Codex's `config.toml` is not TOML, or its `hooks` or `hooks.state` is not a table; agentbus leaves it alone.",
        fix: "fix the file named above (Codex reads it too), then run this again";
    /// Settings file unreadable.
    SettingsUnreadable = 4121, 0, Configuration, Project, "Settings file unreadable",
        cause: "A harness's settings file, or an MCP client's configuration, does not parse as JSON or TOML; agentbus leaves it alone.",
        fix: "fix or move the file named above, then run this again";
    /// Not written by agentbus.
    NotOurs = 4122, 0, Configuration, Project, "Not written by agentbus",
        cause: "A file or entry agentbus would write (an OpenCode plugin, an MCP server named `agentbus`) exists and was not written by agentbus; it is left alone.",
        fix: "move or rename the one named above, then run this again";
    /// MCP connection failed.
    McpTransport = 4123, 0, Unavailable, Project, "MCP connection failed",
        cause: "The MCP server's connection to its client (its standard input and output) failed.",
        fix: "start `agentbus mcp` from the MCP client's configuration (agentbus mcp install)";
    /// Not a share address.
    NotAShareAddress = 4124, 0, Usage, Project, "Not a share address",
        cause: "A `share:` address is `share:<operator>/<agent>` (or `share:<operator>/any`), and this one lacks a part or holds other characters.",
        fix: "write share:<operator>/<agent>, or share:<operator>/any";
    /// No recipient named.
    NoRecipient = 4125, 0, Usage, Project, "No recipient named",
        cause: "The address is empty: no recipient was named.",
        fix: "name a recipient: local, all, engineer, <session>, agent://…, share:<operator>/<agent>";
    /// Configuration file cannot be written.
    ConfigFileUnwritable = 4126, 0, Configuration, Project, "Configuration file cannot be written",
        cause: "A harness's or MCP client's configuration file could not be read or written.",
        fix: "check that the configuration's folder is writable";
    /// Share file unreadable.
    ShareIo = 4200, 0, Input, Project, "Share file unreadable",
        cause: "Reading or writing a file of the share checkout failed.",
        fix: "check the file named above";
    /// operators.yaml unreadable.
    RegistryUnreadable = 4201, 0, Input, Project, "operators.yaml unreadable",
        cause: "`operators.yaml`, the share's registry of operators (agentshare §2), cannot be read.",
        fix: "check the file named above";
    /// git cannot be run.
    GitMissing = 4202, 0, Configuration, Project, "git cannot be run",
        cause: "The `git` binary could not be started; a share is worked through it.",
        fix: "install git and make sure it is on PATH";
    /// git failed.
    GitFailed = 4203, 0, Configuration, Project, "git failed",
        cause: "A git command failed; what git printed follows.",
        fix: "run the git command shown by hand in the checkout to see why";
    /// Share remote unreachable.
    RemoteUnreachable = 4204, 0, Unavailable, Project, "Share remote unreachable",
        cause: "The share's remote could not be reached (the network, permissions, a missing path).",
        fix: "check the network and credentials, or work with --offline and run `agentbus share sync` later";
    /// Other writers kept pushing first.
    PushRetriesExhausted = 4205, 0, Unavailable, Project, "Other writers kept pushing first",
        cause: "Every retry of a push lost the race to another writer (agentshare §1).",
        fix: "run `agentbus share sync` again; your commit is kept locally";
    /// Push refused by the remote.
    PushRefused = 4206, 0, Refused, Project, "Push refused by the remote",
        cause: "The remote refused a push for another reason than a lost race: a hook, a protected branch.",
        fix: "ask the share's operator why the remote refuses pushes";
    /// Local changes conflict with the remote.
    RebaseConflict = 4207, 0, Configuration, Project, "Local changes conflict with the remote",
        cause: "Unpushed local changes conflict with the remote in a way `sync` cannot resolve without editing somebody's file, which it never does.",
        fix: "finish it by hand (`git status` says what is left, then `git rebase --continue`) or `git rebase --abort`, then `agentbus share sync`";
    /// Not a share checkout.
    NotAShare = 4208, 0, Configuration, Project, "Not a share checkout",
        cause: "The folder is not a git checkout of a share.",
        fix: "pass --share <checkout>, set AGENTBUS_SHARE, or cd into a share checkout";
    /// Share folder missing.
    NoSuchShareFolder = 4209, 0, Configuration, Project, "Share folder missing",
        cause: "The folder given as the share does not exist.",
        fix: "pass --share <checkout> (or AGENTBUS_SHARE) naming a folder that exists";
    /// Not joined.
    NotJoined = 4210, 0, Configuration, Project, "Not joined",
        cause: "This checkout has no operator identity yet, or the sender is not declared in `operators.yaml` (agentshare §2).",
        fix: "agentbus share join --operator <you> --instance <fleet> --agent <name>";
    /// Share argument invalid.
    ShareArgument = 4211, 0, Usage, Project, "Share argument invalid",
        cause: "An identifier, a share address or an argument breaks a rule of agentshare (§2, §3): its form, a type, `re:`, a status or a key.",
        fix: "see agentbus share <command> --help";
    /// Recipient not declared.
    UndeclaredRecipient = 4212, 0, Usage, Project, "Recipient not declared",
        cause: "A recipient is not declared in `operators.yaml`, and `--strict` refuses to write a file for it into the share, where it would stay for good.",
        fix: "check the address against operators.yaml, or send without --strict";
    /// No such message in the share.
    UnknownShareId = 4213, 0, Input, Project, "No such message in the share",
        cause: "No message or publication of the share has this id.",
        fix: "run `agentbus share sync`, then find the id with `agentbus share inbox` or `threads`";
    /// Folder not empty.
    FolderNotEmpty = 4214, 0, Input, Project, "Folder not empty",
        cause: "`share init` makes a share only in an empty folder, and this one holds other files.",
        fix: "choose a new folder, or clone the existing share and `join` it";
    /// Uncommitted changes.
    UncommittedChanges = 4215, 0, Configuration, Project, "Uncommitted changes",
        cause: "Tracked files have uncommitted changes that a rebase or reset would have to touch; agentbus never commits or discards somebody's work.",
        fix: "commit them (git commit {files}) or discard them (git checkout -- {files}), then run the command again";
    /// A pushed file was changed.
    PushedFileEdited = 4216, 0, Configuration, Project, "A pushed file was changed",
        cause: "This clone's unpushed commits modify or delete a file already in the share; agentshare never edits or deletes a pushed file (§1).",
        fix: "undo that change in a new commit (`git log -p -- {path}` shows it; then `git checkout @{upstream} -- {path}` and commit), then `agentbus share sync`";
    /// operators.yaml changed on both sides.
    RegistryConflict = 4217, 0, Configuration, Project, "operators.yaml changed on both sides",
        cause: "This clone's unpushed edit of a registry block conflicts with the remote's edit of it (agentshare §8).",
        fix: "merge by hand: `git rebase @{upstream}`, keep both edits in operators.yaml, `git add operators.yaml`, `git rebase --continue`; then `agentbus share sync`";
    /// The remote lacks this branch.
    NoShareBranch = 4218, 0, Configuration, Project, "The remote lacks this branch",
        cause: "The remote has branches, but not the one this checkout writes to; writing would start a second, unrelated history.",
        fix: "check out the share's branch (git checkout {branch}), or ask the share's operator which branch it is";
    /// Unrelated histories.
    UnrelatedHistories = 4219, 0, Configuration, Project, "Unrelated histories",
        cause: "This checkout's history and the remote's branch have no commit in common; pushing would need a force-push.",
        fix: "clone the share afresh and join there; copy anything unpushed from this checkout by hand";
    /// The remote holds no share.
    ShareUninitialised = 4220, 0, Configuration, Project, "The remote holds no share",
        cause: "The share's remote has no commit, so no `operators.yaml`, README or `.gitattributes` to join.",
        fix: "make the share first: agentbus share init <new folder> --remote <url>; then clone it and join";
    /// The remote already holds a share.
    AlreadyAShare = 4221, 0, Input, Project, "The remote already holds a share",
        cause: "`share init` found a remote that already holds a share, with a history this checkout does not have.",
        fix: "clone it and join: git clone {url} <folder> && cd <folder> && agentbus share join …";
    /// The remote's HEAD names another branch.
    RemoteHeadElsewhere = 4222, 0, Configuration, Project, "The remote's HEAD names another branch",
        cause: "The share was pushed, but the remote's HEAD names another branch or none, so clones would check out nothing.",
        fix: "make {branch} the remote's default branch: on a host, in its settings; for a bare repository on this machine, git --git-dir {url} symbolic-ref HEAD {ref}";
    /// Not an agentshare file.
    NotAnArtifact = 4223, 0, Input, Project, "Not an agentshare file",
        cause: "A file of the share is not an agentshare artifact (§3): no frontmatter, not UTF-8, not YAML, a missing key, or an unsafe field. It is skipped.",
        fix: "ask its writer to write it again as agentshare §3 says; `agentbus share check` lists every such file";
    /// The publish rate limit was exceeded.
    RateLimited = 5001, 429, Refused, Spec, "Rate limit exceeded",
        cause: "The agent or token published faster than its configured rate (§13.6).",
        fix: "Wait for the number of seconds in `Retry-After`, then retry with the same `id` (retries of identical bytes are safe).";
    /// The agent holds as many WebSockets as the gateway allows.
    TooManySockets = 5002, 429, Refused, Project, "Too many WebSockets for this agent",
        cause: "The agent already holds `ws_per_agent` WebSockets on `GET /v1/inbox/ws` (4 by default); one sidecar per agent needs one.",
        fix: "Close the agent's other sockets (an old sidecar, a second `agentbus listen`), or receive by long-poll; `Retry-After` says when to try again.";
    /// A WebSocket reader did not keep up and was disconnected.
    SlowConsumer = 5003, 0, Refused, Project, "Slow WebSocket consumer",
        cause: "Deliveries waited for the WebSocket's reader longer than the gateway's `ws_send_timeout` (30 s by default) with its send buffer full: the reader is not reading. The gateway sends an `error` frame with this code, closes the socket with close code 1008, and returns the socket's unacknowledged deliveries to the inbox for the next connection.",
        fix: "Read the socket continuously and persist elsewhere (the sidecar does); reconnect and resume from your last sequence.";
    /// The attachment upload quota was exceeded.
    UploadQuota = 5005, 429, Refused, Spec, "Upload quota exceeded",
        cause: "The tenant's pending or total blob bytes exceed its quota (§13.6).",
        fix: "Wait for blobs to expire, or ask an admin to raise the quota.";

    /// The sidecar is older than the gateway supports.
    SidecarTooOld = 6002, 426, Refused, Spec, "Sidecar too old",
        cause: "The sidecar announced a version below the gateway's `min_sidecar_version` (§11.4).",
        fix: "Upgrade agentbus to at least the version in `/.well-known/agentbus.json`.";

    /// The gateway's storage failed.
    StorageUnavailable = 9001, 503, Unavailable, Project, "Storage unavailable",
        cause: "The gateway could not read or write its store (disk full, database unreachable). Nothing was stored for this request, unless the store failed while committing it: the gateway then cannot tell whether the commit landed.",
        fix: "Retry later with the same `id`: if the first try was stored after all, the retry answers 200 with its receipt and stores no second copy. Operators should check the gateway log for the request id.";
    /// The gateway holds as many connections as it allows.
    AtCapacity = 9002, 503, Unavailable, Project, "Gateway at connection capacity",
        cause: "The gateway already holds `max_connections` connections (1,024 by default, WebSockets included) and refused this one; nothing was read from it.",
        fix: "Retry after the seconds in `Retry-After`, reusing connections (keep-alive); operators can raise `max_connections` (docs/settings.md).";
    /// The gateway is shutting down.
    ShuttingDown = 9003, 503, Unavailable, Project, "Gateway shutting down",
        cause: "The gateway received SIGTERM or SIGINT: it finishes requests in flight and accepts no new work. WebSockets are closed with close code 1001 and this code as the reason.",
        fix: "Reconnect in a few seconds, to this gateway once it restarts or to another replica; retries of a publish with the same `id` are safe.";
    /// Every database connection of the gateway was busy.
    StoreBusy = 9010, 503, Unavailable, Project, "Store busy",
        cause: "Every PostgreSQL connection of this gateway process stayed busy for `store_wait` (5 s by default), or a row the request needs stayed locked by another database session for 10 s (another replica's transaction, or one whose host is gone, which the server ends within about 25 s): the database is slow, the pool (`store_pool`) is too small for the load, or a replica died mid-transaction. Nothing was stored for this request.",
        fix: "Retry after the seconds in `Retry-After` with the same `id`; operators should check the database's load and raise `store_pool` within its `max_connections` (docs/deploy.md).";
    /// A gateway setting's value cannot be used.
    SettingUnusable = 9020, 0, Configuration, Project, "Setting not usable",
        cause: "A flag, an `AGENTBUS_*` variable or a line of the `--config` file gives a gateway setting a value it cannot take; the gateway did not start.",
        fix: "{fix}; docs/settings.md lists every setting, and `agentbus gateway --print-config` shows where each value came from.";
    /// The gateway's listening address is taken or not allowed.
    ListenUnusable = 9021, 503, Unavailable, Project, "Cannot listen",
        cause: "The gateway could not bind its `listen` address: another process holds it, or the address is not this machine's or needs privileges. Nothing was written.",
        fix: "Stop the other process, or choose another address with `agentbus gateway --listen ADDR` (`AGENTBUS_LISTEN`).";
    /// Another gateway holds the data directory.
    DataDirLocked = 9022, 0, Configuration, Project, "Data directory in use",
        cause: "Another gateway process (or an `agentbus gateway admin-token`) holds the data directory's lock.",
        fix: "Stop the other gateway first, or give this one its own directory with `agentbus gateway --data DIR`.";
    /// The directory holds no gateway data.
    NoGatewayData = 9023, 0, Configuration, Project, "No gateway data",
        cause: "`agentbus gateway admin-token` was pointed at a directory no gateway ever started in, and no `--store` names a database.",
        fix: "Run it with the data directory (or `--store URL`) the first start printed: `agentbus gateway admin-token --data DIR`.";
    /// The data directory was made without the test clock, which this start asks for.
    NotATestDirectory = 9024, 0, Configuration, Project, "Not a test data directory",
        cause: "`--unsafe-test-clock` is given, but the data directory was created by a gateway without it: a production directory's clock is never moved.",
        fix: "Give the test gateway a new, empty directory: `agentbus gateway --unsafe-test-clock --data DIR`.";
    /// The data directory was made with the test clock, which this start lacks.
    TestDirectory = 9025, 0, Configuration, Project, "A test data directory",
        cause: "The data directory was created by a gateway started with `--unsafe-test-clock`, whose time may have been moved; this start lacks the flag.",
        fix: "Start it with `agentbus gateway --unsafe-test-clock` (tests only), or use another `--data` directory.";
    /// The data directory cannot be used.
    DataDirUnusable = 9026, 0, Configuration, Project, "Data directory unusable",
        cause: "The gateway could not create, read or write a file of its data directory, or the store in it refused to open.",
        fix: "Check that {dir} is writable by this user and holds this gateway's files (`ls -l {dir}`).";
    /// The PostgreSQL database refuses this gateway.
    DatabaseUnusable = 9027, 0, Configuration, Project, "Database unusable",
        cause: "The PostgreSQL database named by `store` answered, but cannot be used: a wrong password or role, a missing database, a schema from a newer release, or a server that does not write durably.",
        fix: "{fix}";
    /// The PostgreSQL server cannot be reached.
    DatabaseUnreachable = 9028, 503, Unavailable, Project, "Database unreachable",
        cause: "No PostgreSQL server answered at the host and port of `store` in time.",
        fix: "{fix}";
    /// This replica's master key does not open the database's tenant keys.
    MasterKeyMismatch = 9029, 0, Configuration, Project, "Master key mismatch",
        cause: "The database's tenant keys were sealed by another replica's `master.key`: this data directory holds a key of its own.",
        fix: "Replicas on one database share one master.key and gateway.key: copy both from the first replica's data directory (docs/deploy.md).";
    /// The S3 settings do not give a usable bucket.
    BlobStoreUnusable = 9030, 0, Configuration, Project, "Object store unusable",
        cause: "The `s3_*` settings were checked at start (§9) and do not give a bucket this gateway can write, read and delete in.",
        fix: "{fix}";
}

impl Code {
    /// The code's number, as in `AB-1011` → 1011.
    pub fn number(self) -> u16 {
        self.entry().number
    }

    /// The HTTP status the gateway answers with (0 for receiver-side diagnostics).
    pub fn http_status(self) -> u16 {
        self.entry().http_status
    }

    /// The path, relative to a gateway, where this code is documented: `/errors/AB-1011`.
    pub fn doc_path(self) -> String {
        format!("/errors/{self}")
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AB-{:04}", self.number())
    }
}

/// A string that is not a known `AB-` code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a known AB- code")]
pub struct UnknownCode(pub String);

impl serde::Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl FromStr for Code {
    type Err = UnknownCode;

    /// Parses `AB-1011`, `ab-1011` or `1011`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let digits = s
            .strip_prefix("AB-")
            .or_else(|| s.strip_prefix("ab-"))
            .unwrap_or(s);
        let number: u16 = digits.parse().map_err(|_| UnknownCode(s.to_owned()))?;
        Code::ALL
            .iter()
            .copied()
            .find(|c| c.number() == number)
            .ok_or_else(|| UnknownCode(s.to_owned()))
    }
}

/// The protocol crate's own errors, each with the code the gateway answers it with. The paths
/// name the inherent `code` where a type has one, so the trait never calls itself.
macro_rules! catalogued {
    ($($ty:ty => |$e:ident| $code:expr;)*) => {
        $(impl Catalogued for $ty {
            fn code(&self) -> Code {
                let $e = self;
                $code
            }
        })*
    };
}

catalogued! {
    crate::address::AddressError => |e| crate::address::AddressError::code(e);
    crate::signing::KeyError => |e| crate::signing::KeyError::code(e);
    crate::signing::SignatureError => |e| crate::signing::SignatureError::code(e);
    crate::json::JsonError => |e| crate::json::JsonError::code(e);
    crate::task::TaskError => |e| crate::task::TaskError::code(*e);
    crate::envelope::ParseError => |e| crate::envelope::ParseError::code(e);
    crate::cloudevents::ProjectionError => |_e| Code::InvalidAttribute;
    crate::timestamp::TimestampError => |_e| Code::InvalidAttribute;
    crate::schema::TypeError => |_e| Code::InvalidAttribute;
    crate::schema::DataError => |e| match e {
        crate::schema::DataError::UnknownType => Code::UnknownType,
        crate::schema::DataError::Invalid(_) => Code::DataInvalid,
    };
    crate::ids::IdError => |_e| Code::InvalidAttribute;
    crate::jcs::JcsError => |_e| Code::MalformedJson;
    crate::blobseal::SealError => |_e| Code::ContentNotSealed;
    crate::task::UnknownState => |_e| Code::InvalidRequest;
    UnknownCode => |_e| Code::InvalidRequest;
}

/// Renders one entry as the Markdown section used in `docs/errors.md` and `/errors/AB-…`.
pub fn render_entry_markdown(entry: &Entry) -> String {
    let status = match entry.http_status {
        0 => "none (not an HTTP answer)".to_owned(),
        s => s.to_string(),
    };
    let origin = match entry.origin {
        Origin::Spec => "wire protocol v1",
        Origin::Project => "AgentBus (the spec names no code here)",
    };
    let mut out = format!(
        "## {code}: {title}\n\n- HTTP status: {status}\n- Kind: {kind}\n- Defined by: {origin}\n\n**Cause.** {cause}\n\n**Fix.** {fix}\n",
        code = entry.code,
        title = entry.title,
        kind = entry.kind.as_str(),
        cause = entry.cause,
        fix = entry.fix,
    );
    if let Some(cli) = entry.cli_fix {
        out.push_str(&format!("\n**At the command line.** {cli}\n"));
    }
    out
}

/// Renders the whole catalogue as `docs/errors.md`.
pub fn render_markdown() -> String {
    let mut out = String::from(
        "# AgentBus error codes\n\n\
         <!-- Generated from crates/agentbus-protocol/src/errors.rs by `agentbus explain --all --markdown`; a test fails when this file differs. -->\n\n\
         Every rejection carries one of these codes. The gateway answers with the JSON body \
         `{\"error\": {\"code\", \"message\", \"doc_url\", \"request_id\"}}` and serves each entry at \
         `/errors/AB-NNNN`; `agentbus explain AB-NNNN` prints it offline.\n\n\
         Each code has a kind, from which the command line's exit code and the MCP server's \
         answer derive: usage (exit 2), input (3), declined (1), configuration (4), \
         unavailable (5), refused (6), internal (70). Only refused and unavailable codes are \
         HTTP answers (4xx and 5xx).\n\n\
         | code | HTTP | kind | title |\n|---|---|---|---|\n",
    );
    for code in Code::ALL {
        let e = code.entry();
        let status = if e.http_status == 0 {
            "—".to_owned()
        } else {
            e.http_status.to_string()
        };
        out.push_str(&format!(
            "| [{code}](#{anchor}) | {status} | {kind} | {title} |\n",
            anchor = anchor(e),
            kind = e.kind.as_str(),
            title = e.title
        ));
    }
    for code in Code::ALL {
        out.push('\n');
        out.push_str(&render_entry_markdown(code.entry()));
    }
    out
}

/// The GitHub-style anchor of an entry's heading.
fn anchor(e: &Entry) -> String {
    let heading = format!("{}: {}", e.code, e.title);
    heading
        .chars()
        .filter_map(|c| match c {
            'A'..='Z' => Some(c.to_ascii_lowercase()),
            'a'..='z' | '0'..='9' | '-' | '_' => Some(c),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_unique_and_sorted() {
        let numbers: Vec<u16> = Code::ALL.iter().map(|c| c.number()).collect();
        let mut sorted = numbers.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(numbers, sorted);
    }

    #[test]
    fn every_code_the_spec_names_is_catalogued() {
        for n in [
            1011, 1012, 1303, 2001, 2002, 2004, 3004, 3005, 3006, 3040, 4001, 4002, 4003, 4008,
            4020, 4021, 4022, 4040, 5001, 5005, 6002,
        ] {
            let code: Code = n.to_string().parse().expect("catalogued");
            assert_eq!(code.entry().origin, Origin::Spec, "AB-{n}");
        }
    }

    /// Only the 9xxx family, the gateway's own state (its storage, its capacity, its shutdown),
    /// answers 5xx: nothing a request contains can.
    #[test]
    fn no_input_error_is_a_server_error() {
        for code in Code::ALL {
            let s = code.http_status();
            assert!(s < 500 || code.number() >= 9000, "{code} answers {s}");
        }
    }

    #[test]
    fn fill_replaces_only_named_placeholders() {
        let fix = fill(
            "git checkout @{upstream} -- {path}",
            &[("path", "'a b'".to_owned())],
        );
        assert_eq!(fix, "git checkout @{upstream} -- 'a b'");
    }

    #[test]
    fn parses_display_form() {
        assert_eq!("AB-1011".parse::<Code>(), Ok(Code::BadSignature));
        assert_eq!(Code::BadSignature.to_string(), "AB-1011");
        assert!("AB-9999".parse::<Code>().is_err());
    }
}
