//! `agentbus tokens issue|list|revoke`: integration tokens of the users you administer
//! (`POST`, `GET /v1/tokens`, `POST /v1/tokens/{id}/revoke`). A secret is printed once, when it is
//! issued; lists show ids, never secrets.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

use agentbus_api as api;
use agentbus_protocol::text::for_terminal_line;

use super::users::AdminConn;
use crate::error::CliResult;
use crate::printer::Printer;

/// `tokens …`.
#[derive(Debug, Subcommand)]
pub enum TokensArgs {
    /// Issue an integration token (shown once) for yourself or a user you administer; the user's
    /// other tokens keep working.
    #[command(
        after_help = "Examples:\n  agentbus tokens issue --label laptop\n  agentbus tokens issue --user usr_01JD… --label ci"
    )]
    Issue {
        #[command(flatten)]
        conn: AdminConn,
        /// The user's usr_ id [default: yourself].
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// What the token is for (1-100 characters), shown by `tokens list`.
        #[arg(long)]
        label: Option<String>,
    },
    /// The tokens of the users you administer, revoked ones included; never a secret.
    #[command(after_help = "Example:\n  agentbus tokens list")]
    List {
        #[command(flatten)]
        conn: AdminConn,
    },
    /// Revoke a token: refused from now on, on every replica.
    #[command(after_help = "Example:\n  agentbus tokens revoke tok_01JD…")]
    Revoke {
        #[command(flatten)]
        conn: AdminConn,
        /// The token's tok_ id (see `agentbus tokens list`).
        #[arg(value_name = "TOKEN_ID")]
        id: String,
    },
}

/// Runs `tokens …`.
pub fn run(args: TokensArgs, printer: &Printer) -> CliResult {
    match args {
        TokensArgs::Issue { conn, user, label } => {
            let new = api::NewToken { user, label };
            let t = conn.run(|gw| async move { gw.issue_token(&new).await })?;
            printer.either(
                &serde_json::to_value(&t).unwrap_or_default(),
                &format!(
                    "issued token {} for {} {:?}{}\ntoken, shown once (stored only hashed):\n  {}",
                    t.info.id,
                    t.info.user,
                    for_terminal_line(&t.info.user_name),
                    label_text(&t.info),
                    t.token
                ),
            )?;
        }
        TokensArgs::List { conn } => {
            let tokens = conn.run(|gw| async move { gw.tokens().await })?;
            if printer.is_json() {
                printer.json(&json!({ "tokens": tokens }))?;
            } else if tokens.is_empty() {
                printer.line("no tokens")?;
            } else {
                for t in &tokens {
                    printer.line(&token_row(t))?;
                }
            }
        }
        TokensArgs::Revoke { conn, id } => {
            let t = conn.run(|gw| async move { gw.revoke_token(&id).await })?;
            printer.either(
                &serde_json::to_value(&t).unwrap_or_default(),
                &format!(
                    "revoked token {} of {} {:?}{}",
                    t.id,
                    t.user,
                    for_terminal_line(&t.user_name),
                    label_text(&t)
                ),
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn label_text(t: &api::TokenInfo) -> String {
    t.label
        .as_deref()
        .map(|l| format!(" (label {:?})", for_terminal_line(l)))
        .unwrap_or_default()
}

/// One row of `tokens list`: id, state, created, user, label.
fn token_row(t: &api::TokenInfo) -> String {
    let state = match &t.revoked_at {
        Some(at) => format!("revoked {at}"),
        None => "live".to_owned(),
    };
    format!(
        "{:<30} {:<32} {:<24} {} {:?}{}",
        t.id,
        state,
        t.created_at,
        t.user,
        for_terminal_line(&t.user_name),
        label_text(t)
    )
}
