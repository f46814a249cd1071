//! `agentbus search QUERY`: one query syntax (`agentbus_protocol::search`) over the gateway (what
//! this profile's agent may read, `GET /v1/search`), this machine's log (redacted text) and a git
//! share checkout. Every hit is somebody's words: printed one line at a time, escaped for the
//! terminal, the query's words marked `[like this]`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use agentbus_api::SearchResults;
use agentbus_protocol::search::{Found, Query};
use agentbus_protocol::text::for_terminal_line;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::{Clock, SystemClock};

use super::profile::Ctx;
use crate::cli::Globals;
use crate::error::{CliError, CliResult};
use crate::printer::Printer;

/// Where to search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Where {
    /// The gateway: what this profile's agent may read.
    Gateway,
    /// This machine's messages (the local log, redacted text).
    Local,
    /// A git share checkout (--share, $AGENTBUS_SHARE, else the current directory).
    Share,
    /// Each of them that is set up here: the gateway when a profile exists, the share when the
    /// checkout is one, this machine always.
    All,
}

/// Arguments of `search`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  agentbus search v2 schema --from reviewer --since 7d\n  agentbus search '\"accept timeout\"' --type task\n  agentbus search 'type:task state:failed capability:code.review' --since 2026-11-30\n  agentbus --json search deploy --in local\n\n\
The query: words (each must occur), \"quoted phrases\" (in order), and filters: from: to: (an \
address or a bare name), type: (message, task or an envelope type), conversation:, capability:, \
state:, failure: (a failure code), attachment: (words of a file name), since: until: (2026-12-01, \
an RFC 3339 time, or an age: 30m, 24h, 7d). At most 512 bytes and 16 words."
)]
pub struct SearchArgs {
    /// The query: words, "quoted phrases" and filters (see below).
    #[arg(required = true, value_name = "QUERY")]
    query: Vec<String>,
    /// Where to search.
    #[arg(long = "in", value_enum, default_value = "all", value_name = "WHERE")]
    source: Where,
    /// Only from this sender (an address, or a bare name).
    #[arg(long)]
    from: Option<String>,
    /// Only to this recipient.
    #[arg(long)]
    to: Option<String>,
    /// Only of this type: message, task, or an envelope type.
    #[arg(long = "type", value_name = "TYPE")]
    kind: Option<String>,
    /// Not before: a date, an RFC 3339 time, or an age (30m, 24h, 7d).
    #[arg(long)]
    since: Option<String>,
    /// Before: likewise.
    #[arg(long)]
    until: Option<String>,
    /// Most hits from each place (1-100).
    #[arg(long, default_value = "20")]
    limit: u32,
    /// Continue the gateway's hits after this cursor (the `next` of an earlier `--json` page).
    #[arg(long, value_name = "CURSOR")]
    cursor: Option<String>,
    /// The share checkout (default: $AGENTBUS_SHARE, else the current directory).
    #[arg(long, env = "AGENTBUS_SHARE", value_name = "PATH")]
    share: Option<PathBuf>,
}

/// The query text: the words as given, then each flag as its filter (quoted, so a value with a
/// space stays one).
fn query_text(args: &SearchArgs) -> String {
    let mut q = args.query.join(" ");
    for (name, value) in [
        ("from", &args.from),
        ("to", &args.to),
        ("type", &args.kind),
        ("since", &args.since),
        ("until", &args.until),
    ] {
        if let Some(v) = value {
            q.push_str(&format!(" {name}:\"{v}\""));
        }
    }
    q
}

/// One hit as every place reports it: `--json` prints these, the text view a block each.
fn hit_json(place: &str, h: &Found) -> Value {
    let d = &h.doc;
    json!({
        "in": place,
        "id": d.id,
        "type": d.kind,
        "from": d.from,
        "to": d.to,
        "subject": (!d.subject.is_empty()).then_some(&d.subject),
        "at": (d.at_ms > 0).then(|| Timestamp(d.at_ms).to_string()),
        "conversation": (!d.conversation.is_empty()).then_some(&d.conversation),
        "task": Value::Null,
        "snippet": {
            "text": h.snippet.text,
            "highlights": h.snippet.highlights.iter().map(|r| [r.start, r.end]).collect::<Vec<_>>(),
        },
        "score": h.score,
    })
}

fn gateway_json(r: &SearchResults) -> Vec<Value> {
    r.hits
        .iter()
        .map(|h| {
            json!({
                "in": "gateway",
                "id": h.id,
                "type": h.message_type,
                "from": h.from,
                "to": h.to,
                "subject": h.subject,
                "at": h.received_at,
                "conversation": h.conversation_id,
                "task": h.task,
                "snippet": h.snippet,
                "score": h.score,
            })
        })
        .collect()
}

/// The snippet for a terminal: the query's words in brackets, each piece escaped on its own, on
/// one line.
fn marked(snippet: &Value) -> String {
    let text = snippet["text"].as_str().unwrap_or_default();
    let mut out = String::new();
    let mut at = 0;
    for r in snippet["highlights"].as_array().into_iter().flatten() {
        let (Some(s), Some(e)) = (r[0].as_u64(), r[1].as_u64()) else {
            continue;
        };
        let (s, e) = (s as usize, e as usize);
        let (Some(before), Some(word)) = (text.get(at..s), text.get(s..e)) else {
            continue;
        };
        out.push_str(&for_terminal_line(before));
        out.push('[');
        out.push_str(&for_terminal_line(word));
        out.push(']');
        at = e;
    }
    out.push_str(&for_terminal_line(text.get(at..).unwrap_or_default()));
    out
}

fn hit_text(h: &Value) -> String {
    let s = |k: &str| for_terminal_line(h[k].as_str().unwrap_or("")).into_owned();
    let mut head = format!(
        "{:<7}  {}  {}  {}  {} -> {}",
        s("in"),
        s("id"),
        s("at"),
        s("type").trim_start_matches("agentbus."),
        s("from"),
        s("to"),
    );
    if let Some(t) = h["task"].as_object() {
        let v = |k: &str| for_terminal_line(t[k].as_str().unwrap_or("")).into_owned();
        head.push_str(&format!(
            "  task {} {} ({})",
            v("id"),
            v("state"),
            v("capability")
        ));
    }
    let mut out = head;
    if let Some(subject) = h["subject"].as_str() {
        out.push_str(&format!("\n    {}", for_terminal_line(subject)));
    }
    out.push_str(&format!("\n    {}", marked(&h["snippet"])));
    out
}

fn profiles_exist() -> bool {
    agentbus_client::profile::Profiles::open_default()
        .and_then(|p| p.names())
        .is_ok_and(|n| !n.is_empty())
}

/// `agentbus search`.
pub fn run(args: SearchArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let text = query_text(&args);
    // Checked here first: a bad query is one line and a fix, before any request.
    let query = Query::parse(&text).map_err(CliError::of)?;
    let limit = args.limit.clamp(1, 100);
    let mut hits: Vec<Value> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut next = Value::Null;
    let all = args.source == Where::All;
    if matches!(args.source, Where::Gateway | Where::All) {
        let ctx = match Ctx::open(globals, printer) {
            Ok(ctx) => Some(ctx),
            // No profile on this machine: `all` searches what there is.
            Err(_) if all && !profiles_exist() => None,
            Err(e) if all => {
                warnings.push(format!("the gateway was not searched: {}", e.message));
                None
            }
            Err(e) => return Err(e),
        };
        if let Some(ctx) = ctx {
            match ctx.block(ctx.gw.search(&text, args.cursor.as_deref(), limit)) {
                Ok(r) => {
                    hits.extend(gateway_json(&r));
                    next = json!(r.next);
                }
                Err(e) if all => {
                    warnings.push(format!("the gateway was not searched: {}", e.message));
                }
                Err(e) => return Err(e),
            }
        }
    }
    if matches!(args.source, Where::Local | Where::All) {
        let store = super::local::open_store()?;
        let found =
            agentbus_local::search::search(&store, &query, limit as usize).map_err(CliError::of)?;
        hits.extend(found.iter().map(|h| hit_json("local", h)));
    }
    if matches!(args.source, Where::Share | Where::All) {
        let dir = args.share.clone().unwrap_or_else(|| PathBuf::from("."));
        match agentbus_share::Share::open(&dir) {
            Ok(share) => {
                let snap = share.snapshot().map_err(CliError::of)?;
                let now = SystemClock.now().0;
                let found = agentbus_share::search::search(&snap, &query, now, limit as usize);
                hits.extend(found.iter().map(|h| hit_json("share", h)));
            }
            Err(_) if all => {}
            Err(e) => return Err(CliError::of(e)),
        }
    }
    if printer.is_json() {
        printer.json(&json!({"hits": hits, "next": next, "warnings": warnings}))?;
        return Ok(ExitCode::SUCCESS);
    }
    for w in &warnings {
        printer.warning(w);
    }
    if hits.is_empty() {
        printer.line("no match")?;
        return Ok(ExitCode::SUCCESS);
    }
    let blocks: Vec<String> = hits.iter().map(hit_text).collect();
    printer.line(&blocks.join("\n"))?;
    if !next.is_null() {
        printer.commentary("more gateway hits: page with --json and --cursor <next>");
    }
    Ok(ExitCode::SUCCESS)
}
