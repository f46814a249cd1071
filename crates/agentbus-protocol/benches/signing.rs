//! Canonicalise+sign and canonicalise+verify of 1 KiB and 100 KiB envelopes (issue: protocol core).
//! `cargo bench -p agentbus-protocol --bench signing`; figures go in docs/benchmarks.md.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Map, Value, json};

use agentbus_protocol::envelope::Envelope;
use agentbus_protocol::ids::{IdKind, Minter};
use agentbus_protocol::signing::{SigningKey, sign_envelope, verify_envelope};

/// A message.v1 envelope whose serialised size is about `size` bytes.
fn envelope(size: usize) -> Map<String, Value> {
    let mut env = json!({
        "specversion": "1.0",
        "id": "msg_01J9ZK7A0000000000000000A1",
        "source": "agent://acme/backend/release-bot",
        "type": "agentbus.message.v1",
        "time": "2026-10-10T14:00:00Z",
        "datacontenttype": "application/json",
        "subject": "Deploy readiness check",
        "to": "agent://acme/backend/reviewer",
        "conversation_id": "cnv_01J9ZK7A0000000000000000C1",
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "schema": "https://komsary.agentbus.exchange/schemas/agentbus.message/v1.json",
        "data": {"text": "", "expects_reply": true, "context": {"repo": "agentbus", "branch": "main"}}
    });
    let base = env.to_string().len() + 110;
    let filler = "Is change 482 clear for the 14:30 deploy? ".repeat(size / 40 + 1);
    env["data"]["text"] = json!(&filler[..size.saturating_sub(base)]);
    env.as_object().cloned().unwrap_or_default()
}

fn bench(c: &mut Criterion) {
    let key = SigningKey::from_seed([7; 32]);
    let public = key.public();
    let key_id = Minter::new().mint(IdKind::Key, 1_790_000_000_000, [1; 10]);
    let mut group = c.benchmark_group("envelope");
    for (label, size) in [("1KiB", 1024), ("100KiB", 100 * 1024)] {
        let unsigned = envelope(size);
        let mut signed = unsigned.clone();
        sign_envelope(&mut signed, &key, key_id).unwrap_or_default();
        let bytes = Value::Object(signed.clone()).to_string();
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("canonicalise+sign", label),
            &unsigned,
            |b, env| {
                b.iter(|| {
                    let mut env = env.clone();
                    sign_envelope(&mut env, &key, key_id).unwrap_or_default();
                    black_box(env)
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("canonicalise+verify", label),
            &signed,
            |b, env| b.iter(|| black_box(verify_envelope(env, &public).is_ok())),
        );
        group.bench_with_input(
            BenchmarkId::new("parse+canonicalise+verify", label),
            &bytes,
            |b, bytes| {
                b.iter(|| {
                    let env = Envelope::parse(bytes.as_bytes())
                        .map(Envelope::into_map)
                        .unwrap_or_default();
                    black_box(verify_envelope(&env, &public).is_ok())
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
