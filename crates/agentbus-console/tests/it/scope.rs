//! Cross-scope refusal over every console page, generated from
//! `agentbus_console::ROUTES` and the probes of `tests/data/routes.txt`: users of another tenant,
//! another workspace of the victim's tenant, members (of the victim's workspace and another) and
//! the gateway operator sign in and try every page at the victim's objects and at missing ones.
//! An attempt succeeded if the two answers differ (status or page, ids aside), if a page shows any
//! of the victim's text, or if a refused change stored anything. A route without a probe fails.

use reqwest::Method;

use crate::fixture::{Fixture, Ghost, MARK};
use crate::support::*;

struct Probe {
    method: String,
    path: String,
    kind: String,
}

fn probes() -> Vec<Probe> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/routes.txt"
    ))
    .unwrap();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(parts.len(), 3, "routes.txt: {l}");
            Probe {
                method: parts[0].into(),
                path: parts[1].into(),
                kind: parts[2].into(),
            }
        })
        .collect()
}

/// Whether a concrete path (query aside) is one the route pattern serves.
fn serves(pattern: &str, path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    let (p, q): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), path.split('/').collect());
    if let Some(last) = p.last()
        && last.starts_with("{*")
    {
        return q.len() >= p.len()
            && p[..p.len() - 1]
                .iter()
                .zip(&q)
                .all(|(a, b)| a.starts_with('{') || a == b);
    }
    p.len() == q.len() && p.iter().zip(&q).all(|(a, b)| a.starts_with('{') || a == b)
}

fn fill(path: &str, f: &Fixture, g: Option<&Ghost>) -> String {
    let pick = |victim: &str, ghost: &str| match g {
        Some(_) => ghost.to_owned(),
        None => victim.to_owned(),
    };
    let g0 = Ghost::new();
    let g = g.unwrap_or(&g0);
    path.replace("{agent}", &pick(&f.requester.id, &g.agent))
        .replace("{conversation}", &pick(&f.conversation, &g.conversation))
        .replace("{task}", &pick(&f.task, &g.task))
        .replace("{blob}", &pick(&f.blob, &g.blob))
        .replace("{workspace}", &pick(&f.workspace, &g.workspace))
        .replace("{tenant}", &pick(&f.tenant, &g.tenant))
}

/// A page with the ids of both sides written alike.
fn normal(body: &str, f: &Fixture, g: &Ghost) -> String {
    let mut b = body.to_owned();
    for (victim, ghost) in [
        (&f.requester.id, &g.agent),
        (&f.conversation, &g.conversation),
        (&f.task, &g.task),
        (&f.blob, &g.blob),
        (&f.workspace, &g.workspace),
        (&f.tenant, &g.tenant),
    ] {
        b = b
            .replace(victim.as_str(), "{ID}")
            .replace(ghost.as_str(), "{ID}");
    }
    b
}

async fn send(f: &Fixture, s: &Session, method: &str, path: &str) -> Page {
    if method == "post" {
        let fields: &[(&str, &str)] = if path.starts_with("/console/policy/") {
            &[("document", r#"{"default": "deny"}"#)]
        } else {
            &[("reason", "taken over")]
        };
        f.w.submit(s, path, fields).await
    } else {
        f.w.get(Some(s), path).await
    }
}

/// The first bytes a live stream pushes within a few of its intervals.
async fn stream_start(f: &Fixture, s: &Session, path: &str) -> (u16, String) {
    let mut resp =
        f.w.http
            .request(Method::GET, format!("{}{path}", f.w.url))
            .header("cookie", &s.cookie)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
    let status = resp.status().as_u16();
    let mut seen = String::new();
    let until = tokio::time::Instant::now() + std::time::Duration::from_millis(500);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(until, resp.chunk()).await {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    (status, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_page_shows_or_changes_another_scope_s_objects_and_not_yours_looks_like_missing() {
    let f = Fixture::build().await;
    let probes = probes();
    for (method, pattern) in agentbus_console::ROUTES {
        assert!(
            probes
                .iter()
                .any(|p| p.method == *method && serves(pattern, &fill(&p.path, &f, None))),
            "{method} {pattern} has no probe: add a line to tests/data/routes.txt"
        );
    }
    let attackers = [
        (
            "another tenant's tenant admin",
            f.other_tenant_admin.clone(),
        ),
        ("another workspace's admin", f.other_ws_admin.clone()),
        ("a member of the victim's workspace", f.member.clone()),
        ("a member of another workspace", f.other_member.clone()),
        ("the gateway operator", f.w.operator.clone()),
    ];
    let mut attempts = 0;
    let mut failures = Vec::new();
    for (who, token) in &attackers {
        let s = f.w.sign_in(token).await;
        for p in &probes {
            // The operator administers tenants: suspending the victim's is its job, not an attack.
            if *who == "the gateway operator" && p.path.contains("{tenant}") {
                continue;
            }
            match p.kind.as_str() {
                "object" => {
                    let g = Ghost::new();
                    let before = f.w.app.store().dump().await.unwrap();
                    let victim_path = fill(&p.path, &f, None);
                    let ghost_path = fill(&p.path, &f, Some(&g));
                    let v = send(&f, &s, &p.method, &victim_path).await;
                    let m = send(&f, &s, &p.method, &ghost_path).await;
                    let after = f.w.app.store().dump().await.unwrap();
                    attempts += 1;
                    if v.status != m.status || normal(&v.body, &f, &g) != normal(&m.body, &f, &g) {
                        failures.push(format!(
                            "{who}: {} {victim_path}: {} vs missing {}",
                            p.method, v.status, m.status
                        ));
                    }
                    if v.body.contains(MARK) {
                        failures.push(format!(
                            "{who}: {} {victim_path} shows the victim's data",
                            p.method
                        ));
                    }
                    if before != after {
                        failures.push(format!(
                            "{who}: {} {victim_path} changed what is stored",
                            p.method
                        ));
                    }
                }
                "list" | "public" => {
                    let page = f.w.get(Some(&s), &fill(&p.path, &f, None)).await;
                    attempts += 1;
                    if page.body.contains(MARK) {
                        failures.push(format!("{who}: {} shows the victim's data", p.path));
                    }
                }
                "stream" => {
                    let (status, seen) = stream_start(&f, &s, &p.path).await;
                    attempts += 1;
                    if status != 200 && status != 403 || seen.contains(MARK) {
                        failures.push(format!("{who}: {} answered {status}: {seen}", p.path));
                    }
                }
                "session" => {}
                other => panic!("routes.txt: unknown kind {other}"),
            }
        }
    }
    eprintln!(
        "console scope: {attempts} attempts by {} attackers, {} succeeded",
        attackers.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // And the victim's own admin does see it all: the probes reach real objects.
    let s = f.w.sign_in(&f.ws_admin).await;
    for path in [
        format!("/console/agents/{}", f.requester.id),
        format!("/console/conversations/{}", f.conversation),
        format!("/console/tasks/{}", f.task),
        // Its in-progress task is due within the window (the default progress timeout).
        "/console/attention".to_owned(),
        "/console/search?q=victim%20secret".to_owned(),
        "/console/tasks".to_owned(),
        "/console/conversations".to_owned(),
    ] {
        let page = f.w.get(Some(&s), &path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(page.body.contains(MARK), "{path}");
    }
}
