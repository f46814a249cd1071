//! `agentbus users add|list|remove`: the people of a gateway, administered with an admin's or the
//! gateway operator's integration token (`POST`, `GET /v1/users`, `DELETE /v1/users/{id}`). A
//! tenant admin acts on its tenant's users, a workspace admin on its workspace's, the operator on
//! every user; the gateway decides, this module parses and prints.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;

use agentbus_api as api;
use agentbus_client::http::Gateway;
use agentbus_protocol::text::for_terminal_line;

use super::profile::runtime;
use crate::error::{CliError, CliResult};
use crate::printer::Printer;

/// The gateway and the integration token people commands act with (no agent profile: these act
/// as a person).
#[derive(Debug, Args)]
pub struct AdminConn {
    /// The gateway's URL.
    #[arg(long, env = "AGENTBUS_GATEWAY", value_name = "URL")]
    gateway: String,
    /// An admin's or the gateway operator's integration token (abu_…).
    #[arg(
        long,
        env = "AGENTBUS_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    token: String,
}

impl AdminConn {
    /// Runs `f` against the gateway as this token's holder.
    pub fn run<T, F, Fut>(&self, f: F) -> Result<T, CliError>
    where
        F: FnOnce(Gateway) -> Fut,
        Fut: std::future::Future<Output = agentbus_client::error::Result<T>>,
    {
        let gw = Gateway::new(&self.gateway, &self.token).map_err(CliError::of)?;
        runtime()?.block_on(f(gw)).map_err(CliError::of)
    }
}

/// `users …`.
#[derive(Debug, Subcommand)]
pub enum UsersArgs {
    /// Create a user of a workspace you administer, with its integration token (shown once).
    #[command(
        after_help = "Examples:\n  agentbus users add --name Ada --workspace backend\n  agentbus users add --name Grace --role admin --gateway http://127.0.0.1:7700 --token abu_…\n\n\
The new token connects the user's agents: agentbus connect --gateway URL --token abu_… --name NAME"
    )]
    Add {
        #[command(flatten)]
        conn: AdminConn,
        /// The user's name (1-100 characters).
        #[arg(long, default_value = "user")]
        name: String,
        /// member, admin (of the workspace) or tenant_admin (a tenant admin only).
        #[arg(long, default_value = "member", value_parser = ["member", "admin", "tenant_admin"])]
        role: String,
        /// The workspace's slug [default: your own].
        #[arg(long, value_name = "SLUG")]
        workspace: Option<String>,
    },
    /// The users you administer (the gateway operator: every user), oldest first.
    #[command(after_help = "Example:\n  agentbus users list")]
    List {
        #[command(flatten)]
        conn: AdminConn,
    },
    /// Remove a user: its tokens stop working at once; agents it registered stay.
    #[command(after_help = "Example:\n  agentbus users remove usr_01JD…")]
    Remove {
        #[command(flatten)]
        conn: AdminConn,
        /// The user's usr_ id (see `agentbus users list`).
        user: String,
    },
}

/// Runs `users …`.
pub fn run(args: UsersArgs, printer: &Printer) -> CliResult {
    match args {
        UsersArgs::Add {
            conn,
            name,
            role,
            workspace,
        } => {
            let new = api::NewUser {
                name: Some(name),
                role: Some(role),
                workspace,
            };
            let u = conn.run(|gw| async move { gw.create_user(&new).await })?;
            printer.either(
                &serde_json::to_value(&u).unwrap_or_default(),
                &format!(
                    "created user {} {:?} ({}, workspace {})\ntoken, shown once (stored only hashed; `agentbus tokens issue --user {}` issues another):\n  {}",
                    u.id,
                    for_terminal_line(&u.name),
                    u.role,
                    for_terminal_line(&u.workspace),
                    u.id,
                    u.token
                ),
            )?;
        }
        UsersArgs::List { conn } => {
            let users = conn.run(|gw| async move { gw.users().await })?;
            if printer.is_json() {
                printer.json(&json!({ "users": users }))?;
            } else if users.is_empty() {
                printer.line("no users")?;
            } else {
                for u in &users {
                    printer.line(&user_row(u))?;
                }
            }
        }
        UsersArgs::Remove { conn, user } => {
            let u = conn.run(|gw| async move { gw.remove_user(&user).await })?;
            printer.either(
                &serde_json::to_value(&u).unwrap_or_default(),
                &format!(
                    "removed user {} {:?} and its tokens",
                    u.id,
                    for_terminal_line(&u.name)
                ),
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One row of `users list`: id, role, where, name (a person's words last, on its row).
fn user_row(u: &api::User) -> String {
    let place = match (&u.tenant, &u.workspace) {
        (Some(t), Some(w)) => format!("{}/{}", for_terminal_line(t), for_terminal_line(w)),
        _ => "-".to_owned(),
    };
    format!(
        "{:<30} {:<12} {:<24} {}",
        u.id,
        u.role,
        place,
        for_terminal_line(&u.name)
    )
}
