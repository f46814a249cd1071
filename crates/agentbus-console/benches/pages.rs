//! Console page latency with 10,000 messages and 1,000 tasks in the store (p99 under
//! 50 ms).
//!
//! `cargo bench -p agentbus-console --bench pages`. A real gateway with its console on loopback
//! over a real SQLite file; the store is filled through the HTTP API with signed envelopes: 400
//! conversations of 20 messages among 20 agents (each with its delivery state: half the inboxes
//! acknowledged) and 1,000 `code.review` tasks, of which 500 accepted, 250 with a progress report
//! and 250 finished with usage and cost (10,000 messages in all). A tenant admin's session then
//! fetches every page, one request at a time, and the latency of each is reported as p50, p99 and
//! max over its requests. The harness is the console tests' own (`agentbus_testkit::console`).

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::Instant;

use serde_json::json;

use agentbus_testkit::console::*;

const AGENTS: usize = 20;
const CONVERSATIONS: usize = 400;
const PER_CONVERSATION: usize = 20;
const TASKS: usize = 1_000;
const ROUNDS: usize = 200;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs `jobs` at most `width` at a time.
async fn in_batches<F>(jobs: Vec<F>, width: usize)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let mut pending = Vec::new();
    for j in jobs {
        pending.push(tokio::spawn(j));
        if pending.len() == width {
            for p in pending.drain(..) {
                p.await.unwrap();
            }
        }
    }
    for p in pending {
        p.await.unwrap();
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let w = std::sync::Arc::new(World::start().await);
        let started = Instant::now();
        let mut agents = Vec::new();
        for i in 0..AGENTS {
            agents.push(
                w.agent(
                    &w.admin,
                    &format!("bench-{i}"),
                    json!({"capabilities": [{"name": "code.review", "version": "1"}]}),
                )
                .await,
            );
        }
        let agents = std::sync::Arc::new(agents);

        // Conversations: each between two agents, alternating sender.
        let mut jobs = Vec::new();
        let mut sample_conversation = String::new();
        for c in 0..CONVERSATIONS {
            let (a, b) = (c % AGENTS, (c * 7 + 1) % AGENTS);
            let b = if a == b { (b + 1) % AGENTS } else { b };
            let cnv = agentbus_runtime::mint(agentbus_protocol::ids::IdKind::Conversation).to_string();
            if c == 0 {
                sample_conversation = cnv.clone();
            }
            let (w, agents) = (w.clone(), agents.clone());
            jobs.push(async move {
                for m in 0..PER_CONVERSATION {
                    let (from, to) = if m % 2 == 0 { (a, b) } else { (b, a) };
                    let mut env = w.draft(&agents[from], &agents[to].address, "message",
                        json!({"text": format!("message {m} of conversation {c}: the build is green, the review is next.")}));
                    env["conversation_id"] = json!(cnv);
                    env.insert("subject".into(), json!(format!("conversation {c}")));
                    w.send(&agents[from], env).await;
                }
            });
        }
        in_batches(jobs, 16).await;
        // Half the agents' sidecars take their inboxes: those copies show as delivered.
        for a in agents.iter().step_by(2) {
            while !w.receive_all(a).await.is_empty() {}
        }

        // Tasks: requester i, worker i+1; the first half accepted, a quarter with progress, a
        // quarter finished with usage and cost.
        let mut jobs = Vec::new();
        let ids = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        for t in 0..TASKS {
            let (w, agents, ids) = (w.clone(), agents.clone(), ids.clone());
            jobs.push(async move {
                let (r, k) = (t % AGENTS, (t + 1) % AGENTS);
                let (req, id) = w
                    .request(&agents[r], &agents[k], json!({"instructions": format!("Review change {t}.")}))
                    .await;
                if t % 2 == 0 {
                    w.followup(&agents[k], &agents[r], &req, &id, "accept", json!({})).await;
                    if t % 4 == 0 {
                        w.followup(&agents[k], &agents[r], &req, &id, "progress",
                            json!({"percent": 50, "stage": "reading", "note": "Half way."})).await;
                    } else {
                        w.followup(&agents[k], &agents[r], &req, &id, "result",
                            json!({"status": "succeeded", "summary": "Looks right.",
                                "usage": {"reported_by": "proxy", "model": "m", "input_tokens": 5000, "output_tokens": 700},
                                "cost": {"currency": "USD", "amount": "0.42", "source": "estimate"}})).await;
                    }
                }
                ids.lock().unwrap().push((t, id));
            });
        }
        in_batches(jobs, 16).await;
        let mut task_ids = ids.lock().unwrap().clone();
        task_ids.sort();
        println!(
            "stored {} messages and {TASKS} tasks among {AGENTS} agents in {:.1} s",
            CONVERSATIONS * PER_CONVERSATION + TASKS * 2,
            started.elapsed().as_secs_f64()
        );

        let s = w.sign_in(&w.admin).await;
        let pages: Vec<(&str, String)> = vec![
            ("overview", "/console/overview".into()),
            ("agents", "/console/agents".into()),
            ("agent", format!("/console/agents/{}", agents[0].id)),
            ("conversations", "/console/conversations".into()),
            ("thread (20 messages)", format!("/console/conversations/{sample_conversation}")),
            ("tasks", "/console/tasks".into()),
            ("tasks, state=succeeded", "/console/tasks?state=succeeded".into()),
            ("tasks, by worker", format!("/console/tasks?recipient={}", agents[1].id)),
            ("task (progress)", format!("/console/tasks/{}", task_ids[0].1)),
            ("task (result, usage)", format!("/console/tasks/{}", task_ids[2].1)),
            ("topics", "/console/topics".into()),
            ("policy", "/console/policy".into()),
            ("usage", "/console/usage".into()),
        ];
        println!(
            "{:<24} {:>8} {:>8} {:>8} {:>8}",
            "page", "p50 ms", "p99 ms", "max ms", "KiB"
        );
        let mut worst: f64 = 0.0;
        for (name, path) in &pages {
            for _ in 0..10 {
                assert_eq!(w.get(Some(&s), path).await.status, 200, "{path}");
            }
            let size = w.get(Some(&s), path).await.body.len();
            let mut times = Vec::with_capacity(ROUNDS);
            for _ in 0..ROUNDS {
                let t = Instant::now();
                let p = w.get(Some(&s), path).await;
                times.push(t.elapsed().as_secs_f64() * 1000.0);
                assert_eq!(p.status, 200, "{path}");
            }
            times.sort_by(f64::total_cmp);
            let p99 = percentile(&times, 0.99);
            worst = worst.max(p99);
            println!(
                "{name:<24} {:>8.2} {:>8.2} {:>8.2} {:>8.1}",
                percentile(&times, 0.5),
                p99,
                times[times.len() - 1],
                size as f64 / 1024.0
            );
        }
        println!(
            "worst p99 {worst:.2} ms: target (p99 < 50 ms) {}",
            if worst < 50.0 { "met" } else { "NOT met" }
        );
    });
}
