//! OpenTelemetry export (docs/observability.md): the spans a publish, a delivery and an ack make,
//! as an OTLP/HTTP receiver decodes them with the official protobuf definitions; and no
//! connection at all when telemetry is off.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use prost::Message;
use serde_json::json;

use crate::support::*;

/// A span as received: its resource's service, ids in hex, attributes as text, event names.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    name: String,
    trace_id: String,
    parent: String,
    attrs: BTreeMap<String, String>,
    events: Vec<String>,
    error: bool,
    status: String,
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

/// A metric point as received: the metric's name and unit, the point's attributes, its value
/// (a sum's or gauge's number, a histogram's count).
type Point = (String, String, BTreeMap<String, String>, f64);

/// An OTLP/HTTP receiver on a free port: every span exported to `/v1/traces`, every metric
/// point to `/v1/metrics`.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Got>>>,
    points: Arc<Mutex<Vec<Point>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let spans = Arc::new(Mutex::new(Vec::new()));
        let points = Arc::new(Mutex::new(Vec::new()));
        let (out, pts) = (spans.clone(), points.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (out, pts) = (out.clone(), pts.clone());
                std::thread::spawn(move || serve(conn, out, pts));
            }
        });
        Receiver { url, spans, points }
    }

    fn points(&self) -> Vec<Point> {
        self.points.lock().unwrap().clone()
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().unwrap().clone()
    }
}

/// Reads requests off one kept-alive connection until it closes.
fn serve(conn: std::net::TcpStream, out: Arc<Mutex<Vec<Got>>>, pts: Arc<Mutex<Vec<Point>>>) {
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        if path == "/v1/traces" {
            let req = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
            let mut got = out.lock().unwrap();
            for rs in req.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                    .map(|a| text(&a.value))
                    .unwrap_or_default();
                for ss in rs.scope_spans {
                    for s in ss.spans {
                        let status = s.status.clone().unwrap_or_default();
                        got.push(Got {
                            service: service.clone(),
                            name: s.name,
                            trace_id: hex::encode(&s.trace_id),
                            parent: hex::encode(&s.parent_span_id),
                            attrs: s
                                .attributes
                                .iter()
                                .map(|a| (a.key.clone(), text(&a.value)))
                                .collect(),
                            events: s.events.into_iter().map(|e| e.name).collect(),
                            error: status.code == 2,
                            status: status.message,
                        });
                    }
                }
            }
        }
        if path == "/v1/metrics" {
            let req = ExportMetricsServiceRequest::decode(body.as_slice()).unwrap();
            let mut got = pts.lock().unwrap();
            for rm in req.resource_metrics {
                for sm in rm.scope_metrics {
                    for m in sm.metrics {
                        let attrs = |a: &[opentelemetry_proto::tonic::common::v1::KeyValue]| {
                            a.iter().map(|a| (a.key.clone(), text(&a.value))).collect()
                        };
                        let number = |v: &Option<Number>| match v {
                            Some(Number::AsInt(i)) => *i as f64,
                            Some(Number::AsDouble(d)) => *d,
                            None => 0.0,
                        };
                        let rows: Vec<(BTreeMap<String, String>, f64)> = match &m.data {
                            Some(Data::Sum(s)) => s
                                .data_points
                                .iter()
                                .map(|p| (attrs(&p.attributes), number(&p.value)))
                                .collect(),
                            Some(Data::Gauge(g)) => g
                                .data_points
                                .iter()
                                .map(|p| (attrs(&p.attributes), number(&p.value)))
                                .collect(),
                            Some(Data::Histogram(h)) => h
                                .data_points
                                .iter()
                                .map(|p| (attrs(&p.attributes), p.count as f64))
                                .collect(),
                            _ => Vec::new(),
                        };
                        for (a, v) in rows {
                            got.push((m.name.clone(), m.unit.clone(), a, v));
                        }
                    }
                }
            }
        }
        let _ = w.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
        );
    }
}

/// A publish is a span child of its envelope's `traceparent`, with the verification steps as
/// events and the messaging attributes; its delivery and its ack are spans in the same trace; a
/// refused publish is an error span carrying its AB- code; no message text or subject is exported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_delivery_and_ack_spans_follow_the_envelope() {
    let rx = Receiver::start();
    let tmp = tempfile::tempdir().unwrap();
    let url = rx.url.clone();
    let h = Harness::start_with(tmp.path().join("gw"), |c| c.otel_endpoint = url).await;
    let bot = h.agent("release-bot").await;
    let reviewer = h.agent("reviewer").await;
    let mut q = message(&h, &bot, &reviewer.address, "secret text of the message");
    q.insert("subject".into(), json!("secret subject"));
    let q = sign(&bot, q);
    assert_eq!(h.publish(&bot, &q).await.0, 202);
    let got = h.poll(&reviewer, 0, 1).await;
    assert_eq!(h.ack(&reviewer, &got[0]).await.0, 200);
    let mut bad = signed(&h, &bot, &reviewer.address, "tampered");
    bad["data"]["text"] = json!("changed after signing");
    let (s, body, _) = h.publish(&bot, &bad).await;
    assert_eq!(
        (s, body["error"]["code"].as_str()),
        (401, Some("AB-1011")),
        "{body}"
    );
    h.stop().await;

    let spans = rx.spans();
    let traceparent = q["traceparent"].as_str().unwrap();
    let (trace, parent) = (&traceparent[3..35], &traceparent[36..52]);
    let id = q["id"].as_str().unwrap();
    let of = |name: &str, id: &str| {
        spans
            .iter()
            .find(|s| {
                s.name == name
                    && s.attrs.get("messaging.message.id").map(String::as_str) == Some(id)
            })
            .unwrap_or_else(|| panic!("no {name} span of {id} in {spans:#?}"))
            .clone()
    };
    let publish = of("publish", id);
    assert_eq!(
        (publish.trace_id.as_str(), publish.parent.as_str()),
        (trace, parent)
    );
    assert_eq!(publish.service, "agentbus-gateway");
    assert!(!publish.error);
    for (k, v) in [
        ("messaging.system", "agentbus"),
        ("messaging.operation.type", "send"),
        ("messaging.destination.name", reviewer.address.as_str()),
        (
            "messaging.message.conversation_id",
            q["conversation_id"].as_str().unwrap(),
        ),
        (
            "gen_ai.conversation.id",
            q["conversation_id"].as_str().unwrap(),
        ),
    ] {
        assert_eq!(publish.attrs.get(k).map(String::as_str), Some(v), "{k}");
    }
    assert_eq!(
        publish.events,
        [
            "authenticated",
            "source_checked",
            "signature_verified",
            "clock_checked",
            "schema_checked",
            "routed",
            "policy_allowed",
            "stored"
        ]
    );
    let deliver = of("deliver", id);
    assert_eq!(
        (deliver.trace_id.as_str(), deliver.parent.as_str()),
        (trace, parent)
    );
    assert_eq!(deliver.events, ["lease"]);
    assert_eq!(deliver.attrs["agentbus.delivery.attempt"], "1");
    let ack = of("ack", id);
    assert_eq!(
        (ack.trace_id.as_str(), ack.events.as_slice()),
        (trace, ["acked".to_owned()].as_slice())
    );
    let refused = of("publish", bad["id"].as_str().unwrap());
    assert!(refused.error, "{refused:?}");
    assert_eq!(refused.attrs["error.type"], "AB-1011");
    assert!(refused.status.starts_with("AB-1011"), "{}", refused.status);
    assert!(!refused.events.contains(&"stored".to_owned()));
    // The counters and histograms of /metrics, under the same names, over OTLP.
    let points = rx.points();
    let point = |name: &str| {
        points
            .iter()
            .rev()
            .find(|p| p.0 == name)
            .unwrap_or_else(|| panic!("no {name} in {points:#?}"))
    };
    let accepted = points
        .iter()
        .rev()
        .find(|p| {
            p.0 == "agentbus_publishes_total"
                && p.2.get("result").map(String::as_str) == Some("accepted")
        })
        .unwrap_or_else(|| panic!("no accepted publishes in {points:#?}"));
    assert!(accepted.3 >= 1.0);
    assert!(point("agentbus_deliveries_total").3 >= 1.0);
    let latency = point("agentbus_publish_seconds");
    assert_eq!(latency.1, "s");
    assert!(latency.3 >= 1.0);
    point("agentbus_open_connections");
    point("agentbus_publish_to_delivery_seconds");
    // No text, no subject (off by default), in any attribute of any span.
    for s in &spans {
        for v in s.attrs.values() {
            assert!(!v.contains("secret") && !v.contains("tampered"), "{s:?}");
        }
    }
}

/// With the SDK disabled, an endpoint that would see a connection sees none, through a publish,
/// a delivery and the shutdown's flush.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_telemetry_attempts_no_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let h = Harness::start_with(tmp.path().join("gw"), |c| {
        c.otel_endpoint = url;
        c.otel_sdk_disabled = true;
    })
    .await;
    let bot = h.agent("release-bot").await;
    let reviewer = h.agent("reviewer").await;
    let q = signed(&h, &bot, &reviewer.address, "hello");
    assert_eq!(h.publish(&bot, &q).await.0, 202);
    assert_eq!(h.poll(&reviewer, 0, 1).await.len(), 1);
    h.stop().await;
    assert!(listener.accept().is_err(), "a connection was attempted");
}

/// `otel_subject` adds the subject, and only the subject: the text stays out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subject_is_exported_only_when_asked() {
    let rx = Receiver::start();
    let tmp = tempfile::tempdir().unwrap();
    let url = rx.url.clone();
    let h = Harness::start_with(tmp.path().join("gw"), |c| {
        c.otel_endpoint = url;
        c.otel_subject = true;
    })
    .await;
    let bot = h.agent("release-bot").await;
    let reviewer = h.agent("reviewer").await;
    let mut q = message(&h, &bot, &reviewer.address, "secret text");
    q.insert("subject".into(), json!("Deploy readiness"));
    let q = sign(&bot, q);
    assert_eq!(h.publish(&bot, &q).await.0, 202);
    h.stop().await;
    let spans = rx.spans();
    let publish = spans.iter().find(|s| s.name == "publish").unwrap();
    assert_eq!(
        publish.attrs["agentbus.message.subject"],
        "Deploy readiness"
    );
    assert!(
        spans
            .iter()
            .all(|s| s.attrs.values().all(|v| !v.contains("secret")))
    );
}

/// A timer that fires (§6.1: here the accept timeout of a request nobody accepted) is a span in
/// its request's trace, named by its timer and the state it led to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_firing_is_a_span_in_its_requests_trace() {
    let rx = Receiver::start();
    let tmp = tempfile::tempdir().unwrap();
    let url = rx.url.clone();
    let h = Harness::start_with(tmp.path().join("gw"), |c| c.otel_endpoint = url).await;
    let bot = h.agent("release-bot").await;
    let rev = h.worker("reviewer").await;
    let req = sign(
        &bot,
        request(&h, &bot, &rev, json!({"accept_timeout_s": 5})),
    );
    let task = h.publish_task(&bot, &req).await;
    h.clock.advance_secs(6);
    h.app.reap().await.unwrap();
    h.stop().await;
    let traceparent = req["traceparent"].as_str().unwrap();
    let (trace, parent) = (&traceparent[3..35], &traceparent[36..52]);
    let spans = rx.spans();
    let timer = spans
        .iter()
        .find(|s| s.name == "timer" && s.attrs.get("agentbus.task.id") == Some(&task))
        .unwrap_or_else(|| panic!("no timer span of {task} in {spans:#?}"));
    assert_eq!(
        (timer.trace_id.as_str(), timer.parent.as_str()),
        (trace, parent)
    );
    assert_eq!(timer.attrs["agentbus.timer"], "accept_timeout");
    assert_eq!(timer.attrs["agentbus.task.state"], "expired");
    assert_eq!(timer.events, ["fired"]);
}
