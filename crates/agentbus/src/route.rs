//! The form of an address picks its transport: [`agentbus_local::address::route`], with its
//! refusals as the command line shows them (one cause, one fix).

pub use agentbus_local::address::Route;
use agentbus_local::address::RouteError;

use crate::error::{CliError, ErrorKind};

/// Parses any address a user gives and picks its transport.
pub fn route(address: &str) -> Result<Route, CliError> {
    agentbus_local::address::route(address).map_err(|e| match e {
        RouteError::BadShare(_) => CliError::new(ErrorKind::Usage, e.to_string())
            .fix("write share:<operator>/<agent>, or share:<operator>/any"),
        RouteError::Empty => CliError::new(ErrorKind::Usage, e.to_string()).fix(
            "name a recipient: local, all, engineer, <session>, agent://…, share:<operator>/<agent>",
        ),
    })
}

/// The error for a transport this build does not carry yet.
pub fn unavailable(transport: &str) -> CliError {
    CliError::new(
        ErrorKind::Config,
        format!("the {transport} transport is not available in this build yet"),
    )
    .fix("send to a local address (local, all, engineer, <session>) for now")
}
