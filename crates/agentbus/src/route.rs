//! The form of an address picks its transport: [`agentbus_local::address::route`], with its
//! refusals answered from the catalogue like any library error.

pub use agentbus_local::address::Route;

use crate::error::{CliError, ErrorKind};

/// Parses any address a user gives and picks its transport.
pub fn route(address: &str) -> Result<Route, CliError> {
    agentbus_local::address::route(address).map_err(CliError::of)
}

/// The error for a transport this build does not carry yet.
pub fn unavailable(transport: &str) -> CliError {
    CliError::new(
        ErrorKind::Config,
        format!("the {transport} transport is not available in this build yet"),
    )
    .fix("send to a local address (local, all, engineer, <session>) for now")
}
