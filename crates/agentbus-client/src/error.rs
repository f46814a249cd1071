//! What can go wrong talking to a gateway or keeping an agent's local state.

use std::path::PathBuf;

use agentbus_protocol::Code;
use agentbus_protocol::errors::Catalogued;
use agentbus_runtime::keyfile::KeyFileError;

use crate::http::CONNECTION_REFUSED;
use crate::keystore::{KEYSTORE_ENV, SERVICE};

/// A failure of the client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The gateway could not be reached (connection refused, DNS, TLS, timeout).
    #[error("{}", unreachable(url, detail))]
    Unreachable {
        /// The URL called.
        url: String,
        /// What the HTTP stack said.
        detail: String,
    },
    /// The gateway refused the request with its one error shape.
    #[error("{code_str}: {message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The catalogue code, when this build knows it.
        code: Option<Code>,
        /// The code as the gateway wrote it.
        code_str: String,
        /// The gateway's message.
        message: String,
    },
    /// The gateway answered, but not with what the API promises.
    #[error("the gateway answered unexpectedly: {0}")]
    Protocol(String),
    /// No profile of that name (or, with an empty name, none at all).
    #[error("{}", no_profile(.0))]
    NoProfile(String),
    /// Several profiles and no choice made.
    #[error("several profiles are saved ({0}) and none was chosen")]
    AmbiguousProfile(String),
    /// No state directory can be found.
    #[error("no home directory for agentbus state")]
    NoHome,
    /// Reading or writing local state failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The private key file cannot be used.
    #[error(transparent)]
    Key(#[from] KeyFileError),
    /// `AGENTBUS_KEYSTORE=keychain` and the OS keychain cannot be used.
    #[error("{KEYSTORE_ENV}=keychain, but the OS keychain cannot be used: {0}")]
    KeychainUnavailable(String),
    /// The OS keychain failed to open, read, write or delete an entry.
    #[error("{0}")]
    Keychain(String),
    /// The keychain entry of a key is missing or does not hold a key.
    #[error("{0}")]
    KeychainKey(String),
    /// Saving a new key would replace a key already in the keychain.
    #[error(
        "the OS keychain entry {SERVICE}/{0} already exists; refusing to overwrite a private key"
    )]
    KeychainKeyExists(String),
    /// An argument or input cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// A destination is not an address (§4.1); found before any request.
    #[error("{0}")]
    Address(String),
    /// A gateway URL that no request can be made to; found before any request.
    #[error("{url:?} is not a gateway URL: {why}")]
    GatewayUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// Handing a message to local delivery failed.
    #[error("local delivery refused the message: {0}")]
    Import(String),
    /// A file to attach cannot be read.
    #[error("cannot attach {}: {why}", path.display())]
    Attachment {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// No message of that id was received (or sent) by this agent.
    #[error("no message {id} has been received by {agent}")]
    UnknownMessage {
        /// The id asked for.
        id: String,
        /// The agent's address.
        agent: String,
    },
    /// An id of another kind than the verb takes (a task's `tsk_` where a message is needed, a
    /// local-only `lm_` message where a gateway one is): which it needs, and how to go on.
    #[error("{id} is {what}: {needs}")]
    WrongId {
        /// The id given.
        id: String,
        /// What that id names.
        what: String,
        /// What the verb takes instead, and the command that acts on the id given.
        needs: String,
    },
    /// No task of this agent has that request id.
    #[error("no task of {agent} has request {id}")]
    UnknownTask {
        /// The id asked for.
        id: String,
        /// The agent's address.
        agent: String,
    },
}

impl Catalogued for ClientError {
    fn code(&self) -> Code {
        match self {
            ClientError::Unreachable { detail, .. } if detail == CONNECTION_REFUSED => {
                Code::NoGatewayListening
            }
            ClientError::Unreachable { .. } => Code::GatewayUnreachable,
            // The gateway's own code; one this build does not know is kept in the message.
            ClientError::Api { code, .. } => code.unwrap_or(Code::UnknownGatewayCode),
            ClientError::Protocol(_) => Code::NotAGateway,
            ClientError::NoProfile(name) if name.is_empty() => Code::NoAgentConnected,
            ClientError::NoProfile(_) => Code::NoSuchProfile,
            ClientError::AmbiguousProfile(_) => Code::ProfileNotChosen,
            ClientError::NoHome => Code::NoStateHome,
            ClientError::Io { .. } => Code::LocalStateFailed,
            ClientError::Key(e) => e.code(),
            ClientError::KeychainUnavailable(_) => Code::KeychainUnavailable,
            ClientError::Keychain(_) => Code::KeychainFailed,
            ClientError::KeychainKey(_) => Code::KeychainKeyMissing,
            ClientError::KeychainKeyExists(_) => Code::KeychainKeyExists,
            ClientError::Invalid(_) => Code::ValueInvalid,
            ClientError::Address(_) => Code::NotAnAddress,
            ClientError::GatewayUrl { .. } => Code::NotAGatewayUrl,
            ClientError::Import(_) => Code::ImportFailed,
            ClientError::Attachment { .. } => Code::AttachmentUnreadable,
            ClientError::UnknownMessage { .. } => Code::NothingHeldHere,
            ClientError::WrongId { .. } => Code::WrongIdKind,
            ClientError::UnknownTask { .. } => Code::UnknownTaskRequest,
        }
    }
}

impl ClientError {
    /// The catalogue code the gateway refused with, if it refused and this build knows its code.
    pub fn gateway_code(&self) -> Option<Code> {
        match self {
            ClientError::Api { code, .. } => *code,
            _ => None,
        }
    }
}

/// A refused connection says that nothing listens there, the likeliest mistake; other failures
/// give the HTTP stack's words.
fn unreachable(url: &str, detail: &str) -> String {
    if detail == CONNECTION_REFUSED {
        format!("connection refused at {url}: no gateway is listening there")
    } else {
        format!("cannot reach the gateway at {url}: {detail}")
    }
}

fn no_profile(name: &str) -> String {
    if name.is_empty() {
        "no agent is connected on this machine".to_owned()
    } else {
        format!("no profile {name:?} is saved here")
    }
}

/// An IO error with the path it concerns.
pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ClientError {
    let path = path.into();
    move |source| ClientError::Io { path, source }
}

/// The result of a client call.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;
