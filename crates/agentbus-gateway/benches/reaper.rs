//! One reaper pass with 100,000 open tasks (issue: task lifecycle; target under 50 ms).
//!
//! `cargo bench -p agentbus-gateway --bench reaper`. Tasks are stored through the store's publish
//! path (each with its request message), with deadlines spread over the next hour; the pass is
//! timed when nothing is due (the common case) and when 1,000 tasks are due at once.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::Instant;

use agentbus_gateway::{Config, Gateway};
use agentbus_protocol::ids::IdKind;
use agentbus_protocol::task::{Task, TaskLimits};
use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::ManualClock;
use agentbus_store::*;

const T0: i64 = 1_795_000_000_000;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tmp = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(Timestamp(T0));
        let mut config = Config::new("127.0.0.1:0".parse().unwrap(), tmp.path().join("gw"));
        config.reaper_interval_ms = 0;
        let gw = Gateway::open(config, Arc::new(clock.clone())).await.unwrap();
        let app = gw.app.clone();
        let tenant = app.store().tenants().await.unwrap().remove(0);
        let n = 100_000usize;
        let started = Instant::now();
        let mut pending = Vec::new();
        for i in 0..n {
            let app = app.clone();
            let tenant_id = tenant.id.clone();
            pending.push(tokio::spawn(async move {
                // Deadlines spread over the next hour: accept timeouts from 60 s to 3,600 s.
                let accept = 60 + (i as i64 * 3540 / n as i64);
                let limits = TaskLimits { accept_timeout_s: accept, progress_timeout_s: 900, max_duration_s: None, expires_at: Timestamp(T0 + 86_400_000) };
                let m = Task::new(limits, Timestamp(T0));
                let id = app.mint(IdKind::Task);
                let msg = app.mint(IdKind::Message);
                let row = TaskRow {
                    id: id.clone(), tenant_id: tenant_id.clone(), workspace_id: "ws".into(), requester_id: "agt_a".into(),
                    recipient_id: "agt_b".into(), request_id: msg.clone(), conversation_id: "cnv".into(), capability: "code.review".into(),
                    state: "submitted".into(), terminal: false,
                    machine: format!(r#"{{"state":"submitted","accept_timeout_s":{accept},"progress_timeout_s":900,"max_duration_s":null,"expires_at":{},"received_at":{T0},"accepted_at":null,"last_activity":null,"cancel_requested_at":null}}"#, T0 + 86_400_000),
                    next_deadline: m.next_deadline().map(Timestamp::millis), created_at: T0, updated_at: T0, version: 0,
                };
                let ev = TaskEventRow { at: T0, actor: "agent:agt_a".into(), envelope_id: Some(msg.clone()), kind: "agentbus.task.request.v1".into(), from_state: String::new(), to_state: "submitted".into(), flag: None, timer: None, warnings: None, reason: None };
                app.store()
                    .publish(NewMessage {
                        tenant_id, id: msg, source: "agent://default/default/bench".into(), source_agent_id: None, kind: "agentbus.task.request.v1".into(),
                        conversation_id: "cnv".into(), correlation_id: None, to_text: "agt_b".into(), to_id: "agt_b".into(), attrs: "{}".into(),
                        data: vec![], signed_hash: vec![], idempotency: None, receipt: app.mint(IdKind::Receipt), received_at: T0, expires_at: T0 + 86_400_000,
                        task_id: Some(id), task: Some(TaskWrite::Create(row, ev)), recipients: vec![], blob_refs: vec![], replay_since: T0, idempotency_since: T0, max_depth: None, usage: None, notice_of: None, search_tags: String::new(),
                    })
                    .await
                    .unwrap();
            }));
            if pending.len() == 2000 {
                for p in pending.drain(..) {
                    p.await.unwrap();
                }
            }
        }
        for p in pending {
            p.await.unwrap();
        }
        println!("stored {n} open tasks in {:.1} s", started.elapsed().as_secs_f64());
        let mut idle = Vec::new();
        for _ in 0..50 {
            let t = Instant::now();
            app.reap().await.unwrap();
            idle.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        idle.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("reaper pass, 100,000 open tasks, none due: median {:.3} ms, max {:.3} ms", idle[idle.len() / 2], idle[idle.len() - 1]);
        // Move the clock so the first 1,000 accept timeouts (those within 95.4 s) are due.
        clock.advance_secs(95);
        let t = Instant::now();
        app.reap().await.unwrap();
        println!("reaper pass with ~1,000 tasks due (each expired and recorded): {:.1} ms", t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        app.reap().await.unwrap();
        println!("the next pass, nothing due again: {:.3} ms", t.elapsed().as_secs_f64() * 1000.0);
    });
}
