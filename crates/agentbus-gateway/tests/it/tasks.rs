//! Tasks over HTTP (§6): the §12.2 lifecycle, sender rules, timers driven by the test clock, late
//! results, cancels, idempotent requests, and the timeline.

use serde_json::{Map, Value, json};

use crate::support::*;

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

fn request(h: &Harness, from: &Agent, to: &Agent, constraints: Value) -> Map<String, Value> {
    let mut m = message(h, from, &to.address, "");
    m["type"] = json!("agentbus.task.request.v1");
    m["schema"] = json!("https://komsary.agentbus.exchange/schemas/agentbus.task.request/v1.json");
    m.insert("capability".into(), json!("code.review"));
    m.insert("capability_version".into(), json!("1"));
    m["data"] = json!({"instructions": "Review change 482 for concurrency bugs.", "constraints": constraints});
    m
}

/// A lifecycle message from `from` about the task of `req`.
fn followup(
    h: &Harness,
    from: &Agent,
    to: &Agent,
    req: &Map<String, Value>,
    task: &str,
    kind: &str,
    data: Value,
) -> Map<String, Value> {
    let mut m = message(h, from, &to.address, "");
    m["type"] = json!(format!("agentbus.task.{kind}.v1"));
    m["schema"] = json!(format!(
        "https://komsary.agentbus.exchange/schemas/agentbus.task.{kind}/v1.json"
    ));
    m["conversation_id"] = req["conversation_id"].clone();
    m.insert("correlation_id".into(), req["id"].clone());
    let mut data = data;
    data["task_id"] = json!(task);
    m["data"] = data;
    sign(from, m)
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
    let task = h.publish(&bot, &req).await.1["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
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
    let t1 = h.publish(&bot, &req).await.1["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
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
    // Progress timeout: both parties get a message.v1 from agent://system/gateway/tasks.
    let req = sign(
        &bot,
        request(&h, &bot, &rev, json!({"progress_timeout_s": 60})),
    );
    let t2 = h.publish(&bot, &req).await.1["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
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
    let t0 = h.publish(&bot, &req).await.1["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
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
    let t1 = h.publish(&bot, &req).await.1["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
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
    let t2 = h.publish(&bot, &req).await.1["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
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
    let t1 = h.publish(&bot, &req).await.1["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
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
    let mut req = request(&h, &bot, &rev, json!({}));
    req.insert(
        "expires_at".into(),
        json!(h.now().plus_secs(300).to_string()),
    );
    let req = sign(&bot, req);
    let t2 = h.publish(&bot, &req).await.1["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
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
    let task = h.publish(&bot, &req).await.1["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
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
    // Both parties are told.
    for party in [&bot, &rev] {
        assert!(
            h.poll(party, 0, 0)
                .await
                .iter()
                .any(|d| d["envelope"]["type"] == "agentbus.task.cancel.v1"
                    && d["envelope"]["data"]["reason"] == "freeze")
        );
    }
}
