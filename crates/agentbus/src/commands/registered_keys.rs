//! `agentbus keys list|rotate|revoke`: the connected agent's registered keys (§3.3).
//!
//! Rotation registers a new key and signs with it from then on; the old key stays registered and
//! active, so envelopes it signed still verify everywhere, and is revoked later (after the 24 h
//! replay window) with `keys revoke`. Revoked keys keep verifying history; they only stop new
//! publishes.

use std::process::ExitCode;

use serde_json::{Value, json};

use agentbus_protocol::signing::SigningKey;
use agentbus_runtime::random_bytes;

use super::profile::Ctx;
use crate::cli::Globals;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

fn keys_of(card: &agentbus_api::Card) -> Vec<Value> {
    card.keys.iter().map(|k| json!(k)).collect()
}

/// `keys list`.
pub fn list(globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    let card = ctx.block(ctx.gw.agent(&ctx.profile.agent_id))?;
    let keys: Vec<Value> = keys_of(&card)
        .into_iter()
        .map(|mut k| {
            k["current"] = json!(k["id"] == json!(ctx.profile.key_id));
            k
        })
        .collect();
    if printer.is_json() {
        printer.json(&json!({"agent": ctx.profile.address, "keys": keys}))?;
        return Ok(ExitCode::SUCCESS);
    }
    for k in &keys {
        let s = |n: &str| k[n].as_str().unwrap_or("").to_owned();
        let state = if k["revoked_at"].is_null() {
            format!("active, expires {}", s("expires_at"))
        } else {
            format!("revoked {}", s("revoked_at"))
        };
        let current = if k["current"] == json!(true) {
            "  (signing)"
        } else {
            ""
        };
        printer.line(&format!("{}  {state}{current}", s("id")))?;
    }
    Ok(ExitCode::SUCCESS)
}

const UNSAVED_FIX: &str = "the new key is registered but not saved: make the key store writable ($AGENTBUS_HOME/keys, or unlock the OS keychain), run `agentbus keys rotate` again, and revoke the unsaved key (agentbus keys list)";

/// `keys rotate`.
pub fn rotate(globals: &Globals, printer: &Printer) -> CliResult {
    let mut ctx = Ctx::open(globals, printer)?;
    let old_id = ctx.profile.key_id.clone();
    let agent_id = ctx.profile.agent_id.clone();
    let store = ctx.key_store()?;
    let old = store.read_current(&agent_id).map_err(CliError::of)?;
    let new = SigningKey::from_seed(random_bytes());
    let registered = ctx.block(ctx.gw.add_key(&agent_id, &new.public().to_base64url()))?;
    let new_id = registered.id;
    // Keep the old private key beside the new one until it is revoked, then replace the current
    // key in one step: the new key is saved completely before the profile points at it.
    let unsaved = |e| CliError::new(ErrorKind::Config, CliError::of(e).message).fix(UNSAVED_FIX);
    store
        .keep_retired(&agent_id, &old_id, &old)
        .map_err(unsaved)?;
    store.replace_current(&agent_id, &new).map_err(unsaved)?;
    ctx.profile.key_id = new_id.clone();
    ctx.profiles.save(&ctx.profile).map_err(CliError::of)?;
    printer.either(
        &json!({
            "agent": ctx.profile.address,
            "key_id": new_id,
            "previous_key_id": old_id,
            "key_storage": store.kind().as_str(),
            "key_file": store.key_file(&agent_id),
        }),
        &format!(
            "now signing with {new_id}; {old_id} stays active so messages in flight still verify.\n\
             after 24 h (the replay window), run: agentbus keys revoke {old_id}"
        ),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `keys revoke <key_id>`.
pub fn revoke(key_id: &str, force: bool, globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    if key_id == ctx.profile.key_id && !force {
        return Err(CliError::new(
            ErrorKind::Usage,
            format!("{key_id} is the key this agent signs with"),
        )
        .fix("run `agentbus keys rotate` first, or pass --force to stop this agent publishing"));
    }
    let v = ctx.block(ctx.gw.revoke_key(&ctx.profile.agent_id, key_id))?;
    // The private half of a revoked key can sign nothing the gateway accepts: drop it (at worst
    // it stays behind, useless).
    if let Ok(store) = ctx.key_store() {
        let _ = store.delete_retired(&ctx.profile.agent_id, key_id);
    }
    printer.either(
        &json!(v),
        &format!("revoked {key_id}; envelopes it signed before still verify"),
    )?;
    Ok(ExitCode::SUCCESS)
}
