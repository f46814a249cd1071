//! What can stop a worker. Problems with one task (a harness that cannot start, crashes, or
//! answers badly) never do: they end that task as `failed` with a reason.

use agentbus_client::ClientError;
use agentbus_protocol::Code;
use agentbus_protocol::errors::Catalogued;

/// A worker failure.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// Another `agentbus work` holds this agent's work lock.
    #[error("a worker already runs for {agent}")]
    AlreadyRunning {
        /// The agent's address.
        agent: String,
    },
    /// The agent's card declares no capability this worker may serve.
    #[error("{agent} serves no capability: {why}")]
    NothingToServe {
        /// The agent's address.
        agent: String,
        /// What was declared and what was asked for.
        why: String,
    },
    /// A setting is not usable.
    #[error("{0}")]
    Setting(String),
    /// The gateway or the agent's local state failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A harness could not be started.
    #[error("cannot start the harness {program}: {why}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        why: String,
    },
    /// Local files of the worker.
    #[error("{path}: {why}")]
    Io {
        /// The file or folder.
        path: String,
        /// Why.
        why: String,
    },
}

impl Catalogued for WorkError {
    fn code(&self) -> Code {
        match self {
            WorkError::AlreadyRunning { .. } => Code::WorkerRunning,
            WorkError::NothingToServe { .. } => Code::NothingToServe,
            WorkError::Setting(_) => Code::WorkerSetting,
            WorkError::Client(e) => e.code(),
            WorkError::Spawn { .. } => Code::HarnessDidNotStart,
            WorkError::Io { .. } => Code::LocalStateFailed,
        }
    }

    fn fix_values(&self) -> Vec<(&'static str, String)> {
        match self {
            WorkError::Client(e) => e.fix_values(),
            _ => Vec::new(),
        }
    }
}
