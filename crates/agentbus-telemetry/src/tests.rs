use super::*;
use std::collections::BTreeMap;
use std::io::Read;
use std::net::TcpListener;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

#[test]
fn nothing_set_is_off() {
    let s = Settings::from_env(env(&[])).unwrap();
    assert_eq!(s, Settings::default());
    assert!(!s.is_on());
    let t = Telemetry::start(&s, "agentbus-test").unwrap();
    assert!(!t.is_on());
    assert!(t.meter().is_none());
    let span = t
        .tracer()
        .start("x", SpanKind::Internal, Parent::Root, vec![]);
    assert!(!span.is_recording());
    assert_eq!(span.traceparent(), None);
}

#[test]
fn every_variable_is_read() {
    let s = Settings::from_env(env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_SERVICE_NAME", "gw-eu"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment.name=prod,team=a%2Cb",
        ),
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
        ("OTEL_SDK_DISABLED", "FALSE"),
        ("AGENTBUS_OTEL_SUBJECT", "true"),
    ]))
    .unwrap();
    assert_eq!(s.endpoint, "http://127.0.0.1:4318");
    assert_eq!(s.service_name, "gw-eu");
    assert_eq!(
        s.resource_attributes,
        [
            ("deployment.environment.name".to_owned(), "prod".to_owned()),
            ("team".to_owned(), "a,b".to_owned())
        ]
    );
    assert_eq!(
        show_resource_attributes(&s.resource_attributes),
        "deployment.environment.name=prod,team=a%2Cb"
    );
    assert_eq!(s.sampler, SamplerSetting::ParentRatio(0.01));
    assert!(s.subject && s.is_on());
}

#[test]
fn bad_values_are_each_reported() {
    let errs = Settings::from_env(env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_RESOURCE_ATTRIBUTES", "novalue"),
        ("OTEL_TRACES_SAMPLER", "traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "2"),
        ("OTEL_SDK_DISABLED", "yes"),
    ]))
    .unwrap_err();
    let vars: Vec<_> = errs.iter().map(|e| e.variable).collect();
    assert_eq!(
        vars,
        [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_RESOURCE_ATTRIBUTES",
            "OTEL_TRACES_SAMPLER_ARG",
            "OTEL_SDK_DISABLED"
        ]
    );
    assert!(parse_sampler("xray", "").is_err());
}

#[test]
fn traceparents_parse_and_print() {
    let t = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let sc = parse_traceparent(t).unwrap();
    assert_eq!(
        sc.trace_id().to_string(),
        "0af7651916cd43dd8448eb211c80319c"
    );
    assert!(sc.is_sampled() && sc.is_remote());
    for bad in [
        "",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
    ] {
        assert!(parse_traceparent(bad).is_none(), "{bad}");
    }
}

/// A port where a connection would be seen: telemetry disabled, or with no endpoint, never
/// connects, even through a flush and a shutdown.
#[test]
fn off_attempts_no_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    for s in [
        Settings {
            endpoint: endpoint.clone(),
            sdk_disabled: true,
            ..Settings::default()
        },
        Settings::default(),
    ] {
        let t = Telemetry::start(&s, "agentbus-test").unwrap();
        let mut span = t
            .tracer()
            .start("publish", SpanKind::Server, Parent::Root, vec![]);
        span.event("verified", vec![]);
        span.end();
        t.shutdown();
    }
    assert!(listener.accept().is_err(), "a connection was attempted");
}

/// On, spans reach the endpoint as OTLP/HTTP protobuf on shutdown, children of the traceparent.
#[test]
fn on_exports_spans_as_children_of_the_traceparent() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let got = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while let Ok((mut c, _)) = listener.accept() {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = vec![0u8; 1 << 16];
            let mut all = Vec::new();
            loop {
                let n = c.read(&mut buf).unwrap_or(0);
                all.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&all).to_string();
                if let Some(h) = text.find("\r\n\r\n") {
                    let len: usize = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    if all.len() >= h + 4 + len {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            use std::io::Write;
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let head = String::from_utf8_lossy(&all)
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned();
            let traces = head.contains("/v1/traces");
            seen.push((head, all));
            if traces {
                return seen;
            }
        }
        seen
    });
    let s = Settings {
        endpoint,
        service_name: "svc-under-test".into(),
        ..Settings::default()
    };
    let t = Telemetry::start(&s, "agentbus-test").unwrap();
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let span = t.tracer().start(
        "publish",
        SpanKind::Server,
        Parent::Traceparent(parent),
        vec![KeyValue::new(semconv::MESSAGING_SYSTEM, semconv::SYSTEM)],
    );
    let tp = span.traceparent().unwrap();
    assert!(
        tp.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
        "{tp}"
    );
    assert!(tp.ends_with("-01"));
    span.end();
    t.shutdown();
    let seen = got.join().unwrap();
    let (head, body) = seen.iter().find(|(h, _)| h.contains("/v1/traces")).unwrap();
    assert!(head.starts_with("POST /v1/traces"), "{head}");
    let body = String::from_utf8_lossy(body);
    assert!(
        body.to_ascii_lowercase()
            .contains("content-type: application/x-protobuf")
    );
    assert!(body.contains("svc-under-test") && body.contains("agentbus"));
}
