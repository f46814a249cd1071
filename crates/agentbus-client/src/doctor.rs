//! Is an agent's connection healthy? Each check of [`diagnose`] answers ok, warn or fail, and
//! every finding that is not ok says what to do. `agentbus doctor` prints the [`Report`].

use serde::Serialize;
use serde_json::Value;

use agentbus_protocol::Code;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::keyfile::KeyFileError;

use crate::{Agent, ClientError};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// Works, but needs attention soon.
    Warn,
    /// Does not work.
    Fail,
}

impl Status {
    /// `ok`, `warn` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One finding.
#[derive(Debug, Serialize)]
pub struct Finding {
    /// What was checked.
    pub check: &'static str,
    /// ok, warn or fail.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// What to do, when not ok. `None` with a [`cause`](Self::cause): the front end words the
    /// fix of that error as it words the error's fix anywhere else.
    pub fix: Option<String>,
    /// The client error that failed the check, when one did and its fix is the error's own.
    #[serde(skip)]
    pub cause: Option<ClientError>,
}

/// Everything [`diagnose`] found.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The profile's name.
    pub profile: String,
    /// The agent's address.
    pub agent: String,
    /// Whether no check failed.
    pub ok: bool,
    /// In the order checked: gateway, protocol, version, clock, credential, key, key file or key
    /// store, sidecar.
    pub findings: Vec<Finding>,
}

fn ok(check: &'static str, detail: String) -> Finding {
    Finding {
        check,
        status: Status::Ok,
        detail,
        fix: None,
        cause: None,
    }
}

fn bad(check: &'static str, status: Status, detail: String, fix: &str) -> Finding {
    Finding {
        check,
        status,
        detail,
        fix: Some(fix.to_owned()),
        cause: None,
    }
}

/// Dotted versions compared numerically (`0.10.0` > `0.9.1`).
fn version_lt(a: &str, b: &str) -> bool {
    let parse = |v: &str| {
        v.split('.')
            .map(|p| p.parse::<u64>().unwrap_or(0))
            .collect::<Vec<_>>()
    };
    parse(a) < parse(b)
}

/// An HTTP date (`Mon, 30 Nov 2026 21:19:34 GMT`) in Unix milliseconds.
fn http_date_ms(s: &str) -> Option<i64> {
    let format = time::format_description::well_known::Rfc2822;
    let t = time::OffsetDateTime::parse(&s.replace("GMT", "+0000"), &format).ok()?;
    Some((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

/// Checks `agent`'s connection at `now`: the gateway (reachable, protocol v1, this client not
/// older than its `min_sidecar_version`, the clock against its `Date`), the credential, the
/// signing key's registration and expiry, the private key where it is stored, and the sidecar.
/// A check that cannot be made is a finding, never an error.
pub async fn diagnose(agent: &Agent, now: Timestamp) -> Report {
    let p = &agent.profile;
    let mut f = Vec::new();
    // Reachability, protocol version, min_sidecar_version, clock skew: the well-known document.
    match agent.gw.well_known().await {
        Ok(a) => {
            let wk = &a.body;
            f.push(ok(
                "gateway",
                format!(
                    "reachable at {} (gateway {})",
                    p.gateway,
                    wk["gateway_version"].as_str().unwrap_or("?")
                ),
            ));
            let majors: Vec<&str> = wk["protocol_versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            f.push(if majors.contains(&"1") {
                ok(
                    "protocol",
                    format!("the gateway speaks v{}", majors.join(", v")),
                )
            } else {
                bad(
                    "protocol",
                    Status::Fail,
                    format!("the gateway speaks {majors:?}, not v1"),
                    "use an agentbus release that speaks the gateway's protocol",
                )
            });
            let min = wk["min_sidecar_version"].as_str().unwrap_or("0");
            f.push(if version_lt(crate::VERSION, min) {
                bad(
                    "version",
                    Status::Fail,
                    format!(
                        "AB-6002: this agentbus {} is older than the gateway's min_sidecar_version {min}",
                        crate::VERSION
                    ),
                    "upgrade agentbus on this machine",
                )
            } else {
                ok(
                    "version",
                    format!(
                        "agentbus {} (the gateway needs {min} or newer)",
                        crate::VERSION
                    ),
                )
            });
            match a.date.as_deref().and_then(http_date_ms) {
                Some(gw_ms) => {
                    // The Date header has one-second resolution.
                    let skew_s = (now.millis() - gw_ms) / 1000;
                    f.push(clock_finding(skew_s));
                }
                None => f.push(bad(
                    "clock",
                    Status::Warn,
                    "the gateway sent no Date header".into(),
                    "check the clock by hand against a time server",
                )),
            }
        }
        Err(e) => f.push(bad(
            "gateway",
            Status::Fail,
            e.to_string(),
            "start the gateway or fix its URL: agentbus connect --gateway <url> …",
        )),
    }
    // The credential and the key's registration and expiry.
    let card = match agent.gw.agent(&p.agent_id).await {
        Ok(card) => {
            f.push(ok("credential", format!("accepted for {}", p.address)));
            Some(card)
        }
        Err(e @ ClientError::Unreachable { .. }) => {
            f.push(bad(
                "credential",
                Status::Fail,
                e.to_string(),
                "see the gateway finding",
            ));
            None
        }
        Err(e) => {
            let fix = if e.gateway_code() == Some(Code::SidecarTooOld) {
                "upgrade agentbus on this machine"
            } else {
                "connect again with a valid token: agentbus connect …"
            };
            f.push(bad("credential", Status::Fail, e.to_string(), fix));
            None
        }
    };
    if let Some(card) = &card {
        f.push(key_finding(card, &p.key_id, now));
    }
    // The private key: a file of mode 0600, or readable in the OS keychain.
    f.push(private_key_finding(agent));
    // The sidecar: running, and how far behind.
    let inbox = agent.inbox();
    let waiting = card
        .as_ref()
        .and_then(|c| c.status.get("queue_depth").and_then(Value::as_u64));
    let behind = match waiting {
        Some(n) => format!("{n} message(s) waiting at the gateway"),
        None => "backlog unknown".to_owned(),
    };
    f.push(if inbox.is_locked() {
        let detail = format!(
            "running; last persisted sequence {}; {behind}",
            inbox.cursor()
        );
        if waiting.unwrap_or(0) > 100 {
            bad(
                "sidecar",
                Status::Warn,
                detail,
                "the sidecar is falling behind: check its log and the machine's load",
            )
        } else {
            ok("sidecar", detail)
        }
    } else {
        bad(
            "sidecar",
            Status::Warn,
            format!(
                "not running; last persisted sequence {}; {behind}",
                inbox.cursor()
            ),
            "run `agentbus sidecar` (under a service manager to keep it running)",
        )
    });
    Report {
        profile: p.name.clone(),
        agent: p.address.clone(),
        ok: !f.iter().any(|x| x.status == Status::Fail),
        findings: f,
    }
}

/// The signing key's finding: registered, not revoked, not expired, not expiring within 30 days
/// (§3.3: doctor warns 30 days ahead).
pub fn key_finding(card: &agentbus_api::Card, key_id: &str, now: Timestamp) -> Finding {
    let key = card.keys.iter().find(|k| k.id == key_id);
    let Some(k) = key else {
        return bad(
            "key",
            Status::Fail,
            format!("{key_id} is not registered"),
            "reconnect, or register a new key with the owner's token",
        );
    };
    if k.revoked_at.is_some() {
        return bad(
            "key",
            Status::Fail,
            format!("{key_id} is revoked"),
            "reconnect to register a new key",
        );
    }
    match k.expires_at.parse::<Timestamp>().ok() {
        Some(t) if t.millis() <= now.millis() => bad(
            "key",
            Status::Fail,
            format!("{key_id} expired at {t}"),
            "reconnect to register a new key",
        ),
        Some(t) if t.millis() - now.millis() < 30 * 86_400_000 => bad(
            "key",
            Status::Warn,
            format!("{key_id} expires at {t}, within 30 days"),
            "run `agentbus keys rotate`, then revoke the old key after 24 h",
        ),
        Some(t) => ok("key", format!("{key_id} is registered, expires {t}")),
        None => ok("key", format!("{key_id} is registered")),
    }
}

/// Where the private key is and whether it can be used: a key file must be mode 0600; a key in
/// the OS keychain must be readable there.
fn private_key_finding(agent: &Agent) -> Finding {
    let p = &agent.profile;
    let failed = |check, e: ClientError| Finding {
        check,
        status: Status::Fail,
        detail: e.to_string(),
        fix: None,
        cause: Some(e),
    };
    let store = match agent.profiles.key_store(p) {
        Ok(s) => s,
        Err(e) => return failed("key store", e),
    };
    let read = store.read_current(&p.agent_id);
    let Some(path) = store.key_file(&p.agent_id) else {
        return match read {
            Ok(_) => ok(
                "key store",
                format!("readable in {}", store.location(&p.agent_id)),
            ),
            Err(e) => failed("key store", e),
        };
    };
    match read {
        Ok(_) => ok("key file", format!("{} is mode 0600", path.display())),
        Err(ClientError::Key(KeyFileError::TooOpen { mode, .. })) => bad(
            "key file",
            Status::Fail,
            format!(
                "{} has mode {mode:o}; it is refused until only you can read it",
                path.display()
            ),
            &format!("chmod 600 {}", path.display()),
        ),
        Err(e) => bad(
            "key file",
            Status::Fail,
            e.to_string(),
            "reconnect to generate and register a new key",
        ),
    }
}

/// The clock's finding for a skew in seconds: the gateway refuses envelopes more than 300 s off.
pub fn clock_finding(skew_s: i64) -> Finding {
    let detail = format!("{skew_s:+} s against the gateway");
    let fix = "sync this machine's clock (NTP): the gateway refuses envelopes more than 300 s off (AB-3005)";
    match skew_s.abs() {
        0..=30 => ok("clock", detail),
        31..=300 => bad("clock", Status::Warn, detail, fix),
        _ => bad("clock", Status::Fail, detail, fix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(expires: &str, revoked: Option<&str>) -> agentbus_api::Card {
        serde_json::from_value(serde_json::json!({
            "id": "agt_A", "address": "agent://acme/backend/a", "name": "a",
            "display_name": "a", "description": "", "aliases": [], "harness": {},
            "owner": null, "visibility": "workspace", "capabilities": [],
            "pricing": {"model": "free"}, "status": {}, "tags": [],
            "created_at": "2026-11-01T00:00:00Z", "updated_at": "2026-11-01T00:00:00Z",
            "deleted": false, "suspended": false, "suspended_at": null,
            "keys": [{"id": "key_A", "public_key": "", "created_at": "2026-11-01T00:00:00Z",
                      "expires_at": expires, "revoked_at": revoked}],
        }))
        .unwrap()
    }

    #[test]
    fn wp_3_3_8_doctor_warns_30_days_before_a_key_expires() {
        let now: Timestamp = "2026-11-30T00:00:00Z".parse().unwrap();
        let status = |c: &agentbus_api::Card| key_finding(c, "key_A", now).status;
        assert_eq!(
            status(&card("2026-12-29T00:00:00Z", None)),
            Status::Warn,
            "29 days"
        );
        assert_eq!(
            status(&card("2026-12-31T00:00:00Z", None)),
            Status::Ok,
            "31 days"
        );
        assert_eq!(
            status(&card("2026-11-29T00:00:00Z", None)),
            Status::Fail,
            "expired"
        );
        let revoked = card("2027-11-30T00:00:00Z", Some("2026-11-01T00:00:00Z"));
        assert_eq!(status(&revoked), Status::Fail);
        assert_eq!(
            key_finding(&card("2027-01-01T00:00:00Z", None), "key_B", now).status,
            Status::Fail
        );
    }

    #[test]
    fn clock_skew_bounds() {
        assert_eq!(clock_finding(-30).status, Status::Ok);
        assert_eq!(clock_finding(31).status, Status::Warn);
        assert_eq!(clock_finding(-300).status, Status::Warn);
        assert_eq!(clock_finding(301).status, Status::Fail);
    }

    #[test]
    fn http_dates_and_versions() {
        assert_eq!(http_date_ms("Thu, 01 Jan 1970 00:00:10 GMT"), Some(10_000));
        assert!(version_lt("0.1.0", "0.10.0"));
        assert!(!version_lt("0.2.0", "0.1.9"));
    }
}
