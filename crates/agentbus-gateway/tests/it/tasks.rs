//! Tasks over HTTP (§6): the §12.2 lifecycle, sender rules, timers driven by the test clock, late
//! results, cancels, idempotent requests, and the timeline.

use serde_json::{Map, Value, json};

use agentbus_store::Store as _;

use crate::support::*;

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

async fn state(h: &Harness, a: &Agent, task: &str) -> String {
    let (s, v) = h.get(&format!("/v1/tasks/{task}"), &a.token).await;
    assert_eq!(s, 200, "{v}");
    v["state"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_12_2_full_lifecycle_with_timeline() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = h.worker("reviewer").await;
    let mut req = request(
        &h,
        &bot,
        &rev,
        json!({"accept_timeout_s": 120, "progress_timeout_s": 600}),
    );
    req.insert(
        "idempotency_key".into(),
        json!("review-change-482-revision-7"),
    );
    let req = sign(&bot, req);
    let (s, receipt, _) = h.publish(&bot, &req).await;
    assert_eq!(s, 202, "{receipt}");
    let task = receipt["task_id"].as_str().unwrap().to_owned();
    assert!(task.starts_with("tsk_"));
    assert_eq!(state(&h, &bot, &task).await, "submitted");
    // WP-8-4: an idempotent replay returns the original task; no second record exists.
    let mut again = request(&h, &bot, &rev, json!({}));
    again.insert(
        "idempotency_key".into(),
        json!("review-change-482-revision-7"),
    );
    let (s, r2, _) = h.publish(&bot, &sign(&bot, again)).await;
    assert_eq!((s, r2["task_id"].as_str()), (200, Some(task.as_str())));
    let (_, list) = h.get("/v1/tasks", &bot.token).await;
    assert_eq!(list["tasks"].as_array().unwrap().len(), 1);
    h.clock.advance_secs(10);
    assert_eq!(
        h.publish(
            &rev,
            &followup(
                &h,
                &rev,
                &bot,
                &req,
                &task,
                "accept",
                json!({"estimated_duration_s": 240})
            )
        )
        .await
        .0,
        202
    );
    assert_eq!(state(&h, &bot, &task).await, "accepted");
    h.clock.advance_secs(120);
    assert_eq!(
        h.publish(
            &rev,
            &followup(
                &h,
                &rev,
                &bot,
                &req,
                &task,
                "progress",
                json!({"percent": 40, "stage": "static-analysis"})
            )
        )
        .await
        .0,
        202
    );
    assert_eq!(state(&h, &bot, &task).await, "in_progress");
    h.clock.advance_secs(120);
    let result = followup(
        &h,
        &rev,
        &bot,
        &req,
        &task,
        "result",
        json!({"status": "succeeded", "summary": "One double-unlock.", "output": {"findings": []}}),
    );
    assert_eq!(h.publish(&rev, &result).await.0, 202);
    let (_, t) = h.get(&format!("/v1/tasks/{task}"), &bot.token).await;
    assert_eq!(t["state"], "succeeded");
    let steps: Vec<(&str, &str)> = t["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["from"].as_str().unwrap(), e["to"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [
            ("", "submitted"),
            ("submitted", "accepted"),
            ("accepted", "in_progress"),
            ("in_progress", "succeeded")
        ]
    );
    assert_eq!(t["timeline"][3]["envelope_id"], result["id"]);
    assert_eq!(t["constraints"]["progress_timeout_s"], 600);
    // The requester receives the result.
    assert!(
        h.poll(&bot, 0, 0)
            .await
            .iter()
            .any(|d| d["envelope"]["id"] == result["id"])
    );
    // WP-6.3-2: a late result is persisted, delivered, flagged late, and changes nothing.
    let late = followup(
        &h,
        &rev,
        &bot,
        &req,
        &task,
        "result",
        json!({"status": "failed"}),
    );
    assert_eq!(h.publish(&rev, &late).await.0, 202);
    let (_, t) = h.get(&format!("/v1/tasks/{task}"), &bot.token).await;
    assert_eq!(t["state"], "succeeded");
    assert_eq!(
        t["timeline"].as_array().unwrap().last().unwrap()["late"],
        true
    );
    // Only parties (and workspace admins) read the task.
    let outsider = h.agent("outsider").await;
    assert_eq!(
        h.get(&format!("/v1/tasks/{task}"), &outsider.token).await.0,
        404
    );
    assert_eq!(h.get(&format!("/v1/tasks/{task}"), &h.admin).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_6_2_forbidden_senders_and_inputs() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = h.worker("reviewer").await;
    let other = h.agent("other").await;
    let req = sign(&bot, request(&h, &bot, &rev, json!({})));
    let task = h.publish_task(&bot, &req).await;
    // The requester cannot accept; a third agent cannot send progress (AB-2004).
    let (s, v, _) = h
        .publish(
            &bot,
            &followup(&h, &bot, &rev, &req, &task, "accept", json!({})),
        )
        .await;
    assert_eq!((s, code(&v)), (403, "AB-2004"));
    assert_eq!(
        code(
            &h.publish(
                &other,
                &followup(&h, &other, &bot, &req, &task, "progress", json!({}))
            )
            .await
            .1
        ),
        "AB-2004"
    );
    // The worker cannot cancel (WP-5.7-1).
    assert_eq!(
        code(
            &h.publish(
                &rev,
                &followup(&h, &rev, &bot, &req, &task, "cancel", json!({}))
            )
            .await
            .1
        ),
        "AB-2004"
    );
    // task.input with no open question: AB-4020 (WP-5.7b-2).
    assert_eq!(
        code(
            &h.publish(
                &bot,
                &followup(&h, &bot, &rev, &req, &task, "input", json!({"answer": "x"}))
            )
            .await
            .1
        ),
        "AB-4020"
    );
    // A correlation that is not the request: AB-3017; an unknown task: AB-2004, as for a task of
    // other parties (§6.2; the answer never tells whether the task exists).
    let mut wrong = followup(&h, &rev, &bot, &req, &task, "accept", json!({}));
    wrong["correlation_id"] = json!("msg_01J9ZK7A0000000000000000A0");
    assert_eq!(
        code(&h.publish(&rev, &sign(&rev, wrong)).await.1),
        "AB-3017"
    );
    let ghost = followup(
        &h,
        &rev,
        &bot,
        &req,
        "tsk_01J9ZK8A0000000000000000T9",
        "accept",
        json!({}),
    );
    assert_eq!(code(&h.publish(&rev, &ghost).await.1), "AB-2004");
    // needs_input → input by the requester resumes (WP-5.7b-3).
    h.publish(
        &rev,
        &followup(&h, &rev, &bot, &req, &task, "accept", json!({})),
    )
    .await;
    h.publish(
        &rev,
        &followup(
            &h,
            &rev,
            &bot,
            &req,
            &task,
            "needs_input",
            json!({"question": "Which repository?", "options": ["muxr", "agentbus"]}),
        ),
    )
    .await;
    assert_eq!(state(&h, &bot, &task).await, "needs_input");
    // The list filter takes the protocol's name and the one the command line shipped first.
    for name in ["needs_input", "input_required"] {
        let (s, v) = h.get(&format!("/v1/tasks?state={name}"), &bot.token).await;
        assert_eq!(s, 200, "{name}: {v}");
        assert_eq!(v["tasks"][0]["id"], task.as_str(), "{name}: {v}");
    }
    // A progress while waiting is recorded and resumes nothing (WP-6.2-3).
    assert_eq!(
        h.publish(
            &rev,
            &followup(&h, &rev, &bot, &req, &task, "progress", json!({}))
        )
        .await
        .0,
        202
    );
    assert_eq!(state(&h, &bot, &task).await, "needs_input");
    assert_eq!(
        h.publish(
            &bot,
            &followup(
                &h,
                &bot,
                &rev,
                &req,
                &task,
                "input",
                json!({"answer": "agentbus"})
            )
        )
        .await
        .0,
        202
    );
    assert_eq!(state(&h, &bot, &task).await, "in_progress");
    // task.error changes nothing (WP-5.6-2).
    h.publish(
        &rev,
        &followup(
            &h,
            &rev,
            &bot,
            &req,
            &task,
            "error",
            json!({"code": "E1", "message": "retrying", "recoverable": false}),
        ),
    )
    .await;
    assert_eq!(state(&h, &bot, &task).await, "in_progress");
}

/// WP-6.1's notices are owed, not hoped for: a pass that fired a timer and stopped before its
/// notices (the gateway killed, the store failing after the timer's commit) leaves them owed in
/// the store, and the next pass sends each party its notice, once, rebuilt from the timeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_6_1_timer_notices_owed_by_a_pass_that_stopped_go_with_the_next_once() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = h.worker("reviewer").await;
    let req = sign(
        &bot,
        request(&h, &bot, &rev, json!({"progress_timeout_s": 60})),
    );
    let task = h.publish_task(&bot, &req).await;
    let accept = followup(&h, &rev, &bot, &req, &task, "accept", json!({}));
    assert_eq!(h.publish(&rev, &accept).await.0, 202);
    h.clock.advance_secs(60);
    let from_tasks = |got: Vec<serde_json::Value>| -> Vec<serde_json::Value> {
        got.into_iter()
            .filter(|d| d["envelope"]["source"] == "agent://system/gateway/tasks")
            .collect()
    };
    // The timer's commit alone, as a pass that stopped right after it leaves the store.
    assert_eq!(
        agentbus_gateway::testing::fire_due(&h.app).await.unwrap(),
        1
    );
    assert_eq!(state(&h, &bot, &task).await, "expired");
    for party in [&bot, &rev] {
        assert!(
            from_tasks(h.poll(party, 0, 0).await).is_empty(),
            "no notice yet"
        );
    }
    h.app.reap().await.unwrap();
    for party in [&bot, &rev] {
        let got = from_tasks(h.poll(party, 0, 0).await);
        assert_eq!(got.len(), 1, "{got:?}");
        let context = &got[0]["envelope"]["data"]["context"];
        assert_eq!(
            (context["timer"].as_str(), context["last_state"].as_str()),
            (Some("progress_timeout"), Some("accepted"))
        );
    }
    h.app.reap().await.unwrap();
    for party in [&bot, &rev] {
        assert!(
            from_tasks(h.poll(party, 0, 0).await).is_empty(),
            "sent once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_6_1_timers_fire_on_the_test_clock_with_notices() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = h.worker("reviewer").await;
    // Accept timeout: 120 s → expired, the requester gets system.expired.
    let req = sign(
        &bot,
        request(&h, &bot, &rev, json!({"accept_timeout_s": 120})),
    );
    let t1 = h.publish_task(&bot, &req).await;
    h.clock.advance_secs(119);
    h.app.reap().await.unwrap();
    assert_eq!(state(&h, &bot, &t1).await, "submitted");
    h.clock.advance_secs(1);
    h.app.reap().await.unwrap();
    let (_, t) = h.get(&format!("/v1/tasks/{t1}"), &bot.token).await;
    assert_eq!(t["state"], "expired");
    let last = t["timeline"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["actor"].as_str(), last["timer"].as_str()),
        (Some("system"), Some("accept_timeout")),
        "WP-6.1-7"
    );
    let notice = h
        .poll(&bot, 0, 0)
        .await
        .into_iter()
        .find(|d| d["envelope"]["type"] == "agentbus.system.expired.v1")
        .unwrap();
    assert_eq!(notice["envelope"]["data"]["reason"], "accept_timeout");
    assert_eq!(notice["envelope"]["data"]["original_message_id"], req["id"]);
    // Routed to the worker's inbox, never taken by its sidecar; the notice validates against
    // its registry schema (G-WP-8's `last_state` enum included).
    assert_eq!(notice["envelope"]["data"]["last_state"], "routed");
    let env =
        agentbus_protocol::envelope::Envelope::parse(notice["envelope"].to_string().as_bytes())
            .unwrap();
    assert_eq!(env.validate(Default::default()), vec![]);
    // Taken by the worker's sidecar (acked) and still not accepted: delivered, and the frame
    // a session sees names the accept timeout rather than an undelivered message.
    let req = sign(
        &bot,
        request(&h, &bot, &rev, json!({"accept_timeout_s": 120})),
    );
    let t0 = h.publish_task(&bot, &req).await;
    let copy = h
        .poll(&rev, 0, 0)
        .await
        .into_iter()
        .find(|d| d["envelope"]["id"] == req["id"])
        .unwrap();
    assert_eq!(h.ack(&rev, &copy).await.0, 200);
    h.clock.advance_secs(120);
    h.app.reap().await.unwrap();
    let notice = h
        .poll(&bot, 0, 0)
        .await
        .into_iter()
        .find(|d| d["envelope"]["data"]["task_id"] == json!(t0))
        .unwrap();
    assert_eq!(notice["envelope"]["data"]["last_state"], "delivered");
    let env =
        agentbus_protocol::envelope::Envelope::parse(notice["envelope"].to_string().as_bytes())
            .unwrap();
    let framed = agentbus_protocol::frame::envelope_body(&env);
    assert!(
        framed.starts_with(&format!("Expired: nobody accepted task {t0}")),
        "{framed}"
    );
    // Progress timeout: both parties get a message.v1 from agent://system/gateway/tasks.
    let req = sign(
        &bot,
        request(&h, &bot, &rev, json!({"progress_timeout_s": 60})),
    );
    let t2 = h.publish_task(&bot, &req).await;
    h.publish(
        &rev,
        &followup(&h, &rev, &bot, &req, &t2, "accept", json!({})),
    )
    .await;
    h.clock.advance_secs(60);
    h.app.reap().await.unwrap();
    assert_eq!(state(&h, &bot, &t2).await, "expired");
    for party in [&bot, &rev] {
        let got = h.poll(party, 0, 0).await;
        assert!(
            got.iter().any(
                |d| d["envelope"]["source"] == "agent://system/gateway/tasks"
                    && d["envelope"]["data"]["context"]["task_id"] == json!(t2)
            ),
            "{}",
            party.address
        );
    }
    // A late result after expiry is delivered and flagged late (WP-6.3-2).
    let late = followup(
        &h,
        &rev,
        &bot,
        &req,
        &t2,
        "result",
        json!({"status": "succeeded"}),
    );
    assert_eq!(h.publish(&rev, &late).await.0, 202);
    let (_, t) = h.get(&format!("/v1/tasks/{t2}"), &bot.token).await;
    assert_eq!(
        (
            t["state"].as_str(),
            t["timeline"].as_array().unwrap().last().unwrap()["late"].as_bool()
        ),
        (Some("expired"), Some(true))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_7_cancel_acknowledged_and_cancel_by_grace() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = h.worker("reviewer").await;
    // Before accept: immediate.
    let req = sign(&bot, request(&h, &bot, &rev, json!({})));
    let t0 = h.publish_task(&bot, &req).await;
    h.publish(
        &bot,
        &followup(
            &h,
            &bot,
            &rev,
            &req,
            &t0,
            "cancel",
            json!({"reason": "not needed"}),
        ),
    )
    .await;
    assert_eq!(state(&h, &bot, &t0).await, "cancelled");
    // Acknowledged by the worker's failed/cancelled result.
    let req = sign(&bot, request(&h, &bot, &rev, json!({})));
    let t1 = h.publish_task(&bot, &req).await;
    h.publish(
        &rev,
        &followup(&h, &rev, &bot, &req, &t1, "accept", json!({})),
    )
    .await;
    h.publish(
        &bot,
        &followup(&h, &bot, &rev, &req, &t1, "cancel", json!({})),
    )
    .await;
    assert_eq!(state(&h, &bot, &t1).await, "accepted");
    h.publish(
        &rev,
        &followup(
            &h,
            &rev,
            &bot,
            &req,
            &t1,
            "result",
            json!({"status": "failed", "failure": {"code": "cancelled"}}),
        ),
    )
    .await;
    assert_eq!(state(&h, &bot, &t1).await, "cancelled");
    // Ran out its grace.
    let req = sign(&bot, request(&h, &bot, &rev, json!({})));
    let t2 = h.publish_task(&bot, &req).await;
    h.publish(
        &rev,
        &followup(&h, &rev, &bot, &req, &t2, "accept", json!({})),
    )
    .await;
    h.publish(
        &bot,
        &followup(&h, &bot, &rev, &req, &t2, "cancel", json!({})),
    )
    .await;
    h.clock.advance_secs(59);
    h.app.reap().await.unwrap();
    assert_eq!(state(&h, &bot, &t2).await, "accepted");
    h.clock.advance_secs(1);
    h.app.reap().await.unwrap();
    assert_eq!(state(&h, &bot, &t2).await, "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_6_1_3_max_duration_and_wp_6_1_4_expires_at_over_http() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = h.worker("reviewer").await;
    // Max duration: 60 s from accept, despite steady progress.
    let req = sign(
        &bot,
        request(
            &h,
            &bot,
            &rev,
            json!({"max_duration_s": 60, "progress_timeout_s": 30}),
        ),
    );
    let t1 = h.publish_task(&bot, &req).await;
    h.publish(
        &rev,
        &followup(&h, &rev, &bot, &req, &t1, "accept", json!({})),
    )
    .await;
    for _ in 0..2 {
        h.clock.advance_secs(25);
        h.publish(
            &rev,
            &followup(&h, &rev, &bot, &req, &t1, "progress", json!({})),
        )
        .await;
        h.app.reap().await.unwrap();
        assert_eq!(state(&h, &bot, &t1).await, "in_progress");
    }
    h.clock.advance_secs(10);
    h.app.reap().await.unwrap();
    let (_, t) = h.get(&format!("/v1/tasks/{t1}"), &bot.token).await;
    assert_eq!(
        (
            t["state"].as_str(),
            t["timeline"].as_array().unwrap().last().unwrap()["timer"].as_str()
        ),
        (Some("expired"), Some("max_duration"))
    );
    // expires_at while needs_input (G-WP-7: it bounds every non-terminal state).
    let req = request_expiring_in(&h, &bot, &rev, 300);
    let t2 = h.publish_task(&bot, &req).await;
    h.publish(
        &rev,
        &followup(&h, &rev, &bot, &req, &t2, "accept", json!({})),
    )
    .await;
    h.publish(
        &rev,
        &followup(
            &h,
            &rev,
            &bot,
            &req,
            &t2,
            "needs_input",
            json!({"question": "which branch?"}),
        ),
    )
    .await;
    h.clock.advance_secs(301);
    h.app.reap().await.unwrap();
    let (_, t) = h.get(&format!("/v1/tasks/{t2}"), &bot.token).await;
    assert_eq!(
        (
            t["state"].as_str(),
            t["timeline"].as_array().unwrap().last().unwrap()["timer"].as_str()
        ),
        (Some("expired"), Some("expires_at"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_7_1_a_workspace_admin_cancels_through_the_console() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = h.worker("reviewer").await;
    let req = sign(&bot, request(&h, &bot, &rev, json!({})));
    let task = h.publish_task(&bot, &req).await;
    // An agent cannot use the console endpoint; a member user who is not admin cannot either.
    assert_eq!(
        h.post(&format!("/v1/tasks/{task}/cancel"), &bot.token, json!({}))
            .await
            .0,
        403
    );
    let (_, member) = h
        .post(
            "/v1/users",
            &h.admin,
            json!({"name": "member", "role": "member"}),
        )
        .await;
    let (s, v) = h
        .post(
            &format!("/v1/tasks/{task}/cancel"),
            member["token"].as_str().unwrap(),
            json!({}),
        )
        .await;
    assert_eq!((s, code(&v)), (403, "AB-2004"));
    let (s, t) = h
        .post(
            &format!("/v1/tasks/{task}/cancel"),
            &h.admin,
            json!({"reason": "freeze"}),
        )
        .await;
    assert_eq!((s, t["state"].as_str()), (200, Some("cancelled")));
    let last = t["timeline"].as_array().unwrap().last().unwrap().clone();
    assert!(last["actor"].as_str().unwrap().starts_with("user:usr_"));
    assert_eq!(
        last["reason"], "freeze",
        "the reason is on the timeline entry"
    );
    // Both parties are told, and told it was this admin, not the requester.
    for party in [&bot, &rev] {
        let got = h.poll(party, 0, 0).await;
        let cancel = got
            .iter()
            .map(|d| &d["envelope"])
            .find(|e| e["type"] == "agentbus.task.cancel.v1" && e["data"]["reason"] == "freeze")
            .expect("a cancel notice");
        assert_eq!(cancel["data"]["cancelled_by"]["role"], "admin");
        let env =
            agentbus_protocol::envelope::Envelope::parse(cancel.to_string().as_bytes()).unwrap();
        let body = agentbus_protocol::frame::envelope_body(&env);
        assert!(
            body.starts_with("An admin (") && body.ends_with("cancelled this task. Reason: freeze"),
            "{body}"
        );
    }
}

/// An admin's cancel owes its `task.cancel` notices in its own commit: when the route stops right
/// after it (here its first half alone, as a crash leaves the store), the reaper's next pass sends
/// them, with the admin's reason, once; also when the cancel grace timer fired in between (it
/// owes nothing itself, so the pass looks past it on the timeline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_7_1_an_admin_cancels_notices_owed_by_a_route_that_stopped_go_with_the_next_pass_once()
{
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = h.worker("reviewer").await;
    let req = sign(&bot, request(&h, &bot, &rev, json!({})));
    let task = h.publish_task(&bot, &req).await;
    let accept = followup(&h, &rev, &bot, &req, &task, "accept", json!({}));
    assert_eq!(h.publish(&rev, &accept).await.0, 202);
    let admin = admin_user(&h).await;
    let cancels = |got: Vec<Value>| -> Vec<Value> {
        got.into_iter()
            .filter(|d| d["envelope"]["type"] == "agentbus.task.cancel.v1")
            .collect()
    };
    let outcome =
        agentbus_gateway::testing::apply_admin_cancel(&h.app, &admin, &task, Some("freeze"))
            .await
            .unwrap();
    assert!(outcome.cancel_requested, "accepted: the worker is asked");
    for party in [&bot, &rev] {
        assert!(
            cancels(h.poll(party, 0, 0).await).is_empty(),
            "no notice yet"
        );
    }
    // The grace period runs out before the next pass: the pass fires it first.
    h.clock.advance_secs(61);
    h.app.reap().await.unwrap();
    assert_eq!(state(&h, &bot, &task).await, "cancelled");
    for party in [&bot, &rev] {
        let got = cancels(h.poll(party, 0, 0).await);
        assert_eq!(got.len(), 1, "{got:?}");
        let env = &got[0]["envelope"];
        assert_eq!(env["source"], "agent://system/gateway/tasks");
        assert_eq!(
            (
                env["data"]["task_id"].as_str(),
                env["data"]["reason"].as_str()
            ),
            (Some(task.as_str()), Some("freeze"))
        );
        // The pass names the admin from the timeline entry, as the route does.
        assert_eq!(env["data"]["cancelled_by"]["user_id"], json!(admin.id));
        assert_eq!(env["data"]["cancelled_by"]["name"], json!(admin.name));
    }
    h.app.reap().await.unwrap();
    for party in [&bot, &rev] {
        assert!(cancels(h.poll(party, 0, 0).await).is_empty(), "sent once");
    }
    let (_, t) = h.get(&format!("/v1/tasks/{task}"), &h.admin).await;
    let reasons: Vec<&Value> = t["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["reason"])
        .collect();
    assert!(reasons.contains(&&json!("freeze")), "{t}");
}

/// A signed task request from `from` to `to` whose `expires_at` is `secs` from now.
fn request_expiring_in(h: &Harness, from: &Agent, to: &Agent, secs: i64) -> Map<String, Value> {
    let mut req = request(h, from, to, json!({}));
    let at = h.now().plus_secs(secs).to_string();
    req.insert("expires_at".into(), json!(at));
    sign(from, req)
}

/// The principal of the harness's admin token, as the console's routes see it.
async fn admin_user(h: &Harness) -> agentbus_store::UserRow {
    let mut headers = axum::http::HeaderMap::new();
    let bearer = format!("Bearer {}", h.admin).parse().unwrap();
    headers.insert("authorization", bearer);
    match agentbus_gateway::testing::bearer(&h.app, &headers)
        .await
        .unwrap()
    {
        agentbus_gateway::Principal::User(admin) => admin,
        _ => panic!("the admin token is a user's"),
    }
}

/// WP-5.7-1 with WP-6.1-4: a task an admin cancelled whose `expires_at` fires in the grace period,
/// before the cancel's notices went, owes both: each party gets the cancel (with its reason) and
/// the expiry, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_6_1_4_a_timer_firing_while_an_admin_cancels_notices_are_owed_owes_both() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = h.worker("reviewer").await;
    let req = request_expiring_in(&h, &bot, &rev, 30);
    let task = h.publish_task(&bot, &req).await;
    let accept = followup(&h, &rev, &bot, &req, &task, "accept", json!({}));
    assert_eq!(h.publish(&rev, &accept).await.0, 202);
    let admin = admin_user(&h).await;
    let cancel =
        agentbus_gateway::testing::apply_admin_cancel(&h.app, &admin, &task, Some("freeze"));
    assert!(cancel.await.unwrap().cancel_requested);
    h.clock.advance_secs(31);
    h.app.reap().await.unwrap();
    assert_eq!(state(&h, &bot, &task).await, "expired");
    let from_tasks = |got: Vec<Value>| -> Vec<(String, Value)> {
        got.into_iter()
            .filter(|d| d["envelope"]["source"] == "agent://system/gateway/tasks")
            .map(|d| {
                let env = &d["envelope"];
                let what = match env["type"].as_str().unwrap() {
                    "agentbus.task.cancel.v1" => env["data"]["reason"].clone(),
                    _ => env["data"]["context"]["timer"].clone(),
                };
                (env["type"].as_str().unwrap().to_owned(), what)
            })
            .collect()
    };
    for party in [&bot, &rev] {
        let mut got = from_tasks(h.poll(party, 0, 0).await);
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            got,
            [
                ("agentbus.message.v1".to_owned(), json!("expires_at")),
                ("agentbus.task.cancel.v1".to_owned(), json!("freeze")),
            ]
        );
    }
    h.app.reap().await.unwrap();
    for party in [&bot, &rev] {
        assert_eq!(from_tasks(h.poll(party, 0, 0).await), [], "sent once");
    }
}

/// The data a lifecycle type is sent with in the addressing table.
fn lifecycle_data(kind: &str) -> Value {
    match kind {
        "needs_input" => json!({"question": "Which repository?"}),
        "input" => json!({"answer": "agentbus"}),
        "result" => json!({"status": "succeeded", "summary": "done"}),
        "error" => json!({"code": "E1", "message": "retrying"}),
        _ => json!({}),
    }
}

/// WP-6.2-2, WP-5.7-1, WP-5.7b-2, WP-7-3: every row of `tests/data/tasks/addressing.table`. A
/// lifecycle message goes from the party §6.2 names to the other party, in the task's
/// conversation; anything else is refused and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_6_2_2_wp_7_3_lifecycle_messages_go_between_the_parties_in_the_tasks_conversation() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = h.worker("reviewer").await;
    let by = h.agent("bystander").await;
    let (s, _) = h
        .req(
            reqwest::Method::PUT,
            "/v1/topics/task-news/subscription",
            &by.token,
            None,
        )
        .await;
    assert_eq!(s, 200);
    let topic = "topic://default/default/task-news";
    let agents = [(&bot, "requester"), (&rev, "recipient"), (&by, "bystander")];
    let pending = || async {
        let mut v = Vec::new();
        for (a, _) in agents {
            v.push(h.app.store().pending_count(&a.id).await.unwrap());
        }
        v
    };
    let mut rows = 0;
    for (n, line) in include_str!("../data/tasks/addressing.table")
        .lines()
        .enumerate()
    {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = format!("addressing.table line {}: {line}", n + 1);
        let c: Vec<&str> = line.split_whitespace().collect();
        let [kind, sender, to, conversation, expect] = c[..] else {
            panic!("{at}: five columns");
        };
        let party = |role: &str| agents.iter().find(|(_, r)| *r == role).map(|(a, _)| *a);
        // A fresh task in the state this type needs.
        let req = sign(&bot, request(&h, &bot, &rev, json!({})));
        let (s, receipt, _) = h.publish(&bot, &req).await;
        assert_eq!(s, 202, "{at}: {receipt}");
        let task = receipt["task_id"].as_str().unwrap().to_owned();
        if kind != "accept" {
            let accept = followup(&h, &rev, &bot, &req, &task, "accept", json!({}));
            assert_eq!(h.publish(&rev, &accept).await.0, 202, "{at}");
        }
        if kind == "input" {
            let ask = followup(
                &h,
                &rev,
                &bot,
                &req,
                &task,
                "needs_input",
                lifecycle_data("needs_input"),
            );
            assert_eq!(h.publish(&rev, &ask).await.0, 202, "{at}");
        }
        let from = party(sender).unwrap_or_else(|| panic!("{at}: sender"));
        let mut env = followup(&h, from, &bot, &req, &task, kind, lifecycle_data(kind));
        env["to"] = json!(match party(to) {
            Some(a) => a.address.clone(),
            None => topic.to_owned(),
        });
        if conversation == "new" {
            env["conversation_id"] = json!(
                agentbus_runtime::mint(agentbus_protocol::ids::IdKind::Conversation).to_string()
            );
        }
        let env = sign(from, env);
        let (_, before) = h.get(&format!("/v1/tasks/{task}"), &bot.token).await;
        let inboxes = pending().await;
        let (s, v, _) = h.publish(from, &env).await;
        let (_, after) = h.get(&format!("/v1/tasks/{task}"), &bot.token).await;
        if expect == "202" {
            assert_eq!(s, 202, "{at}: {v}");
            assert_eq!(
                after["timeline"].as_array().unwrap().len(),
                before["timeline"].as_array().unwrap().len() + 1,
                "{at}"
            );
        } else {
            assert_eq!(code(&v), expect, "{at}: {v}");
            assert!((400..500).contains(&s), "{at}: {s}");
            assert_eq!(after["state"], before["state"], "{at}: state changed");
            assert_eq!(
                after["timeline"], before["timeline"],
                "{at}: timeline changed"
            );
            assert_eq!(
                pending().await,
                inboxes,
                "{at}: an inbox got the refused envelope"
            );
        }
        rows += 1;
    }
    assert!(rows >= 40, "{rows} rows");
    // The cancel to a bystander: refused above, so the grace period never cancels a task
    // the worker was not told about.
}

/// A card whose capability declares this input schema.
async fn schema_worker(h: &Harness, name: &str) -> Agent {
    h.agent_with(
        name,
        json!({"capabilities": [{
            "name": "code.review",
            "version": "1",
            "input_schema": {
                "type": "object",
                "required": ["artifact_id"],
                "properties": {"artifact_id": {"type": "string"}, "revision": {"type": "integer"}}
            },
            "output_schema": {"type": "object", "required": ["findings"]}
        }]}),
    )
    .await
}

/// WP-5.2-7: `data.input` is validated against the declared `input_schema`; violations are listed
/// with JSON pointers, and a refused request makes no task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_2_7_input_is_validated_against_the_capabilitys_input_schema() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = schema_worker(&h, "reviewer").await;
    for (input, paths) in [
        (Some(json!({})), vec!["/data/input"]),
        (None, vec!["/data/input"]),
        (
            Some(json!({"artifact_id": 5})),
            vec!["/data/input/artifact_id"],
        ),
        (
            Some(json!({"artifact_id": 5, "revision": "seven"})),
            vec!["/data/input/artifact_id", "/data/input/revision"],
        ),
    ] {
        let mut req = request(&h, &bot, &rev, json!({}));
        if let Some(i) = &input {
            req["data"]["input"] = i.clone();
        }
        let (s, v, _) = h.publish(&bot, &sign(&bot, req)).await;
        assert_eq!((s, code(&v)), (422, "AB-3024"), "{input:?}: {v}");
        let got: Vec<&str> = v["error"]["details"]["violations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["path"].as_str().unwrap())
            .collect();
        assert_eq!(got, paths, "{input:?}");
    }
    assert_eq!(h.get("/v1/tasks", &bot.token).await.1["tasks"], json!([]));
    let mut req = request(&h, &bot, &rev, json!({}));
    req["data"]["input"] = json!({"artifact_id": "change-482", "revision": 7});
    assert_eq!(h.publish(&bot, &sign(&bot, req)).await.0, 202);
}

/// §5.2, §10: a request names a capability and major version the recipient's card declares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_2_7_a_request_names_a_capability_the_recipient_declares() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = h.worker("reviewer").await;
    let idle = h.agent("idle").await;
    for (to, capability, version) in [
        (&rev, "code.summarise", "1"),
        (&rev, "code.review", "2"),
        (&idle, "code.review", "1"),
    ] {
        let mut req = request(&h, &bot, to, json!({}));
        req["capability"] = json!(capability);
        req["capability_version"] = json!(version);
        let (s, v, _) = h.publish(&bot, &sign(&bot, req)).await;
        assert_eq!(
            (s, code(&v)),
            (422, "AB-4015"),
            "{capability} v{version}: {v}"
        );
    }
    assert_eq!(h.get("/v1/tasks", &bot.token).await.1["tasks"], json!([]));
}

/// §10: a card's `input_schema` and `output_schema` must be JSON Schemas the gateway can compile
/// without fetching anything; a refused card changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_10_capability_schemas_must_be_valid_when_a_card_is_saved() {
    let h = Harness::start().await;
    let rev = h.worker("reviewer").await;
    let path = format!("/v1/agents/{}", rev.id);
    let (_, before) = h.get(&path, &rev.token).await;
    for (caps, pointer) in [
        (
            json!([{"name": "code.review", "version": "1", "input_schema": {"type": "nothing"}}]),
            "/capabilities/0/input_schema",
        ),
        (
            json!([{"name": "code.review", "version": "1", "output_schema": {"$ref": "https://example.com/findings.json"}}]),
            "/capabilities/0/output_schema",
        ),
        (
            json!([{"name": "code.review", "version": "1", "input_schema": "object"}]),
            "/capabilities/0/input_schema",
        ),
        (
            json!([{"name": "Code Review", "version": "1"}]),
            "/capabilities/0/name",
        ),
        (
            json!([{"name": "code.review", "version": 1}]),
            "/capabilities/0/version",
        ),
        (
            json!([{"name": "code.review", "version": "1"}, {"name": "code.review", "version": "1"}]),
            "/capabilities/1",
        ),
        (json!({"name": "code.review"}), "/capabilities"),
    ] {
        let (s, v) = h
            .req(
                reqwest::Method::PATCH,
                &path,
                &rev.token,
                Some(json!({"capabilities": caps})),
            )
            .await;
        assert_eq!((s, code(&v)), (422, "AB-3025"), "{caps}: {v}");
        assert_eq!(
            v["error"]["details"]["violations"][0]["path"], pointer,
            "{caps}"
        );
    }
    let (_, after) = h.get(&path, &rev.token).await;
    assert_eq!(after["capabilities"], before["capabilities"]);
    assert_eq!(after["updated_at"], before["updated_at"]);
    // Registration is refused the same way, and registers nothing.
    let (s, v) = h
        .post("/v1/agents", &h.admin, json!({"name": "broken", "capabilities": [{"name": "a.b", "version": "1", "input_schema": {"minimum": "five"}}]}))
        .await;
    assert_eq!((s, code(&v)), (422, "AB-3025"), "{v}");
    let (_, list) = h.get("/v1/agents", &h.admin).await;
    assert!(
        list["agents"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != "broken")
    );
}

/// G-WP-37 (docs/protocol.md): a succeeded result's `output` is checked against the capability's
/// `output_schema` and the request's `constraints.output_schema`, advisorily: the result applies
/// and the timeline entry carries the findings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_2_6_output_schemas_are_checked_on_the_timeline_not_refused() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let rev = schema_worker(&h, "reviewer").await;
    let mut req = request(
        &h,
        &bot,
        &rev,
        json!({"output_schema": {"type": "object", "properties": {"score": {"type": "number"}}}}),
    );
    req["data"]["input"] = json!({"artifact_id": "change-482"});
    let req = sign(&bot, req);
    let task = h.publish_task(&bot, &req).await;
    h.publish(
        &rev,
        &followup(&h, &rev, &bot, &req, &task, "accept", json!({})),
    )
    .await;
    let result = followup(
        &h,
        &rev,
        &bot,
        &req,
        &task,
        "result",
        json!({"status": "succeeded", "output": {"score": "high"}}),
    );
    assert_eq!(h.publish(&rev, &result).await.0, 202);
    let (_, t) = h.get(&format!("/v1/tasks/{task}"), &bot.token).await;
    assert_eq!(t["state"], "succeeded");
    let last = t["timeline"].as_array().unwrap().last().unwrap().clone();
    let found: Vec<(&str, &str)> = last["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["schema"].as_str().unwrap(), w["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        found,
        [
            ("capability", "/data/output"),
            ("request", "/data/output/score")
        ]
    );
    // Earlier entries carry none.
    assert_eq!(t["timeline"][0]["warnings"], json!([]));
}
