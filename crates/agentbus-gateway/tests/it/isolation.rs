//! The tenant isolation suite, generated from the route table.
//!
//! A world holds a victim in workspace `backend` of tenant `default` (two private agents, a
//! conversation, a task, a blob, a topic, a policy, a leased delivery) and ten attackers: four of
//! another tenant (its tenant admin, a workspace admin, a member, an agent), three of another
//! workspace of the victim's tenant (admin, member, agent), two non-parties of the victim's own
//! workspace (a member who owns nothing of it, an agent, which also publishes to the victim's
//! topic, where the victim's private agent is a subscriber), and the gateway operator. For every
//! route of `agentbus_gateway::ROUTES` (and of the OpenAPI document) each attacker tries the
//! route's probes. A probe that names an object is sent twice: at the victim's object and at one
//! that does not exist. The attempt succeeded if the two answers differ (status, code, or the
//! message with ids and addresses blanked), if the answer holds victim data the request did not
//! carry, or if a refused request changed anything stored. At the end the victim's objects must be
//! exactly as they were. The figure printed: attempts made, attempts that succeeded (must be 0).

use std::fmt::Write as _;

use serde_json::{Value, json};

use agentbus_protocol::ids::IdKind;
use agentbus_runtime::mint;
use agentbus_store::{ConversationViewer, Store as _};

use crate::support::*;

/// What kind of attacker, for the figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    CrossTenant,
    CrossWorkspace,
    NonParty,
    WrongRole,
}

struct Attacker {
    label: &'static str,
    category: Category,
    token: String,
    /// The attacker's agent and a peer of its own to write to, when it is an agent.
    agent: Option<(Agent, Agent)>,
    /// Whether its home workspace is the victim's (what it may do there is not an attack).
    in_victim_workspace: bool,
    /// A message it published to the victim's topic, where the victim's private agent is a
    /// subscriber (an agent of the victim's workspace only): its delivery states are the
    /// attacker's to read, the private subscriber in them is not.
    topic_publish: Option<String>,
}

/// The victim's objects, and for each a namesake that does not exist.
struct Victim {
    agent: Agent,
    peer: Agent,
    tenant_id: String,
    workspace_id: String,
    task_id: String,
    request: serde_json::Map<String, Value>,
    /// The id of the victim's message in its conversation.
    message_id: String,
    conversation_id: String,
    blob: Value,
    topic: &'static str,
    delivery: (u64, String),
    /// The message of that delivery (sent by the victim's agent to its peer).
    delivered_id: String,
    /// The member who owns the victim's agents, and the `tok_` id of its integration token.
    owner_id: String,
    owner_token_id: String,
}

struct Ghost {
    agent_id: String,
    workspace_id: String,
    task_id: String,
    request_id: String,
    conversation_id: String,
    blob_id: String,
    key_id: String,
    tenant_id: String,
    user_id: String,
    token_id: String,
}

struct World {
    h: Harness,
    victim: Victim,
    ghost: Ghost,
    attackers: Vec<Attacker>,
}

/// Which side of a probe is being built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Victim,
    Ghost,
}

enum Payload {
    None,
    Json(Value),
    Raw(Vec<u8>),
}

struct Req {
    method: reqwest::Method,
    path: String,
    body: Payload,
}

fn req(method: reqwest::Method, path: impl Into<String>, body: Payload) -> Req {
    Req {
        method,
        path: path.into(),
        body,
    }
}

type Build = Box<dyn Fn(&World, &Attacker, Side) -> Option<Req>>;

/// One thing an attacker tries on a route.
enum Probe {
    /// Aimed at an object: sent at the victim's and at a missing one, which must answer alike.
    Compare(&'static str, Build),
    /// Aimed at nothing of the victim's (a listing, a creation in the caller's own scope, a public
    /// document): must reveal nothing of the victim and, when refused, store nothing.
    Alone(&'static str, Build),
}

const VICTIM_MARK: &str = "VICTIM-SECRET";

fn get(path: impl Into<String>) -> Option<Req> {
    Some(req(reqwest::Method::GET, path, Payload::None))
}

fn post(path: impl Into<String>, body: Value) -> Option<Req> {
    Some(req(reqwest::Method::POST, path, Payload::Json(body)))
}

/// The envelope an attacker publishes (its own agent signs it), or any body for a user, whose
/// credential is refused before the body is read.
fn envelope(
    a: &Attacker,
    shape: impl Fn(&Agent, &Agent) -> Option<serde_json::Map<String, Value>>,
) -> Option<Req> {
    let body = match &a.agent {
        Some((me, peer)) => Value::Object(sign(me, shape(me, peer)?)),
        None => json!({"type": "agentbus.message.v1", "data": {"text": "x"}}),
    };
    post("/v1/messages", body)
}

fn pick<'a>(side: Side, victim: &'a str, ghost: &'a str) -> &'a str {
    match side {
        Side::Victim => victim,
        Side::Ghost => ghost,
    }
}

/// The probes of a route, or `None` for a route this suite does not know yet.
fn cases(method: &str, path: &str) -> Option<Vec<Probe>> {
    use Probe::{Alone, Compare};
    use reqwest::Method as M;
    let agent_path = |suffix: &'static str| -> Build {
        Box::new(move |w, _, side| {
            let id = pick(side, &w.victim.agent.id, &w.ghost.agent_id);
            Some(req(
                if suffix.is_empty() { M::GET } else { M::POST },
                format!("/v1/agents/{id}{suffix}"),
                if suffix.is_empty() {
                    Payload::None
                } else {
                    Payload::Json(json!({}))
                },
            ))
        })
    };
    let blob_path = |method: M, suffix: &'static str| -> Build {
        Box::new(move |w, _, side| {
            let id = pick(
                side,
                w.victim.blob["id"].as_str().unwrap(),
                &w.ghost.blob_id,
            );
            let body = if method == M::PUT {
                Payload::Raw(b"overwritten".to_vec())
            } else {
                Payload::None
            };
            Some(req(method.clone(), format!("/v1/blobs/{id}{suffix}"), body))
        })
    };
    let probes = match (method, path) {
        ("get", "/.well-known/agentbus.json" | "/healthz" | "/readyz" | "/v1/openapi.json") => {
            let path = path.to_owned();
            vec![Alone(
                "public document",
                Box::new(move |_, _, _| get(path.clone())),
            )]
        }
        // The operator's own view of the gateway (its series name every tenant's agents).
        ("get", "/metrics") => vec![Alone(
            "metrics",
            Box::new(|w, a, _| (a.token != w.h.operator).then(|| get("/metrics"))?),
        )],
        ("get", "/schemas/{path}") => vec![Alone(
            "schema",
            Box::new(|_, _, _| get("/schemas/gateway/policy/v1.json")),
        )],
        ("get", "/errors/{code}") => {
            vec![Alone(
                "error page",
                Box::new(|_, _, _| get("/errors/AB-4004")),
            )]
        }
        ("post", "/v1/workspaces") => vec![Alone(
            "create a workspace (own tenant only)",
            Box::new(|_, _, _| post("/v1/workspaces", json!({"slug": fresh_slug()}))),
        )],
        ("get", "/v1/workspaces") => vec![Alone(
            "list workspaces",
            Box::new(|_, _, _| get("/v1/workspaces")),
        )],
        ("put" | "get", "/v1/workspaces/{id}/policy") => {
            let m = if method == "put" { M::PUT } else { M::GET };
            vec![Compare(
                "a workspace's policy",
                Box::new(move |w, _, side| {
                    let id = pick(side, &w.victim.workspace_id, &w.ghost.workspace_id);
                    let body = if m == M::PUT {
                        Payload::Json(json!({"default": "deny"}))
                    } else {
                        Payload::None
                    };
                    Some(req(m.clone(), format!("/v1/workspaces/{id}/policy"), body))
                }),
            )]
        }
        ("post", "/v1/users") => vec![
            Compare(
                "an admin user in the victim's workspace",
                Box::new(|_, _, side| {
                    let ws = pick(side, "backend", "no-such-ws");
                    post("/v1/users", json!({"role": "admin", "workspace": ws}))
                }),
            ),
            Alone(
                "a tenant admin",
                Box::new(|_, _, _| post("/v1/users", json!({"role": "tenant_admin"}))),
            ),
        ],
        ("post", "/v1/agents") => vec![Compare(
            "an agent in the victim's workspace",
            Box::new(|_, a, side| {
                if a.in_victim_workspace {
                    return None;
                }
                let ws = pick(side, "backend", "no-such-ws");
                post("/v1/agents", json!({"name": fresh_slug(), "workspace": ws}))
            }),
        )],
        ("get", "/v1/agents") => vec![Alone(
            "the directory",
            Box::new(|_, _, _| get("/v1/agents")),
        )],
        ("get", "/v1/agents/{id}") => vec![Compare("a card", agent_path(""))],
        ("patch" | "delete", "/v1/agents/{id}") => {
            let m = if method == "patch" {
                M::PATCH
            } else {
                M::DELETE
            };
            vec![Compare(
                "change or delete a card",
                Box::new(move |w, _, side| {
                    let id = pick(side, &w.victim.agent.id, &w.ghost.agent_id);
                    let body = if m == M::PATCH {
                        Payload::Json(json!({"description": "hijacked"}))
                    } else {
                        Payload::None
                    };
                    Some(req(m.clone(), format!("/v1/agents/{id}"), body))
                }),
            )]
        }
        ("post", "/v1/agents/{id}/keys") => vec![Compare(
            "register a key",
            Box::new(|w, _, side| {
                let id = pick(side, &w.victim.agent.id, &w.ghost.agent_id);
                let key = agentbus_protocol::signing::SigningKey::from_seed(
                    agentbus_runtime::random_bytes(),
                );
                post(
                    format!("/v1/agents/{id}/keys"),
                    json!({"public_key": key.public().to_base64url()}),
                )
            }),
        )],
        ("post", "/v1/agents/{id}/keys/{key_id}/revoke") => vec![
            Compare(
                "revoke the victim's key",
                Box::new(|w, _, side| {
                    let (id, key) = match side {
                        Side::Victim => (&w.victim.agent.id, &w.victim.agent.key_id),
                        Side::Ghost => (&w.ghost.agent_id, &w.ghost.key_id),
                    };
                    post(format!("/v1/agents/{id}/keys/{key}/revoke"), json!({}))
                }),
            ),
            Compare(
                "revoke the victim's key through one's own agent",
                Box::new(|w, a, side| {
                    let (me, _) = a.agent.as_ref()?;
                    let key = pick(side, &w.victim.agent.key_id, &w.ghost.key_id);
                    post(format!("/v1/agents/{}/keys/{key}/revoke", me.id), json!({}))
                }),
            ),
        ],
        ("get", "/v1/agents/{id}/a2a" | "/v1/agents/{id}/.well-known/agent-card.json") => {
            let suffix = path.trim_start_matches("/v1/agents/{id}").to_owned();
            vec![Compare(
                "a card in its A2A form",
                Box::new(move |w, _, side| {
                    let id = pick(side, &w.victim.agent.id, &w.ghost.agent_id);
                    get(format!("/v1/agents/{id}{suffix}"))
                }),
            )]
        }
        ("post", "/v1/agents/{id}/suspend") => {
            vec![Compare("suspend an agent", agent_path("/suspend"))]
        }
        ("post", "/v1/agents/{id}/resume") => {
            vec![Compare("resume an agent", agent_path("/resume"))]
        }
        ("get", "/v1/topics") => vec![
            Alone("list topics", Box::new(|_, _, _| get("/v1/topics"))),
            Compare(
                "the victim workspace's topics",
                Box::new(|w, a, side| {
                    if a.in_victim_workspace {
                        return None;
                    }
                    let ws = pick(side, &w.victim.workspace_id, &w.ghost.workspace_id);
                    get(format!("/v1/topics?workspace={ws}"))
                }),
            ),
        ],
        ("put" | "delete", "/v1/topics/{name}/subscription") => {
            let m = if method == "put" { M::PUT } else { M::DELETE };
            vec![Compare(
                "(un)subscribe to the victim's topic",
                Box::new(move |w, _, side| {
                    let name = pick(side, w.victim.topic, "no-such-topic");
                    Some(req(
                        m.clone(),
                        format!("/v1/topics/{name}/subscription"),
                        Payload::None,
                    ))
                }),
            )]
        }
        ("post", "/v1/messages") => vec![
            Compare(
                "write to the victim across tenants (within one, §4.2 lets policy answer)",
                Box::new(|w, a, side| {
                    if a.category != Category::CrossTenant && a.agent.is_some() {
                        return None;
                    }
                    let ghost = format!("agent://default/backend/{}", fresh_slug());
                    let to = pick(side, &w.victim.agent.address, &ghost).to_owned();
                    envelope(a, |me, _| Some(message(&w.h, me, &to, "probe")))
                }),
            ),
            Compare(
                "write to the victim's agt_ id across tenants",
                Box::new(|w, a, side| {
                    if a.category != Category::CrossTenant && a.agent.is_some() {
                        return None;
                    }
                    let to = pick(side, &w.victim.agent.id, &w.ghost.agent_id).to_owned();
                    envelope(a, |me, _| Some(message(&w.h, me, &to, "probe")))
                }),
            ),
            Compare(
                "a lifecycle message on the victim's task",
                Box::new(|w, a, side| {
                    let (task, request, cnv) = match side {
                        Side::Victim => (
                            w.victim.task_id.clone(),
                            w.victim.request["id"].as_str().unwrap().to_owned(),
                            w.victim.request["conversation_id"]
                                .as_str()
                                .unwrap()
                                .to_owned(),
                        ),
                        Side::Ghost => (
                            w.ghost.task_id.clone(),
                            w.ghost.request_id.clone(),
                            w.ghost.conversation_id.clone(),
                        ),
                    };
                    envelope(a, |me, peer| {
                        let mut m = message(&w.h, me, &peer.address, "");
                        m["type"] = json!("agentbus.task.progress.v1");
                        m["schema"] = json!(
                            "https://komsary.agentbus.exchange/schemas/agentbus.task.progress/v1.json"
                        );
                        m["conversation_id"] = json!(cnv);
                        m.insert("correlation_id".into(), json!(request));
                        m["data"] = json!({"task_id": task, "note": "probe"});
                        Some(m)
                    })
                }),
            ),
            Compare(
                "attach the victim's blob under the victim's tenant slug",
                Box::new(|w, a, side| {
                    let id = pick(
                        side,
                        w.victim.blob["id"].as_str().unwrap(),
                        &w.ghost.blob_id,
                    );
                    attach(w, a, format!("blob://default/{id}"))
                }),
            ),
            Compare(
                "attach the victim's blob under one's own tenant slug",
                Box::new(|w, a, side| {
                    let id = pick(
                        side,
                        w.victim.blob["id"].as_str().unwrap(),
                        &w.ghost.blob_id,
                    );
                    let slug = if a.category == Category::CrossTenant {
                        "globex"
                    } else {
                        "default"
                    };
                    attach(w, a, format!("blob://{slug}/{id}"))
                }),
            ),
            Compare(
                "join the victim's conversation",
                Box::new(|w, a, side| {
                    let cnv =
                        pick(side, &w.victim.conversation_id, &w.ghost.conversation_id).to_owned();
                    envelope(a, |me, peer| {
                        let mut m = message(&w.h, me, &peer.address, "joining");
                        m["conversation_id"] = json!(cnv);
                        Some(m)
                    })
                }),
            ),
        ],
        ("get", "/v1/inbox") => vec![Alone(
            "one's inbox",
            Box::new(|_, _, _| get("/v1/inbox?wait=0")),
        )],
        ("get", "/v1/inbox/ws") => vec![Alone(
            "the inbox socket",
            Box::new(|_, _, _| get("/v1/inbox/ws")),
        )],
        ("post", "/v1/inbox/acks") => vec![Compare(
            "ack the victim's delivery",
            Box::new(|w, _, side| {
                let (seq, token) = match side {
                    Side::Victim => w.victim.delivery.clone(),
                    Side::Ghost => (999_999, "d999999.1.0".to_owned()),
                };
                post(
                    "/v1/inbox/acks",
                    json!({"acks": [{"sequence": seq, "delivery": token}]}),
                )
            }),
        )],
        ("post", "/v1/inbox/{sequence}/ack") => vec![Compare(
            "ack the victim's delivery by sequence",
            Box::new(|w, _, side| {
                let (seq, token) = match side {
                    Side::Victim => w.victim.delivery.clone(),
                    Side::Ghost => (999_999, "d999999.1.0".to_owned()),
                };
                post(format!("/v1/inbox/{seq}/ack"), json!({"delivery": token}))
            }),
        )],
        ("post", "/v1/inbox/receipts") => vec![
            Compare(
                "report the victim's delivery shown",
                Box::new(|w, _, side| {
                    let (seq, id) = match side {
                        Side::Victim => (w.victim.delivery.0, w.victim.delivered_id.clone()),
                        Side::Ghost => (999_999, w.ghost.request_id.clone()),
                    };
                    post(
                        "/v1/inbox/receipts",
                        json!({"receipts": [{"sequence": seq, "id": id, "shown_at": "2026-01-01T00:00:00Z", "harness": "claude", "event": "UserPromptSubmit"}]}),
                    )
                }),
            ),
            Compare(
                "report the victim's delivery pushed",
                Box::new(|w, _, side| {
                    let (seq, id) = match side {
                        Side::Victim => (w.victim.delivery.0, w.victim.delivered_id.clone()),
                        Side::Ghost => (999_999, w.ghost.request_id.clone()),
                    };
                    post(
                        "/v1/inbox/receipts",
                        json!({"receipts": [{"sequence": seq, "id": id, "shown_at": "2026-01-01T00:00:00Z", "harness": "mcp", "event": "notifications/claude/channel", "state": "pushed"}]}),
                    )
                }),
            ),
        ],
        ("get", "/v1/inbox/policy") => vec![Alone(
            "one's own workspace's delivery policy",
            Box::new(|_, _, _| get("/v1/inbox/policy")),
        )],
        ("get", "/v1/messages/{id}/delivery") => vec![
            Compare(
                "read the delivery states of the victim's message",
                Box::new(|w, _, side| {
                    let id = pick(side, &w.victim.delivered_id, &w.ghost.request_id);
                    get(format!("/v1/messages/{id}/delivery"))
                }),
            ),
            Alone(
                "read who got one's own publish to a topic the victim subscribes to privately",
                Box::new(|_, a, _| {
                    get(format!(
                        "/v1/messages/{}/delivery",
                        a.topic_publish.as_ref()?
                    ))
                }),
            ),
        ],
        ("get", "/v1/conversations/{id}") => vec![Compare(
            "read the victim's conversation",
            Box::new(|w, _, side| {
                get(format!(
                    "/v1/conversations/{}",
                    pick(side, &w.victim.conversation_id, &w.ghost.conversation_id)
                ))
            }),
        )],
        ("get", "/v1/tasks") => vec![Alone(
            "list the victim's tasks",
            Box::new(|w, _, _| get(format!("/v1/tasks?requester={}", w.victim.agent.id))),
        )],
        ("get", "/v1/tasks/{id}") => vec![Compare(
            "read the victim's task",
            Box::new(|w, _, side| {
                get(format!(
                    "/v1/tasks/{}",
                    pick(side, &w.victim.task_id, &w.ghost.task_id)
                ))
            }),
        )],
        ("post", "/v1/tasks/{id}/cancel") => vec![Compare(
            "cancel the victim's task",
            Box::new(|w, _, side| {
                post(
                    format!(
                        "/v1/tasks/{}/cancel",
                        pick(side, &w.victim.task_id, &w.ghost.task_id)
                    ),
                    json!({}),
                )
            }),
        )],
        ("post", "/v1/blobs") => vec![Alone(
            "register a blob (one's own)",
            Box::new(|_, _, _| {
                post(
                    "/v1/blobs",
                    json!({"name": "a.txt", "size": 1, "sha256": "0".repeat(64)}),
                )
            }),
        )],
        ("get", "/v1/blobs/{id}") => vec![Compare("the victim's blob", blob_path(M::GET, ""))],
        ("get", "/v1/blobs/{id}/content") => vec![Compare(
            "the victim's blob content",
            blob_path(M::GET, "/content"),
        )],
        ("put", "/v1/blobs/{id}/content") => vec![Compare(
            "overwrite the victim's blob",
            blob_path(M::PUT, "/content"),
        )],
        ("post", "/v1/blobs/{id}/complete") => vec![Compare(
            "complete the victim's blob",
            blob_path(M::POST, "/complete"),
        )],
        ("post", "/v1/tenants") => vec![Alone(
            "create a tenant",
            Box::new(|w, a, _| {
                (a.token != w.h.operator)
                    .then(|| post("/v1/tenants", json!({"slug": fresh_slug()})))?
            }),
        )],
        ("get", "/v1/tenants") => vec![Alone(
            "list tenants",
            Box::new(|w, a, _| (a.token != w.h.operator).then(|| get("/v1/tenants"))?),
        )],
        ("post", "/v1/tenants/{id}/suspend" | "/v1/tenants/{id}/resume") => {
            let verb = path.rsplit('/').next().unwrap_or_default().to_owned();
            vec![Compare(
                "suspend or resume the victim's tenant",
                Box::new(move |w, a, side| {
                    if a.token == w.h.operator {
                        return None;
                    }
                    post(
                        format!(
                            "/v1/tenants/{}/{verb}",
                            pick(side, &w.victim.tenant_id, &w.ghost.tenant_id)
                        ),
                        json!({}),
                    )
                }),
            )]
        }
        ("get", "/v1/conversations") => vec![Alone(
            "list conversations",
            Box::new(|_, _, _| get("/v1/conversations?limit=200")),
        )],
        // Lists the caller's own sent messages only: no parameter names another agent, and the
        // victim's messages (their ids, marks) must not appear whatever cursor is given.
        ("get", "/v1/messages/sent") => vec![
            Alone(
                "list sent messages",
                Box::new(|_, _, _| get("/v1/messages/sent?limit=100")),
            ),
            Alone(
                "list sent messages from a forged cursor",
                Box::new(|_, _, _| get(format!("/v1/messages/sent?limit=100&before={}", i64::MAX))),
            ),
        ],
        // People: the operator administers every user, so it is no attacker here.
        ("get", "/v1/users") => vec![Alone(
            "list users",
            Box::new(|w, a, _| (a.token != w.h.operator).then(|| get("/v1/users"))?),
        )],
        ("delete", "/v1/users/{id}") => vec![Compare(
            "remove the victim's owner",
            Box::new(|w, a, side| {
                if a.token == w.h.operator {
                    return None;
                }
                let id = pick(side, &w.victim.owner_id, &w.ghost.user_id);
                Some(req(M::DELETE, format!("/v1/users/{id}"), Payload::None))
            }),
        )],
        ("post", "/v1/tokens") => vec![
            Compare(
                "a token for the victim's owner",
                Box::new(|w, a, side| {
                    if a.token == w.h.operator {
                        return None;
                    }
                    let id = pick(side, &w.victim.owner_id, &w.ghost.user_id);
                    post("/v1/tokens", json!({"user": id}))
                }),
            ),
            Alone(
                "a token of one's own",
                Box::new(|_, _, _| post("/v1/tokens", json!({"label": "probe"}))),
            ),
        ],
        ("get", "/v1/tokens") => vec![Alone(
            "list tokens",
            Box::new(|w, a, _| (a.token != w.h.operator).then(|| get("/v1/tokens"))?),
        )],
        ("post", "/v1/tokens/{id}/revoke") => vec![Compare(
            "revoke the victim owner's token",
            Box::new(|w, a, side| {
                if a.token == w.h.operator {
                    return None;
                }
                let id = pick(side, &w.victim.owner_token_id, &w.ghost.token_id);
                post(format!("/v1/tokens/{id}/revoke"), json!({}))
            }),
        )],
        // Search: the victim's words, subject, task and from filters find nothing of it.
        ("get", "/v1/search") => vec![
            Alone(
                "search for the victim's words",
                Box::new(|_, _, _| get("/v1/search?q=victim%20secret%20message&limit=100")),
            ),
            Alone(
                "search the victim's task by its instructions",
                Box::new(|_, _, _| get("/v1/search?q=secret%20task%20type:task&limit=100")),
            ),
            Alone(
                "search everything from the victim",
                Box::new(|w, _, _| {
                    get(format!(
                        "/v1/search?q=from:{}&limit=100",
                        w.victim.agent.address
                    ))
                }),
            ),
            Alone(
                "search from a forged cursor",
                Box::new(|_, _, _| get(format!("/v1/search?q=secret&cursor={}.1.0", i64::MAX))),
            ),
        ],
        ("get", "/v1/usage") => vec![Alone(
            "the victim agent's usage",
            Box::new(|w, _, _| get(format!("/v1/usage?agent={}", w.victim.agent.id))),
        )],
        _ => return None,
    };
    Some(probes)
}

/// A message to the attacker's own peer attaching `r` with the victim blob's size and hash.
fn attach(w: &World, a: &Attacker, r: String) -> Option<Req> {
    envelope(a, |me, peer| {
        let mut m = message(&w.h, me, &peer.address, "see attached");
        m["data"]["attachments"] = json!([{
            "ref": r, "name": "x.txt", "size": w.victim.blob["size"], "sha256": w.victim.blob["sha256"]
        }]);
        Some(m)
    })
}

fn fresh_slug() -> String {
    format!(
        "probe-{}",
        mint(IdKind::Message).to_string()[20..].to_ascii_lowercase()
    )
}

/// What an answer is compared on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    status: u16,
    code: String,
    message: String,
    body: String,
}

/// Blanks ids (`xyz_` + 26 Crockford characters) and addresses, so two answers about two different
/// objects compare equal when they say the same thing.
fn blank(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if let Some(scheme) = ["agent://", "topic://", "blob://"]
            .iter()
            .find(|s| rest.starts_with(**s))
        {
            let end = rest[scheme.len()..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || "-_./".contains(c)))
                .map_or(rest.len(), |e| e + scheme.len());
            out.push_str("{ADDR}");
            i += end;
            continue;
        }
        if let Some(u) = rest.find('_').filter(|u| *u <= 4 && *u >= 2)
            && rest[..u].bytes().all(|c| c.is_ascii_lowercase())
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric())
            && rest.len() >= u + 27
            && rest[u + 1..u + 27]
                .bytes()
                .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
        {
            out.push_str("{ID}");
            i += u + 27;
            continue;
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

async fn send(h: &Harness, token: &str, r: &Req) -> Answer {
    let mut b = h
        .http
        .request(r.method.clone(), format!("{}{}", h.url, r.path));
    if !token.is_empty() {
        b = b.bearer_auth(token);
    }
    b = match &r.body {
        Payload::None => b,
        Payload::Json(v) => b.json(v),
        Payload::Raw(bytes) => b.body(bytes.clone()),
    };
    let resp = b.send().await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.text().await.unwrap_or_default();
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    Answer {
        status,
        code: v["error"]["code"].as_str().unwrap_or_default().to_owned(),
        message: blank(v["error"]["message"].as_str().unwrap_or_default()),
        body,
    }
}

fn request_text(r: &Req) -> String {
    match &r.body {
        Payload::Json(v) => format!("{} {v}", r.path),
        _ => r.path.clone(),
    }
}

/// Victim data in an answer that its request did not carry: the marker every victim text has, or
/// an id of the victim's objects.
fn leak(w: &World, a: &Attacker, r: &Req, answer: &Answer) -> Option<String> {
    if answer.body.to_ascii_uppercase().contains(VICTIM_MARK) {
        return Some(format!("{VICTIM_MARK} in the answer"));
    }
    let asked = request_text(r);
    let mut ids = vec![
        w.victim.agent.id.clone(),
        w.victim.peer.id.clone(),
        w.victim.agent.key_id.clone(),
        w.victim.task_id.clone(),
        w.victim.blob["id"].as_str().unwrap().to_owned(),
        w.victim.message_id.clone(),
        w.victim.request["id"].as_str().unwrap().to_owned(),
    ];
    // A list of conversations holds the attacker's own messages, some of which it sent with the
    // victim's conversation id (the join attempts of POST /v1/messages): the id is its own to see
    // there, the victim's messages (their ids, the marker) are not.
    // The same holds for the attacker's list of its own sent messages.
    if !r.path.starts_with("/v1/conversations?") && !r.path.starts_with("/v1/messages/sent?") {
        ids.push(w.victim.conversation_id.clone());
    }
    if !a.in_victim_workspace {
        ids.push(w.victim.workspace_id.clone());
    }
    if a.category == Category::CrossTenant {
        ids.push(w.victim.tenant_id.clone());
    }
    // The victim's owner and its token, where people are listed and acted on.
    if r.path.starts_with("/v1/users") || r.path.starts_with("/v1/tokens") {
        ids.push(w.victim.owner_id.clone());
        ids.push(w.victim.owner_token_id.clone());
    }
    ids.into_iter()
        .find(|id| answer.body.contains(id.as_str()) && !asked.contains(id.as_str()))
        .map(|id| format!("victim id {id} in the answer"))
}

/// Everything about the victim's objects, to compare before and after the attacks.
async fn victim_state(w: &World) -> String {
    let s = w.h.app.store();
    let v = &w.victim;
    let mut out = String::new();
    for id in [&v.agent.id, &v.peer.id] {
        let _ = writeln!(out, "{:?}", s.agent(id).await.unwrap());
        let _ = writeln!(out, "{:?}", s.keys(id).await.unwrap());
        let _ = writeln!(out, "{:?}", s.aliases(id).await.unwrap());
        let _ = writeln!(out, "pending {}", s.pending_count(id).await.unwrap());
    }
    let _ = writeln!(out, "{:?}", s.task(&v.task_id).await.unwrap());
    let _ = writeln!(out, "{:?}", s.task_events(&v.task_id).await.unwrap());
    let _ = writeln!(
        out,
        "{:?}",
        s.blob(v.blob["id"].as_str().unwrap()).await.unwrap()
    );
    let _ = writeln!(out, "{:?}", s.workspace(&v.workspace_id).await.unwrap());
    let _ = writeln!(out, "{:?}", s.user(&v.owner_id).await.unwrap());
    let owner = agentbus_store::TokenSubject::User(v.owner_id.clone());
    let tokens: Vec<_> = s
        .user_tokens(Some(&v.tenant_id))
        .await
        .unwrap()
        .into_iter()
        .filter(|t| t.subject == owner)
        .collect();
    let _ = writeln!(out, "{tokens:?}");
    let _ = writeln!(out, "{:?}", s.tenant(&v.tenant_id).await.unwrap());
    let _ = writeln!(
        out,
        "{:?}",
        s.topic(&v.workspace_id, v.topic).await.unwrap()
    );
    let cnv = s
        .conversation(
            &v.tenant_id,
            &v.conversation_id,
            &ConversationViewer::Agent(v.agent.id.clone()),
        )
        .await
        .unwrap();
    let _ = writeln!(
        out,
        "{:?}",
        cnv.map(|m| m.iter().map(|m| m.id.clone()).collect::<Vec<_>>())
    );
    out
}

async fn world() -> World {
    let h = Harness::start().await;
    for slug in ["backend", "frontend"] {
        assert_eq!(
            h.post("/v1/workspaces", &h.admin, json!({"slug": slug}))
                .await
                .0,
            201
        );
    }
    // The victim: two private agents of a member of `backend`.
    let owner = h.user(&h.admin, "member", "backend").await;
    // The owner is the only member of `backend` so far.
    let (_, users) = h.get("/v1/users", &h.admin).await;
    let owner_id = users["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["role"] == "member" && u["workspace"] == "backend")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, tokens) = h.get("/v1/tokens", &h.admin).await;
    let owner_token_id = tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["user"] == owner_id.as_str())
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let agent = h
        .register(
            &owner,
            "victim",
            json!({"visibility": "private", "display_name": "VICTIM-SECRET card"}),
        )
        .await;
    let peer = h
        .register(
            &owner,
            "victim-peer",
            json!({"visibility": "private", "description": "VICTIM-SECRET peer", "capabilities": [CODE_REVIEW.clone()]}),
        )
        .await;
    let (_, listed) = h.get("/v1/workspaces", &h.admin).await;
    let ws = |slug: &str| {
        listed["workspaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["slug"] == slug)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let workspace_id = ws("backend");
    let policy = json!({"default": "allow", "rules": [
        {"from": "*", "to": "agent://default/backend/victim*", "effect": "allow", "description": "VICTIM-SECRET policy"}
    ]});
    let (s, v) = h
        .req(
            reqwest::Method::PUT,
            &format!("/v1/workspaces/{workspace_id}/policy"),
            &h.admin,
            Some(policy),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let topic = "victim-topic";
    h.req(
        reqwest::Method::PUT,
        &format!("/v1/topics/{topic}/subscription"),
        &agent.token,
        None,
    )
    .await;
    let blob = h.upload(&agent, "victim.txt", b"VICTIM-SECRET blob").await;
    let conversation_id = mint(IdKind::Conversation).to_string();
    let mut m = message(&h, &agent, &peer.address, "VICTIM-SECRET message");
    m["conversation_id"] = json!(conversation_id);
    let message_id = m["id"].as_str().unwrap().to_owned();
    m["data"]["attachments"] = json!([{"ref": blob["ref"], "name": "victim.txt", "size": blob["size"], "sha256": blob["sha256"]}]);
    assert_eq!(h.publish(&agent, &sign(&agent, m)).await.0, 202);
    let mut r = request(&h, &agent, &peer, json!({}));
    r["data"]["instructions"] = json!("VICTIM-SECRET task");
    let r = sign(&agent, r);
    let (s, receipt, _) = h.publish(&agent, &r).await;
    assert_eq!(s, 202, "{receipt}");
    let task_id = receipt["task_id"].as_str().unwrap().to_owned();
    let accept = followup(&h, &peer, &agent, &r, &task_id, "accept", json!({}));
    assert_eq!(h.publish(&peer, &accept).await.0, 202);
    let leased = h.poll(&peer, 0, 0).await;
    let delivery = (
        leased[0]["sequence"].as_u64().unwrap(),
        leased[0]["delivery"].as_str().unwrap().to_owned(),
    );
    let delivered_id = leased[0]["envelope"]["id"].as_str().unwrap().to_owned();
    let tenant_id = {
        let (_, t) = h.get("/v1/tenants", &h.operator).await;
        t["tenants"][0]["id"].as_str().unwrap().to_owned()
    };
    // Attackers.
    let mut attackers = Vec::new();
    let globex = h.tenant("globex").await;
    let globex_admin = globex["admin"]["token"].as_str().unwrap().to_owned();
    h.post("/v1/workspaces", &globex_admin, json!({"slug": "sales"}))
        .await;
    let g_admin = h.user(&globex_admin, "admin", "sales").await;
    let g_member = h.user(&globex_admin, "member", "sales").await;
    let g_agent = h.register(&g_member, "spy", json!({})).await;
    let g_peer = h.register(&g_member, "spy-peer", json!({})).await;
    let fe_admin = h.user(&h.admin, "admin", "frontend").await;
    let fe_member = h.user(&h.admin, "member", "frontend").await;
    let fe_agent = h.register(&fe_member, "fe-spy", json!({})).await;
    let fe_peer = h.register(&fe_member, "fe-spy-peer", json!({})).await;
    let be_member = h.user(&h.admin, "member", "backend").await;
    let be_agent = h.register(&be_member, "insider", json!({})).await;
    let be_peer = h.register(&be_member, "insider-peer", json!({})).await;
    let mut add = |label, category, token: String, agent: Option<(Agent, Agent)>, inside| {
        attackers.push(Attacker {
            label,
            category,
            token,
            agent,
            in_victim_workspace: inside,
            topic_publish: None,
        });
    };
    use Category::*;
    add(
        "another tenant's tenant admin",
        CrossTenant,
        globex_admin.clone(),
        None,
        false,
    );
    add(
        "another tenant's workspace admin",
        CrossTenant,
        g_admin,
        None,
        false,
    );
    add(
        "another tenant's member",
        CrossTenant,
        g_member,
        None,
        false,
    );
    add(
        "another tenant's agent",
        CrossTenant,
        g_agent.token.clone(),
        Some((g_agent, g_peer)),
        false,
    );
    add(
        "another workspace's admin",
        CrossWorkspace,
        fe_admin,
        None,
        false,
    );
    add(
        "another workspace's member",
        CrossWorkspace,
        fe_member,
        None,
        false,
    );
    add(
        "another workspace's agent",
        CrossWorkspace,
        fe_agent.token.clone(),
        Some((fe_agent, fe_peer)),
        false,
    );
    add(
        "a member of the workspace who owns nothing of it",
        NonParty,
        be_member,
        None,
        true,
    );
    add(
        "an agent of the workspace, no party",
        NonParty,
        be_agent.token.clone(),
        Some((be_agent, be_peer)),
        true,
    );
    add(
        "the gateway operator",
        WrongRole,
        h.operator.clone(),
        None,
        false,
    );
    for a in attackers.iter_mut().filter(|a| a.in_victim_workspace) {
        if let Some((me, _)) = &a.agent {
            let m = signed(&h, me, &format!("topic://default/backend/{topic}"), "news");
            assert_eq!(h.publish(me, &m).await.0, 202);
            a.topic_publish = m["id"].as_str().map(str::to_owned);
        }
    }
    let ghost = Ghost {
        agent_id: mint(IdKind::Agent).to_string(),
        workspace_id: mint(IdKind::Workspace).to_string(),
        task_id: mint(IdKind::Task).to_string(),
        request_id: mint(IdKind::Message).to_string(),
        conversation_id: mint(IdKind::Conversation).to_string(),
        blob_id: mint(IdKind::Blob).to_string(),
        key_id: mint(IdKind::Key).to_string(),
        tenant_id: mint(IdKind::Tenant).to_string(),
        user_id: mint(IdKind::User).to_string(),
        token_id: format!(
            "tok_{}",
            agentbus_protocol::ids::encode(mint(IdKind::Message).value())
        ),
    };
    World {
        h,
        victim: Victim {
            agent,
            peer,
            tenant_id,
            workspace_id,
            task_id,
            request: r,
            message_id,
            conversation_id,
            blob,
            topic,
            delivery,
            delivered_id,
            owner_id,
            owner_token_id,
        },
        ghost,
        attackers,
    }
}

/// At least 200 cross-tenant, cross-workspace, non-party and wrong-role attempts
/// over every route, generated from the route table; none may succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_no_attempt_across_a_trust_boundary_succeeds() {
    let w = world().await;
    // Every route the gateway serves, and every operation the OpenAPI document lists, has a case.
    let (_, doc) = w.h.get("/v1/openapi.json", "").await;
    let mut routes: Vec<(String, String)> = agentbus_gateway::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            if !routes.contains(&(method.clone(), path.clone())) {
                routes.push((method.clone(), path.clone()));
            }
        }
    }
    let missing: Vec<String> = routes
        .iter()
        .filter(|(m, p)| cases(m, p).is_none())
        .map(|(m, p)| format!("{} {p}", m.to_uppercase()))
        .collect();
    assert!(
        missing.is_empty(),
        "routes with no isolation case: {missing:?}. Add an arm to `cases()` in \
         crates/agentbus-gateway/tests/it/isolation.rs for each: a `Compare` probe for every object \
         the route names (built once at the victim's object and once at a missing one), or an \
         `Alone` probe when it names none, saying whose object it touches."
    );
    let before = victim_state(&w).await;
    let mut attempts = 0;
    let mut by_category = std::collections::BTreeMap::<String, usize>::new();
    let mut succeeded: Vec<String> = Vec::new();
    for (method, path) in &routes {
        for probe in cases(method, path).unwrap() {
            for a in &w.attackers {
                let (name, build, compare) = match &probe {
                    Probe::Compare(n, b) => (n, b, true),
                    Probe::Alone(n, b) => (n, b, false),
                };
                let Some(victim_req) = build(&w, a, Side::Victim) else {
                    continue;
                };
                let what = format!("{} {path} ({name}) by {}", method.to_uppercase(), a.label);
                attempts += 1;
                *by_category.entry(format!("{:?}", a.category)).or_default() += 1;
                let stored = w.h.app.store().dump().await.unwrap();
                let answer = send(&w.h, &a.token, &victim_req).await;
                let refused = !(200..300).contains(&answer.status);
                if refused && w.h.app.store().dump().await.unwrap() != stored {
                    succeeded.push(format!(
                        "{what}: refused with {} but changed what is stored",
                        answer.code
                    ));
                }
                if answer.status >= 500 {
                    succeeded.push(format!("{what}: answered {}", answer.status));
                }
                if let Some(l) = leak(&w, a, &victim_req, &answer) {
                    succeeded.push(format!("{what}: {l}"));
                }
                if !compare {
                    continue;
                }
                let ghost_req = build(&w, a, Side::Ghost).unwrap();
                let stored = w.h.app.store().dump().await.unwrap();
                let control = send(&w.h, &a.token, &ghost_req).await;
                if !(200..300).contains(&control.status)
                    && w.h.app.store().dump().await.unwrap() != stored
                {
                    succeeded.push(format!(
                        "{what}: the missing object's refusal changed what is stored"
                    ));
                }
                let same = answer.status == control.status
                    && answer.code == control.code
                    && (!refused || answer.message == control.message);
                if !same {
                    succeeded.push(format!(
                        "{what}: the victim's object answers {} {} {:?}, a missing one {} {} {:?}",
                        answer.status,
                        answer.code,
                        answer.message,
                        control.status,
                        control.code,
                        control.message
                    ));
                }
            }
        }
    }
    if victim_state(&w).await != before {
        succeeded.push("the victim's objects changed".into());
    }
    // Written to the process's stderr, not through the test harness's capture, so the figure shows
    // in every run of the test command.
    let _ = std::io::Write::write_fmt(
        &mut std::io::stderr().lock(),
        format_args!(
            "isolation suite: {attempts} attempts over {} routes ({by_category:?}), {} succeeded\n",
            routes.len(),
            succeeded.len()
        ),
    );
    assert!(attempts >= 200, "only {attempts} attempts");
    assert!(
        succeeded.is_empty(),
        "{} attempts succeeded:\n{}",
        succeeded.len(),
        succeeded.join("\n")
    );
}

/// The suite's own check: a leak or a difference is caught (so a green run means something).
#[test]
fn isolation_blanking_keeps_what_differs() {
    assert_eq!(
        blank("no task tsk_01J9ZK8A0000000000000000T9 of agent://default/backend/victim"),
        "no task {ID} of {ADDR}"
    );
    assert_ne!(blank("no such resource"), blank("not yours"));
    assert_eq!(
        blank("attachment 0: no blob blob://default/blb_01J9ZK8A0000000000000000D9"),
        "attachment 0: no blob {ADDR}"
    );
}
