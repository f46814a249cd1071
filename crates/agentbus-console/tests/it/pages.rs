//! What each page shows, read through the API's scoped functions, and how it
//! answers: the thread with verification and delivery states, a task's timeline with timers,
//! late and ignored entries, usage and cost with their sources, the console's cancel (§6.2), the
//! policy form's errors, usage (WP-5.5-2), topics, the overview's scope, downloads, headers.

use reqwest::Method;
use serde_json::{Value, json};

use crate::fixture::{Fixture, MARK};
use crate::support::*;

fn code_of(p: &Page) -> String {
    let at = p.body.find("class=\"code\">").map(|i| i + 13).unwrap_or(0);
    p.body[at..].chars().take(7).collect()
}

/// Where `needle` is in `haystack`, or a panic naming both.
fn at(haystack: &str, needle: &str) -> usize {
    haystack
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} is not shown"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_7_a_thread_shows_every_message_in_order_with_sender_verification_delivery_and_attachments()
 {
    let f = Fixture::build().await;
    let s = f.w.sign_in(&f.ws_admin).await;
    let p =
        f.w.get(
            Some(&s),
            &format!("/console/conversations/{}", f.conversation),
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    let t = text(&p.body);
    // §7: received_at order; each message with its sender and recipient.
    assert!(
        at(&t, &format!("{MARK} please look at build 7")) < at(&t, &format!("{MARK} looking now"))
    );
    assert!(
        at(
            &t,
            &format!("{} → {}", f.requester.address, f.worker.address)
        ) < at(
            &t,
            &format!("{} → {}", f.worker.address, f.requester.address)
        )
    );
    assert_eq!(t.matches("verified").count(), 2, "{t}");
    assert!(t.contains(&format!("{MARK} build 7")), "the subject");
    // Delivery states: the first was acked by the worker's sidecar and answered by the reply;
    // the reply waits in the requester's inbox.
    let first = &p.body[at(&p.body, &format!("id=\"{}\"", f.message_id))
        ..at(&p.body, &format!("id=\"{}\"", f.reply_id))];
    assert_eq!(
        text(first).matches('✓').count(),
        2,
        "persisted and delivered: {}",
        text(first)
    );
    assert!(
        first.contains(&format!("href=\"#{}\"", f.reply_id)),
        "answered by the reply"
    );
    let reply = &p.body[at(&p.body, &format!("id=\"{}\"", f.reply_id))..];
    assert!(
        text(reply).contains("waiting in the inbox"),
        "{}",
        text(reply)
    );
    assert!(first.contains(&format!("href=\"/console/attachments/{}\"", f.blob)));
    assert!(text(first).contains(&format!("{MARK}-notes.txt")));
    // The same messages as GET /v1/conversations/{id} gives the same user.
    let (_, api) =
        f.w.api(
            Method::GET,
            &format!("/v1/conversations/{}", f.conversation),
            &f.ws_admin,
            None,
        )
        .await;
    for e in api["envelopes"].as_array().unwrap() {
        assert!(p.body.contains(e["id"].as_str().unwrap()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_shows_shown_in_context_from_the_recipient_s_receipt() {
    let f = Fixture::build().await;
    let w = &f.w;
    let s = w.sign_in(&f.ws_admin).await;
    let path = format!("/console/conversations/{}", f.conversation);
    let first = |body: &str| -> String {
        body[at(body, &format!("id=\"{}\"", f.message_id))
            ..at(body, &format!("id=\"{}\"", f.reply_id))]
            .to_owned()
    };
    let before = first(&w.get(Some(&s), &path).await.body);
    assert!(before.contains("no receipt recorded"), "{before}");
    // Later, the worker's sidecar reports the first message shown in a Claude Code session's
    // context, naming the inbox sequence it was delivered at (which its sender reads).
    w.clock.advance_secs(90);
    let (_, d) = w
        .api(
            Method::GET,
            &format!("/v1/messages/{}/delivery", f.message_id),
            &f.requester.token,
            None,
        )
        .await;
    let (st, v) = w
        .post(
            "/v1/inbox/receipts",
            &f.worker.token,
            json!({"receipts": [{"sequence": d["recipients"][0]["sequence"], "id": f.message_id,
                "shown_at": w.now().to_string(), "harness": "claude", "event": "UserPromptSubmit"}]}),
        )
        .await;
    assert_eq!(
        (st, v["results"][0]["status"].as_str()),
        (200, Some("recorded")),
        "{v}"
    );
    let after = first(&w.get(Some(&s), &path).await.body);
    let t = w.now().to_string();
    let shown = format!(
        "<span class=\"step done\">{} UTC</span>",
        t.split('.')
            .next()
            .unwrap()
            .trim_end_matches('Z')
            .replacen('T', " ", 1)
    );
    assert!(after.contains(&shown), "{shown} in {after}");
    assert!(!after.contains("no receipt recorded"), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_8_3_a_read_receipt_is_not_an_answer_in_the_thread() {
    let f = Fixture::build().await;
    let w = &f.w;
    let mut m = w.draft(
        &f.requester,
        &f.worker.address,
        "message",
        json!({"text": "ping", "expects_reply": true}),
    );
    m["conversation_id"] = json!(f.conversation);
    let id = m["id"].as_str().unwrap().to_owned();
    w.send(&f.requester, m).await;
    let mut ack = w.draft(
        &f.worker,
        &f.requester.address,
        "ack",
        json!({"level": "read"}),
    );
    ack["conversation_id"] = json!(f.conversation);
    ack.insert("correlation_id".into(), json!(id));
    let ack_id = ack["id"].as_str().unwrap().to_owned();
    w.send(&f.worker, ack).await;
    let s = w.sign_in(&f.ws_admin).await;
    let p = w
        .get(
            Some(&s),
            &format!("/console/conversations/{}", f.conversation),
        )
        .await;
    let ping =
        &p.body[at(&p.body, &format!("id=\"{id}\""))..at(&p.body, &format!("id=\"{ack_id}\""))];
    assert!(
        !ping.contains(&format!("href=\"#{ack_id}\"")),
        "a read receipt is not an answer: {}",
        text(ping)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_envelope_changed_at_rest_shows_as_not_verifying() {
    let f = Fixture::build().await;
    let s = f.w.sign_in(&f.ws_admin).await;
    // An attacker with the disk edits the stored subject of the first message.
    let db = rusqlite::Connection::open(f.w.dir.join("agentbus.db")).unwrap();
    let n = db
        .execute(
            "UPDATE messages SET attrs = replace(attrs, 'build 7', 'build 8') WHERE id = ?1",
            [&f.message_id],
        )
        .unwrap();
    assert_eq!(n, 1);
    drop(db);
    let p =
        f.w.get(
            Some(&s),
            &format!("/console/conversations/{}", f.conversation),
        )
        .await;
    let first = &p.body[at(&p.body, &format!("id=\"{}\"", f.message_id))
        ..at(&p.body, &format!("id=\"{}\"", f.reply_id))];
    assert!(
        text(first).contains("does not verify (AB-1303)"),
        "{}",
        text(first)
    );
    assert!(
        text(&p.body).matches("verified").count() == 1,
        "the reply still verifies"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_s_page_draws_its_timeline_timers_late_and_ignored_entries_usage_cost_and_budget() {
    let f = Fixture::build().await;
    let w = &f.w;
    let (req, worker, requester) = (&f.request, &f.worker, &f.requester);
    // A second accept is ignored; the result reports usage and cost; a result after the end is late.
    w.followup(worker, requester, req, &f.task, "accept", json!({}))
        .await;
    w.followup(
        worker,
        requester,
        req,
        &f.task,
        "result",
        json!({"status": "succeeded", "summary": "No races found.",
        "usage": {"reported_by": "proxy", "model": "m", "input_tokens": 5000, "output_tokens": 700},
        "cost": {"currency": "USD", "amount": "0.42", "source": "estimate"}}),
    )
    .await;
    w.followup(
        worker,
        requester,
        req,
        &f.task,
        "result",
        json!({"status": "failed"}),
    )
    .await;
    // Another task expires on its accept timer.
    let (_, expiring) = w
        .request(
            requester,
            worker,
            json!({"instructions": "never accepted", "constraints": {"accept_timeout_s": 5}}),
        )
        .await;
    w.clock.advance_secs(6);
    w.app.reap().await.unwrap();
    let s = w.sign_in(&f.ws_admin).await;
    let p = w.get(Some(&s), &format!("/console/tasks/{}", f.task)).await;
    assert_eq!(p.status, 200, "{}", p.body);
    let t = text(&p.body);
    for want in [
        "State succeeded",
        "submitted → accepted",
        "accepted → in_progress",
        "in_progress → succeeded",
        "ignored",
        "late",
        &format!("{MARK} halfway"),
        "40%",
        "1,200 in, 80 out tokens",
        "(reported_by: harness)",
        "(reported_by: proxy)",
        "cost: 0.420000 USD (source: estimate)",
        "No races found.",
    ] {
        assert!(t.contains(want), "{want:?} not on the task's page: {t}");
    }
    let p = w.get(Some(&s), &format!("/console/tasks/{expiring}")).await;
    let t = text(&p.body);
    assert!(
        t.contains("State expired") && t.contains("accept_timeout") && t.contains("gateway timer"),
        "{t}"
    );
    assert!(
        p.body.contains("class=\"event timer\""),
        "a timer entry is drawn as one"
    );
    // The budget of a request.
    let mut budgeted = w.draft(
        requester,
        &worker.address,
        "task.request",
        json!({"instructions": "with a budget"}),
    );
    budgeted.insert("capability".into(), json!("code.review"));
    budgeted.insert("capability_version".into(), json!("1"));
    budgeted.insert("budget".into(), json!({"currency": "EUR", "max": "3.50"}));
    let task = w.send(requester, budgeted).await["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let p = w.get(Some(&s), &format!("/console/tasks/{task}")).await;
    assert!(
        text(&p.body).contains("budget 3.50 EUR"),
        "{}",
        text(&p.body)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_6_2_the_console_s_cancel_is_the_admin_cancel_of_the_api() {
    let f = Fixture::build().await;
    let w = &f.w;
    w.receive_all(&f.requester).await;
    w.receive_all(&f.worker).await;
    // A member is refused as §6.2 says, and nothing is stored.
    let member = w.sign_in(&f.member).await;
    let admin = w.sign_in(&f.ws_admin).await;
    let before = w.app.store().dump().await.unwrap();
    let p = w
        .submit(
            &member,
            &format!("/console/tasks/{}/cancel", f.task),
            &[("reason", "mine now")],
        )
        .await;
    assert_eq!((p.status, code_of(&p).as_str()), (403, "AB-2004"));
    let long = "x".repeat(2001);
    let p = w
        .submit(
            &admin,
            &format!("/console/tasks/{}/cancel", f.task),
            &[("reason", &long)],
        )
        .await;
    assert_eq!(
        (p.status, code_of(&p).as_str()),
        (400, "AB-3016"),
        "§5.7: reason is at most 2000 characters"
    );
    unchanged(
        &before,
        &w.app.store().dump().await.unwrap(),
        "refused cancels",
    );
    // The admin's cancel.
    let p = w
        .submit(
            &admin,
            &format!("/console/tasks/{}/cancel", f.task),
            &[("reason", "superseded")],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(p.location(), format!("/console/tasks/{}", f.task));
    let (_, task) = w
        .api(
            Method::GET,
            &format!("/v1/tasks/{}", f.task),
            &f.ws_admin,
            None,
        )
        .await;
    let last = task["timeline"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["type"], "agentbus.task.cancel.v1");
    assert!(
        last["actor"].as_str().unwrap().starts_with("user:"),
        "{last}"
    );
    // Both parties are told, by the gateway, with the reason.
    for party in [&f.requester, &f.worker] {
        let got = w.receive_all(party).await;
        let notice = got
            .iter()
            .map(|d| &d["envelope"])
            .find(|e| e["type"] == "agentbus.task.cancel.v1")
            .unwrap_or_else(|| panic!("no cancel notice: {got:?}"));
        assert_eq!(notice["source"], "agent://system/gateway/tasks");
        assert_eq!(notice["data"]["reason"], "superseded");
    }
    let page = w
        .get(Some(&admin), &format!("/console/tasks/{}", f.task))
        .await;
    assert!(
        text(&page.body).contains("cancel requested"),
        "{}",
        text(&page.body)
    );
    // The timeline entry is the admin's, with its reason.
    let t = text(&page.body);
    assert!(
        t.contains("(console)") && t.contains("Reason: superseded"),
        "{t}"
    );
    // Once the task is over, its page offers no cancel.
    w.followup(
        &f.worker,
        &f.requester,
        &f.request,
        &f.task,
        "result",
        json!({"status": "failed", "failure": {"code": "cancelled"}}),
    )
    .await;
    let page = w
        .get(Some(&admin), &format!("/console/tasks/{}", f.task))
        .await;
    assert!(
        text(&page.body).contains("State cancelled"),
        "{}",
        text(&page.body)
    );
    assert!(!page.body.contains("id=\"cancel-form\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_form_refuses_what_the_api_refuses_and_stores_nothing() {
    let f = Fixture::build().await;
    let w = &f.w;
    let s = w.sign_in(&f.ws_admin).await;
    let path = format!("/console/policy/{}", f.workspace);
    for (doc, status, code) in [
        ("{not json", 400, "AB-3001"),
        (
            r#"{"default": "maybe", "rules": [{"from": "agent://Bad", "to": "*"}]}"#,
            422,
            "AB-3026",
        ),
    ] {
        let before = w.app.store().dump().await.unwrap();
        let p = w.submit(&s, &path, &[("document", doc)]).await;
        let (api_status, api) = w
            .api(
                Method::PUT,
                &format!("/v1/workspaces/{}/policy", f.workspace),
                &f.ws_admin,
                Some(serde_json::from_str(doc).unwrap_or(Value::String(doc.into()))),
            )
            .await;
        unchanged(&before, &w.app.store().dump().await.unwrap(), doc);
        assert_eq!(
            (p.status, code_of(&p).as_str()),
            (status, code),
            "{doc}: {}",
            p.body
        );
        if code == "AB-3026" {
            assert_eq!(api_status, 422);
            // Every violation the API lists, the form lists, with its path.
            for v in api["error"]["details"]["violations"].as_array().unwrap() {
                assert!(text(&p.body).contains(v["path"].as_str().unwrap()), "{v}");
            }
            assert!(
                p.body.contains("agent://Bad"),
                "the document is shown again as typed"
            );
        }
    }
    let p = w.submit(&s, &path, &[("document", r#"{"default": "deny", "rules": [{"from": "*", "to": "*", "effect": "allow", "description": "all"}]}"#)]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let (_, doc) = w
        .api(
            Method::GET,
            &format!("/v1/workspaces/{}/policy", f.workspace),
            &f.ws_admin,
            None,
        )
        .await;
    assert_eq!(doc["default"], "deny");
    let p = w.get(Some(&s), p.location()).await;
    assert!(text(&p.body).contains("Saved."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_5_2_usage_shows_its_source_next_to_every_figure() {
    let f = Fixture::build().await;
    let w = &f.w;
    w.followup(
        &f.worker,
        &f.requester,
        &f.request,
        &f.task,
        "result",
        json!({"status": "succeeded",
        "usage": {"reported_by": "proxy", "input_tokens": 5000, "output_tokens": 700},
        "cost": {"currency": "USD", "amount": "0.42", "source": "estimate"}}),
    )
    .await;
    // The envelope's own `usage` attribute counts for a message.
    let mut m = w.draft(
        &f.requester,
        &f.worker.address,
        "message",
        json!({"text": "thanks"}),
    );
    m.insert(
        "usage".into(),
        json!({"reported_by": "agent", "input_tokens": 30, "output_tokens": 3}),
    );
    w.send(&f.requester, m).await;
    let (s, api) = w.api(Method::GET, "/v1/usage", &f.ws_admin, None).await;
    assert_eq!(s, 200, "{api}");
    let rows = api["usage"].as_array().unwrap();
    let find = |source: &str| {
        rows.iter()
            .find(|r| r["usage"]["reported_by"] == source)
            .unwrap_or_else(|| panic!("{source}: {api}"))
    };
    assert_eq!(find("harness")["usage"]["input_tokens"], 1200);
    assert_eq!(find("harness")["capability"], "code.review");
    assert_eq!(
        find("proxy")["cost"],
        json!({"currency": "USD", "amount": "0.420000", "source": "estimate"})
    );
    assert_eq!(find("agent")["agent"]["id"], json!(f.requester.id));
    for r in rows {
        assert!(
            r["usage"].is_null() || r["usage"]["reported_by"].is_string(),
            "{r}"
        );
        assert!(
            r["cost"].is_null() || r["cost"].as_object().unwrap().contains_key("source"),
            "{r}"
        );
    }
    // The console's page puts each row's source beside its figures.
    let s = w.sign_in(&f.ws_admin).await;
    let p = w.get(Some(&s), "/console/usage").await;
    assert_eq!(p.status, 200);
    for row in p.body.split("<tr>").skip(1).filter(|r| r.contains("<td")) {
        assert!(
            row.contains("class=\"source\""),
            "a row without its source: {row}"
        );
    }
    let t = text(&p.body);
    assert!(
        t.contains("0.420000 USD")
            && t.contains("estimate")
            && t.contains("proxy")
            && t.contains("harness")
            && t.contains("agent"),
        "{t}"
    );
    // Another workspace's admin and an agent see only theirs.
    let (_, other) = w
        .api(Method::GET, "/v1/usage", &f.other_ws_admin, None)
        .await;
    assert_eq!(other["usage"], json!([]));
    let (_, own) = w
        .api(
            Method::GET,
            &format!("/v1/usage?agent={}", f.worker.id),
            &f.requester.token,
            None,
        )
        .await;
    assert_eq!(
        own["usage"],
        json!([]),
        "an agent reads its own figures only"
    );
    let (status, _) = w.api(Method::GET, "/v1/usage", &f.member, None).await;
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_show_their_subscribers_to_admins_and_counts_to_agents() {
    let f = Fixture::build().await;
    let w = &f.w;
    let s = w.sign_in(&f.ws_admin).await;
    let p = w.get(Some(&s), "/console/topics").await;
    let t = text(&p.body);
    assert!(
        t.contains("topic://default/backend/victim-topic") && t.contains(&f.worker.address),
        "{t}"
    );
    let (_, admin) = w
        .api(
            Method::GET,
            &format!("/v1/topics?workspace={}", f.workspace),
            &f.ws_admin,
            None,
        )
        .await;
    assert_eq!(admin["topics"][0]["subscriber_ids"], json!([f.worker.id]));
    let (_, agent) = w
        .api(Method::GET, "/v1/topics", &f.worker.token, None)
        .await;
    assert_eq!(
        agent["topics"][0],
        json!({"name": "victim-topic", "subscribers": 1})
    );
    let (status, _) = w
        .api(
            Method::GET,
            &format!("/v1/topics?workspace={}", f.workspace),
            &f.other_ws_admin,
            None,
        )
        .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_counts_the_viewer_s_scope_only() {
    let f = Fixture::build().await;
    let w = &f.w;
    let stranger = w
        .agent(&w.admin, "stranger", json!({"workspace": "frontend"}))
        .await;
    // A publish refused for its signature, in each workspace; a delivery in the backend.
    for (a, n) in [(&f.requester, 1), (&stranger, 3)] {
        for _ in 0..n {
            let mut bad = sign(
                a,
                w.draft(a, &f.worker.address, "message", json!({"text": "x"})),
            );
            bad["data"]["text"] = json!("changed");
            assert_eq!(
                w.api(
                    Method::POST,
                    "/v1/messages",
                    &a.token,
                    Some(Value::Object(bad))
                )
                .await
                .0,
                401
            );
        }
    }
    let s = w.sign_in(&f.ws_admin).await;
    let p = w.get(Some(&s), "/console/overview").await;
    let errors = &p.body[at(&p.body, "id=\"errors\"")..];
    assert!(
        text(errors).contains("AB-1011 Signature does not verify 1"),
        "{}",
        text(errors)
    );
    let t = text(&p.body);
    assert!(
        t.contains("2 agents")
            || t.contains("agents 2")
            || p.body
                .contains("<div class=\"figure\">2</div><div class=\"label\">agents</div>"),
        "{t}"
    );
    let other = w.sign_in(&f.other_ws_admin).await;
    let p = w.get(Some(&other), "/console/overview").await;
    assert!(
        text(&p.body[at(&p.body, "id=\"errors\"")..])
            .contains("AB-1011 Signature does not verify 3")
    );
    assert!(!p.body.contains(MARK));
    // A member administers nothing: no counters, only its own agents.
    let member = w.sign_in(&f.member).await;
    let p = w.get(Some(&member), "/console/overview").await;
    assert!(!p.body.contains("id=\"counters\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_download_as_attachments_never_inline() {
    let f = Fixture::build().await;
    let w = &f.w;
    let s = w.sign_in(&f.ws_admin).await;
    let p = w
        .get(Some(&s), &format!("/console/attachments/{}", f.blob))
        .await;
    assert_eq!(p.status, 200);
    let h = |k: &str| {
        p.headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(
        h("content-disposition"),
        format!("attachment; filename=\"{MARK}-notes.txt\"; filename*=UTF-8''{MARK}-notes.txt")
    );
    assert_eq!(h("x-content-type-options"), "nosniff");
    assert_eq!(h("content-security-policy"), "default-src 'none'; sandbox");
    assert_eq!(h("content-type"), "text/plain");
    assert_eq!(p.body, format!("{MARK} file"));
    // The API's download is the same answer.
    let resp = w
        .http
        .get(format!("{}/v1/blobs/{}/content", w.url, f.blob))
        .bearer_auth(&f.worker.token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["content-disposition"].to_str().unwrap(),
        h("content-disposition")
    );
    assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
}

/// Every page a tenant admin opens over the fixture.
fn pages_of(f: &Fixture) -> Vec<String> {
    vec![
        "/console/sign-in".into(),
        "/console/overview".into(),
        "/console/agents".into(),
        format!("/console/agents/{}", f.requester.id),
        "/console/conversations".into(),
        format!("/console/conversations/{}", f.conversation),
        "/console/tasks".into(),
        format!("/console/tasks/{}", f.task),
        "/console/attention".into(),
        "/console/topics".into(),
        "/console/policy".into(),
        "/console/usage".into(),
        "/console/no-such-page".into(),
        format!(
            "/console/tasks/{}",
            agentbus_runtime::mint(agentbus_protocol::ids::IdKind::Task)
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_has_a_strict_csp_no_inline_script_or_style_and_nothing_from_elsewhere() {
    let f = Fixture::build().await;
    let s = f.w.sign_in(&f.w.admin).await;
    for path in pages_of(&f) {
        let p = f.w.get(Some(&s), &path).await;
        let h = |k: &str| {
            p.headers
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(
            h("content-security-policy"),
            agentbus_console::CSP,
            "{path}"
        );
        assert_eq!(h("x-content-type-options"), "nosniff");
        assert_eq!(h("x-frame-options"), "DENY");
        assert_eq!(h("referrer-policy"), "same-origin");
        assert_eq!(h("cache-control"), "no-store");
        assert!(h("content-type").starts_with("text/html"), "{path}");
        let lower = p.body.to_ascii_lowercase();
        for script in lower.split("<script").skip(1) {
            assert!(
                script.trim_start().starts_with("src=\"/console/assets/"),
                "{path}: an inline script"
            );
        }
        for bad in [
            " style=",
            "javascript:",
            "<style",
            " onload=",
            " onclick=",
            " onerror=",
        ] {
            assert!(!lower.contains(bad), "{path}: {bad}");
        }
        for attr in ["src=\"", "href=\"", "action=\""] {
            for value in p.body.split(attr).skip(1) {
                assert!(
                    value.starts_with('/') || value.starts_with('#') || value.starts_with('?'),
                    "{path}: {attr}{}",
                    &value[..value.len().min(40)]
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assets_are_in_the_binary_and_revalidated_by_etag() {
    let w = World::start().await;
    for (file, media) in [
        ("console.css", "text/css; charset=utf-8"),
        ("console.js", "text/javascript; charset=utf-8"),
        ("icon.svg", "image/svg+xml"),
    ] {
        let p = w.get(None, &format!("/console/assets/{file}")).await;
        assert_eq!(p.status, 200);
        assert_eq!(p.headers["content-type"], media);
        let etag = p.headers["etag"].to_str().unwrap().to_owned();
        let again = w
            .http
            .get(format!("{}/console/assets/{file}", w.url))
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status().as_u16(), 304);
    }
    let js = w.get(None, "/console/assets/console.js").await.body;
    assert!(
        !js.contains("http") && !js.contains("eval("),
        "the script loads nothing and evaluates nothing"
    );
    assert_eq!(
        w.get(None, "/console/assets/../Cargo.toml").await.status,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_api_s_codes_never_a_server_error() {
    let f = Fixture::build().await;
    let s = f.w.sign_in(&f.w.admin).await;
    let cases = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/bad_input.txt"
    ))
    .unwrap();
    let mut n = 0;
    for line in cases
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (path, want) = line.rsplit_once(' ').unwrap();
        let (status, code) = want.split_once(':').unwrap();
        let path = path
            .replace("{task}", &f.task)
            .replace("{workspace}", &f.workspace);
        let before = f.w.app.store().dump().await.unwrap();
        let p = if let Some(form) = path.strip_prefix("POST ") {
            let (path, body) = form.split_once(' ').unwrap_or((form, ""));
            let fields: Vec<(&str, &str)> = body
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .collect();
            f.w.submit(&s, path, &fields).await
        } else {
            f.w.get(Some(&s), &path).await
        };
        assert_eq!(p.status.to_string(), status, "{line}: {}", text(&p.body));
        assert_eq!(code_of(&p), code, "{line}");
        unchanged(&before, &f.w.app.store().dump().await.unwrap(), line);
        n += 1;
    }
    assert!(n >= 10);
}

/// The row of a list whose link points at `href`: from its `<tr>` to the row's end.
fn row_of<'a>(body: &'a str, href: &str) -> &'a str {
    let at = at(body, &format!("href=\"{href}"));
    let start = body[..at].rfind("<tr").unwrap();
    let end = at + body[at..].find("</tr>").unwrap();
    &body[start..end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_show_subjects_first_lines_participants_and_instructions() {
    let f = Fixture::build().await;
    let w = &f.w;
    // A conversation without a subject, its only message long, on two lines, with markup.
    let long = "Please check the <b>nightly</b> build before the release goes out tomorrow \
                morning, the integration suite has been flaky all week long\nsecond line";
    let env = w.draft(
        &f.requester,
        &f.worker.address,
        "message",
        json!({"text": long}),
    );
    let quiet = env["conversation_id"].as_str().unwrap().to_owned();
    w.send(&f.requester, env).await;
    let s = w.sign_in(&f.ws_admin).await;
    let p = w.get(Some(&s), "/console/conversations").await;
    assert_eq!(p.status, 200, "{}", p.body);
    // The thread's last message has no subject: its first line stands for it, and every
    // address that took part is shown as an address, not an id.
    let row = row_of(
        &p.body,
        &format!("/console/conversations/{}", f.conversation),
    );
    let t = text(row);
    assert!(t.contains(&format!("{MARK} looking now")), "{t}");
    assert!(
        t.contains(&f.requester.address) && t.contains(&f.worker.address),
        "{t}"
    );
    assert!(!row.contains(&f.requester.id), "{row}");
    // Shortened on a word boundary, escaped, the second line left out.
    let row = row_of(&p.body, &format!("/console/conversations/{quiet}"));
    let t = text(row);
    assert!(
        t.contains("Please check the <b>nightly</b> build before the release goes out tomorrow morning, the…"),
        "{t}"
    );
    assert!(
        row.contains("&#60;b&#62;nightly") && !row.contains("<b>"),
        "{row}"
    );
    assert!(!t.contains("second line") && !t.contains("flaky"), "{t}");
    // A subject, when the last message has one, is the title.
    let mut titled = w.draft(
        &f.worker,
        &f.requester.address,
        "message",
        json!({"text": "body text"}),
    );
    titled.insert("subject".into(), json!("Weekly report"));
    let titled_id = titled["conversation_id"].as_str().unwrap().to_owned();
    w.send(&f.worker, titled).await;
    let p = w.get(Some(&s), "/console/conversations").await;
    let t = text(row_of(
        &p.body,
        &format!("/console/conversations/{titled_id}"),
    ));
    assert!(
        t.contains("Weekly report") && !t.contains("body text"),
        "{t}"
    );
    // Tasks: the first line of the instructions beside the state.
    let p = w.get(Some(&s), "/console/tasks").await;
    let t = text(row_of(&p.body, &format!("/console/tasks/{}", f.task)));
    assert!(
        t.contains(&format!("in_progress {MARK} review change 482")),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_badges_ids_and_addresses_are_unbreakable_but_after_a_slash() {
    let f = Fixture::build().await;
    let s = f.w.sign_in(&f.ws_admin).await;
    for path in [
        "/console/conversations",
        "/console/tasks",
        "/console/agents",
    ] {
        let p = f.w.get(Some(&s), path).await;
        // Every address is written in parts, each ending at a slash, with a break allowed only
        // between them.
        let parts: Vec<&str> = p
            .body
            .split("<span class=\"seg\">")
            .skip(1)
            .map(|x| x.split("</span>").next().unwrap())
            .collect();
        assert!(!parts.is_empty(), "{path}: no address");
        for (i, part) in parts.iter().enumerate() {
            assert!(
                !part[..part.len() - 1].contains('/') || part.ends_with("//"),
                "{path}: {part}"
            );
            let last = parts.get(i + 1).is_none_or(|n| n.starts_with("agent:"));
            assert!(
                part.ends_with('/') || last || !part.contains(':'),
                "{path}: {part}"
            );
        }
    }
    let css = f.w.get(None, "/console/assets/console.css").await.body;
    assert!(
        css.contains(".state, .badge, .id, .tag.kind { white-space: nowrap;"),
        "{css}"
    );
    assert!(css.contains(".addr .seg { white-space: nowrap; }"), "{css}");
    assert!(
        !css.contains("vertical-align: top; overflow-wrap: anywhere;"),
        "{css}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_s_page_renders_its_card_and_its_recent_tasks_and_conversations() {
    let f = Fixture::build().await;
    let w = &f.w;
    let fleet = w
        .agent(
            &w.admin,
            "harnessed",
            json!({"workspace": "backend", "harness": {"name": "claude-code", "version": "2.4"},
                   "capabilities": [{"name": "code.lint", "version": "3", "description": "Lints a diff."}]}),
        )
        .await;
    let s = w.sign_in(&f.ws_admin).await;
    let p = w
        .get(Some(&s), &format!("/console/agents/{}", fleet.id))
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    let t = text(&p.body);
    assert!(t.contains("harness name claude-code version 2.4"), "{t}");
    assert!(t.contains("code.lint v3 Lints a diff."), "{t}");
    assert!(t.contains("presence offline"), "{t}");
    assert!(t.contains("last heard never"), "{t}");
    assert!(!t.contains("Harness {}") && !t.contains("{}"), "{t}");
    assert!(!p.body.contains("\"presence\":"), "no raw JSON: {t}");
    assert!(t.contains("No tasks."), "{t}");
    // The worker of the fixture: its task and its conversation.
    let p = w
        .get(Some(&s), &format!("/console/agents/{}", f.worker.id))
        .await;
    let tasks = &p.body[at(&p.body, "id=\"agent-tasks\"")..];
    assert!(
        tasks.contains(&format!("href=\"/console/tasks/{}\"", f.task)),
        "{tasks}"
    );
    assert!(text(tasks).contains(&format!("{MARK} review change 482")));
    let conversations = &p.body[at(&p.body, "id=\"agent-conversations\"")..];
    assert!(
        conversations.contains(&format!(
            "href=\"/console/conversations/{}\"",
            f.conversation
        )),
        "{conversations}"
    );
    // A member reads the card, not the lists its role does not read.
    let s = w.sign_in(&f.member).await;
    let p = w
        .get(Some(&s), &format!("/console/agents/{}", fleet.id))
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(!p.body.contains("agent-tasks"), "{}", p.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_attention_lists_failed_waiting_due_soon_and_dead_letters() {
    let f = Fixture::build().await;
    let w = &f.w;
    let (a, b) = (&f.requester, &f.worker);
    // A message never acknowledged: leased as often as allowed, then dead-lettered.
    let c = w
        .agent(&w.admin, "silent", json!({"workspace": "backend"}))
        .await;
    let dead = w.draft(a, &c.address, "message", json!({"text": "never acked"}));
    let dead_id = dead["id"].as_str().unwrap().to_owned();
    w.send(a, dead).await;
    for _ in 0..3 {
        let (st, v) = w
            .api(
                Method::GET,
                "/v1/inbox?after=0&wait=0&limit=100",
                &c.token,
                None,
            )
            .await;
        assert_eq!(st, 200, "{v}");
        w.clock.advance_secs(31);
    }
    w.app.reap().await.unwrap();
    let (req, failed) = w
        .request(
            a,
            b,
            json!({"instructions": "Broken build", "constraints": {"accept_timeout_s": 3600}}),
        )
        .await;
    w.followup(b, a, &req, &failed, "accept", json!({})).await;
    w.followup(
        b,
        a,
        &req,
        &failed,
        "result",
        json!({"status": "failed", "failure": {"code": "harness_crashed", "message": "exit 3"}}),
    )
    .await;
    let (req, waiting) = w
        .request(
            a,
            b,
            json!({"instructions": "Which branch?", "constraints": {"accept_timeout_s": 3600}}),
        )
        .await;
    w.followup(b, a, &req, &waiting, "accept", json!({})).await;
    w.followup(
        b,
        a,
        &req,
        &waiting,
        "needs_input",
        json!({"question": "Which branch?"}),
    )
    .await;
    // Accept timeouts of 10 minutes (inside the window) and of an hour (outside it).
    let (_, soon) = w
        .request(
            a,
            b,
            json!({"instructions": "Due soon", "constraints": {"accept_timeout_s": 600}}),
        )
        .await;
    let (_, later) = w
        .request(
            a,
            b,
            json!({"instructions": "Due later", "constraints": {"accept_timeout_s": 3600}}),
        )
        .await;
    let s = w.sign_in(&f.ws_admin).await;
    let p = w.get(Some(&s), "/console/overview").await;
    assert!(
        p.body.contains("href=\"/console/attention\""),
        "the nav links it"
    );
    let p = w.get(Some(&s), "/console/attention").await;
    assert_eq!(p.status, 200, "{}", p.body);
    let part = |id: &str| {
        let from = at(&p.body, &format!("id=\"{id}\""));
        let to = p.body[from..].find("</section>").unwrap() + from;
        p.body[from..to].to_owned()
    };
    let has =
        |section: &str, task: &str| section.contains(&format!("href=\"/console/tasks/{task}\""));
    let failed_part = part("attention-failed");
    assert!(
        has(&failed_part, &failed) && !has(&failed_part, &waiting),
        "{failed_part}"
    );
    assert!(text(&failed_part).contains("failed Broken build"));
    let waiting_part = part("attention-needs-input");
    assert!(
        has(&waiting_part, &waiting) && !has(&waiting_part, &failed),
        "{waiting_part}"
    );
    let due = part("attention-due");
    assert!(has(&due, &soon) && !has(&due, &later), "{due}");
    assert!(
        text(&due).contains("accept_timeout in 10 min"),
        "{}",
        text(&due)
    );
    let dead_part = part("attention-dead-letters");
    assert!(dead_part.contains(&dead_id), "{dead_part}");
    assert!(
        text(&dead_part).contains(&c.address),
        "{}",
        text(&dead_part)
    );
    // Another workspace's admin sees none of it.
    let s = w.sign_in(&f.other_ws_admin).await;
    let p = w.get(Some(&s), "/console/attention").await;
    assert_eq!(p.status, 200);
    for id in [&failed, &waiting, &soon, &dead_id] {
        assert!(!p.body.contains(id.as_str()), "{id}: {}", p.body);
    }
}

/// The cell of the policy form that holds the field `id`.
fn cell_of<'a>(body: &'a str, id: &str) -> &'a str {
    let at = at(body, &format!("id=\"{id}\""));
    let start = body[..at].rfind("<td").unwrap();
    let end = at + body[at..].find("</td>").unwrap();
    &body[start..end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_form_shows_each_violation_beside_its_field() {
    let f = Fixture::build().await;
    let w = &f.w;
    let s = w.sign_in(&f.ws_admin).await;
    let path = format!("/console/policy/{}", f.workspace);
    let p = w.get(Some(&s), "/console/policy").await;
    assert!(p.body.contains("id=\"rule-0-from\""), "{}", p.body);
    assert!(!p.body.contains("field-error"), "no problem before a save");
    // A bad pattern and a missing effect in the first rule, an empty row, an over-long
    // description in the third (the second rule of the document).
    let long = "x".repeat(501);
    let before = w.app.store().dump().await.unwrap();
    let p = w
        .submit(
            &s,
            &path,
            &[
                ("default", "deny"),
                ("rule-count", "3"),
                ("rule-0-from", "agent://Bad"),
                ("rule-0-to", "*"),
                ("rule-0-effect", ""),
                ("rule-1-from", ""),
                ("rule-2-from", "*"),
                ("rule-2-to", "*"),
                ("rule-2-effect", "allow"),
                ("rule-2-description", &long),
            ],
        )
        .await;
    unchanged(&before, &w.app.store().dump().await.unwrap(), "the form");
    assert_eq!(
        (p.status, code_of(&p).as_str()),
        (422, "AB-3026"),
        "{}",
        p.body
    );
    let from = cell_of(&p.body, "rule-0-from");
    assert!(
        from.contains("field-error") && text(from).contains("/rules/0/from"),
        "{from}"
    );
    assert!(
        from.contains("value=\"agent://Bad\""),
        "shown as typed: {from}"
    );
    let row = cell_of(&p.body, "rule-0-effect");
    assert!(
        text(row).contains("/rules/0 ") && text(row).contains("effect"),
        "{row}"
    );
    let description = cell_of(&p.body, "rule-1-description");
    assert!(
        text(description).contains("/rules/1/description"),
        "{description}"
    );
    for quiet in ["rule-0-to", "rule-1-from", "default"] {
        let at = at(&p.body, &format!("id=\"{quiet}\""));
        let rest = &p.body[at..];
        let next = ["</td>", "</div>"]
            .iter()
            .filter_map(|end| rest.find(end))
            .min()
            .unwrap();
        assert!(!p.body[at..at + next].contains("field-error"), "{quiet}");
    }
    // A document from the JSON editor is checked alike, its problems beside the fields too.
    let p = w
        .submit(&s, &path, &[("document", r#"{"default": "maybe"}"#)])
        .await;
    assert_eq!(p.status, 422, "{}", p.body);
    let at_default = at(&p.body, "id=\"default\"");
    let field = &p.body[at_default..at_default + p.body[at_default..].find("</div>").unwrap()];
    assert!(text(field).contains("/default"), "{field}");
    assert!(
        p.body.contains("id=\"as-json\" open"),
        "the editor stays open"
    );
    // A valid form is saved through the same path.
    let p = w
        .submit(
            &s,
            &path,
            &[
                ("default", "allow"),
                ("read_receipts", "true"),
                ("rule-count", "2"),
                ("rule-0-from", "*"),
                ("rule-0-to", "topic://default/backend/*"),
                ("rule-0-effect", "deny"),
                ("rule-0-description", "no topics"),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let (_, doc) = w
        .api(
            Method::GET,
            &format!("/v1/workspaces/{}/policy", f.workspace),
            &f.ws_admin,
            None,
        )
        .await;
    assert_eq!(
        doc,
        json!({"default": "allow", "read_receipts": true, "rules": [
            {"from": "*", "to": "topic://default/backend/*", "effect": "deny", "description": "no topics"}]})
    );
}

/// The bars of the overview's chart `label`, as the page draws them.
fn bars(body: &str, label: &str) -> Vec<u64> {
    let from = at(body, &format!("aria-label=\"{label} per interval\""));
    let svg = &body[from..from + body[from..].find("</svg>").unwrap()];
    svg.split("<title>")
        .skip(1)
        .map(|t| t.split("</title>").next().unwrap().parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_charts_start_from_the_recent_history() {
    let f = Fixture::build().await;
    let w = &f.w;
    // The fixture's agents published five envelopes (two messages, a request, an accept and a
    // progress report), just now: the first load already charts them, in the newest interval.
    let s = w.sign_in(&f.ws_admin).await;
    let p = w.get(Some(&s), "/console/overview").await;
    assert_eq!(p.status, 200, "{}", p.body);
    let published = bars(&p.body, "publishes accepted");
    assert_eq!(published.iter().sum::<u64>(), 5, "{published:?}");
    assert_eq!(published.last(), Some(&5), "{published:?}");
    // Scoped like the counters: another workspace's admin charts none of it.
    let other = w.sign_in(&f.other_ws_admin).await;
    let p = w.get(Some(&other), "/console/overview").await;
    assert_eq!(bars(&p.body, "publishes accepted").iter().sum::<u64>(), 0);
    // The gateway operator charts every tenant's.
    let operator = w.sign_in(&w.operator).await;
    let p = w.get(Some(&operator), "/console/overview").await;
    assert!(bars(&p.body, "publishes accepted").iter().sum::<u64>() >= 5);
    // Older traffic slides out of the window the chart shows, on the next load.
    w.clock.advance_secs(600);
    let p = w.get(Some(&s), "/console/overview").await;
    assert_eq!(bars(&p.body, "publishes accepted").iter().sum::<u64>(), 0);
}

/// Nobody watches the overview while traffic comes and goes: the console's sampler samples the
/// counters anyway, so the first page load, intervals later, already charts the publishes,
/// deliveries and refusals of the interval they happened in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_charts_the_traffic_sampled_while_nobody_watched() {
    let mut console = None;
    let w = World::start_mounting(|gw| {
        let c = agentbus_console::Console::new(gw.app.clone(), console_config());
        gw.mount(c.router());
        console = Some(c);
    })
    .await;
    let console = console.unwrap();
    let admin = w.admin.clone();
    w.workspace(&admin, "backend").await;
    let ws_admin = w.user(&admin, "admin", "backend").await;
    let a = w
        .agent(&admin, "sender", json!({"workspace": "backend"}))
        .await;
    let b = w
        .agent(&admin, "receiver", json!({"workspace": "backend"}))
        .await;
    // In one interval: two messages accepted and delivered, and a publish refused (AB-1011).
    for text in ["one", "two"] {
        w.send(
            &a,
            w.draft(&a, &b.address, "message", json!({"text": text})),
        )
        .await;
    }
    assert_eq!(w.receive_all(&b).await.len(), 2);
    let mut bad = sign(&a, w.draft(&a, &b.address, "message", json!({"text": "x"})));
    bad["data"]["text"] = json!("changed");
    let refused = w
        .api(
            Method::POST,
            "/v1/messages",
            &a.token,
            Some(Value::Object(bad)),
        )
        .await;
    assert_eq!(refused.0, 401, "{}", refused.1);
    // The sampler's tick in that interval; three intervals later, the first page load.
    console.sample_now();
    w.clock
        .advance_ms(3 * console_config().live_interval.as_millis() as i64);
    let s = w.sign_in(&ws_admin).await;
    let p = w.get(Some(&s), "/console/overview").await;
    assert_eq!(p.status, 200, "{}", p.body);
    for (label, n) in [("deliveries", 2), ("refused", 1), ("publishes accepted", 2)] {
        // Bars start at the console's first sample, the interval of the traffic.
        assert_eq!(bars(&p.body, label), [n, 0, 0, 0], "{label}");
    }
    // The operator's charts sum every workspace (other tests' too: this process's counters).
    let operator = w.sign_in(&w.operator).await;
    let p = w.get(Some(&operator), "/console/overview").await;
    for (label, n) in [("publishes accepted", 2), ("deliveries", 2), ("refused", 1)] {
        let bars = bars(&p.body, label);
        assert!(bars[bars.len() - 4] >= n, "{label}: {bars:?}");
    }
}

/// The search page: the viewer's hits with their snippets, the query's words marked and every
/// peer's character escaped; a query the gateway refuses is its error page with the code; a
/// member, who reads no conversation, is refused as the API refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_page_shows_marked_snippets_in_scope_and_refuses_bad_queries() {
    let f = Fixture::build().await;
    let w = &f.w;
    let s = w.sign_in(&f.ws_admin).await;
    let p = w.get(Some(&s), "/console/search?q=please%20look").await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body.contains("<mark>please</mark> <mark>look</mark>"),
        "{}",
        p.body
    );
    assert!(p.body.contains(&f.message_id), "the hit links its message");
    assert!(
        text(&p.body).contains(&format!("{MARK} build 7")),
        "the subject"
    );
    // A peer's markup in a hit is text.
    w.send(
        &f.requester,
        w.draft(
            &f.requester,
            &f.worker.address,
            "message",
            json!({"text": "zanzibar <script>alert(1)</script>"}),
        ),
    )
    .await;
    let p = w.get(Some(&s), "/console/search?q=zanzibar").await;
    assert!(
        p.body.contains("<mark>zanzibar</mark> &#60;script&#62;"),
        "{}",
        p.body
    );
    assert!(!p.body.contains("<script>alert"), "{}", p.body);
    // Refusals.
    let p = w.get(Some(&s), "/console/search?q=color%3Ared").await;
    assert_eq!(
        (p.status, code_of(&p).as_str()),
        (400, "AB-3080"),
        "{}",
        p.body
    );
    let m = w.sign_in(&f.member).await;
    let p = w.get(Some(&m), "/console/search?q=please").await;
    assert_eq!(
        (p.status, code_of(&p).as_str()),
        (403, "AB-1002"),
        "{}",
        p.body
    );
    // The form alone, without a query.
    let p = w.get(Some(&s), "/console/search").await;
    assert!(p.status == 200 && p.body.contains("id=\"q\""), "{}", p.body);
}

/// A task's page and a conversation's name the W3C trace their messages carry (§2.1), linked to
/// the operator's viewer when the gateway's `trace_url` is set; without it, the id alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_and_conversation_pages_link_their_trace_to_the_viewer() {
    let w = agentbus_testkit::console::World::start_with(|c| {
        c.trace_url = "https://jaeger.example/trace/{trace_id}".into();
    })
    .await;
    let admin = w.admin.clone();
    w.workspace(&admin, "backend").await;
    let ws_admin = w.user(&admin, "admin", "backend").await;
    let requester = w
        .agent(&admin, "bot", json!({"workspace": "backend"}))
        .await;
    let worker = w
        .agent(
            &admin,
            "rev",
            json!({"workspace": "backend", "capabilities": [{"name": "code.review", "version": "1"}]}),
        )
        .await;
    let (req, task) = w
        .request(&requester, &worker, json!({"instructions": "look"}))
        .await;
    let trace = req["traceparent"].as_str().unwrap()[3..35].to_owned();
    let s = w.sign_in(&ws_admin).await;
    let link = format!("href=\"https://jaeger.example/trace/{trace}\"");
    let p = w.get(Some(&s), &format!("/console/tasks/{task}")).await;
    assert!(
        p.body.contains(&trace) && p.body.contains(&link),
        "{}",
        p.body
    );
    let cnv = req["conversation_id"].as_str().unwrap();
    let p = w
        .get(Some(&s), &format!("/console/conversations/{cnv}"))
        .await;
    assert!(p.body.contains(&link), "{}", p.body);
    // Without the setting: the id, no link.
    let f = Fixture::build().await;
    let s = f.w.sign_in(&f.ws_admin).await;
    let p =
        f.w.get(Some(&s), &format!("/console/tasks/{}", f.task))
            .await;
    let id = f.request["traceparent"].as_str().unwrap()[3..35].to_owned();
    assert!(
        p.body.contains(&id) && !p.body.contains("trace viewer"),
        "{}",
        p.body
    );
}
