"""OpenTelemetry export checked by a real OTLP/HTTP receiver that decodes with the official
protobuf definitions (PyPI opentelemetry-proto): one delegation from a CLI agent to an
`agentbus work` worker through a gateway is one trace across the three processes, with the
parent-child chain docs/observability.md draws; a refused publish is an error span with its AB-
code; and with nothing configured no connection is attempted."""

import http.server
import json
import os
import socket
import subprocess
import threading
import time

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from conftest import BINARY, Bus, address

# Reads its task, reports usage, answers with a summary: the generic command harness (docs/work.md).
HARNESS = r"""read -r task
echo '{"usage": {"provider": "other", "model": "script", "input_tokens": 7, "output_tokens": 3}}' >&2
printf '{"summary": "Reviewed", "output": {}}'
"""


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Receiver:
    """An OTLP/HTTP receiver on loopback: every span posted to /v1/traces, decoded."""

    def __init__(self):
        self.spans = []
        self.connections = 0
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path == "/v1/traces":
                    req = ExportTraceServiceRequest()
                    req.ParseFromString(body)
                    receiver.add(req)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            def verify_request(self, request, client_address):
                receiver.connections += 1
                return True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, req):
        for rs in req.resource_spans:
            res = {a.key: value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append({
                        "service": res.get("service.name"),
                        "name": s.name,
                        "trace": s.trace_id.hex(),
                        "id": s.span_id.hex(),
                        "parent": s.parent_span_id.hex(),
                        "attrs": {a.key: value(a.value) for a in s.attributes},
                        "events": [e.name for e in s.events],
                        "error": s.status.code == 2,
                        "status": s.status.message,
                    })

    def close(self):
        self.server.shutdown()


def until(seconds, what, check):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def test_a_delegation_is_one_trace_across_three_processes(tmp_path, monkeypatch, receiver):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    # Spans leave each process within a tenth of a second, not the SDK's default 5 s.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    bus = Bus(tmp_path)
    worker = None
    try:
        bus.cli("beta", "card", "edit", "--capability", "code.review@1")
        worker = subprocess.Popen(
            [BINARY, "--json", "work", "--harness", "command", "--program", "sh",
             "--arg=-c", f"--arg={HARNESS}", "--heartbeat", "0s"],
            env=bus.env("beta"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        task = bus.cli("alpha", "delegate", "--capability", "code.review",
                       "--progress-timeout", "600", address("beta"), "Review it.")["task_id"]
        until(30, "the task's result", lambda: bus.cli("alpha", "trace", task)["task"]["state"]
              == "succeeded")
        # A refused publish: a recipient that does not exist.
        refused = subprocess.run(
            [BINARY, "--json", "send", address("nobody"), "hello"], env=bus.env("alpha"),
            capture_output=True, text=True, timeout=60,
        )
        assert refused.returncode != 0
    finally:
        if worker:
            worker.terminate()
            worker.wait(timeout=20)
        bus.close()

    spans = receiver.spans

    def one(service, name, **attrs):
        found = [s for s in spans if s["service"] == service and s["name"].startswith(name)
                 and all(s["attrs"].get(k) == v for k, v in attrs.items())]
        assert found, f"no {name} of {service} with {attrs} in {json.dumps(spans, indent=1)}"
        return found[0]

    request = one("agentbus", "send", **{"agentbus.message.type": "agentbus.task.request.v1"})
    trace = request["trace"]
    assert request["parent"] == "", "the delegation starts the trace"
    published = one("agentbus-gateway", "publish",
                    **{"messaging.message.id": request["attrs"]["messaging.message.id"]})
    assert (published["trace"], published["parent"]) == (trace, request["id"])
    assert published["attrs"]["messaging.system"] == "agentbus"
    assert published["attrs"]["messaging.destination.name"] == address("beta")
    assert "signature_verified" in published["events"] and "stored" in published["events"]
    delivered = one("agentbus-gateway", "deliver",
                    **{"messaging.message.id": request["attrs"]["messaging.message.id"]})
    assert (delivered["trace"], delivered["parent"]) == (trace, request["id"])
    received = one("agentbus-worker", "receive",
                   **{"messaging.message.id": request["attrs"]["messaging.message.id"]})
    assert (received["trace"], received["parent"]) == (trace, request["id"])
    turn = one("agentbus-worker", "invoke_agent")
    assert (turn["trace"], turn["parent"]) == (trace, request["id"])
    assert turn["attrs"]["gen_ai.operation.name"] == "invoke_agent"
    assert turn["attrs"]["gen_ai.agent.name"] == address("beta")
    assert turn["attrs"]["gen_ai.usage.input_tokens"] == 7
    assert turn["attrs"]["gen_ai.usage.output_tokens"] == 3
    assert turn["events"].count("task.transition") >= 2
    result = one("agentbus-worker", "send", **{"agentbus.message.type": "agentbus.task.result.v1"})
    assert (result["trace"], result["parent"]) == (trace, turn["id"])
    stored = one("agentbus-gateway", "publish",
                 **{"messaging.message.id": result["attrs"]["messaging.message.id"]})
    assert (stored["trace"], stored["parent"]) == (trace, result["id"])
    assert len({s["service"] for s in spans if s["trace"] == trace}) >= 3

    bad = [s for s in spans if s["service"] == "agentbus-gateway" and s["name"] == "publish"
           and s["attrs"].get("messaging.destination.name") == address("nobody")]
    assert bad and bad[0]["error"], bad
    assert bad[0]["attrs"]["error.type"].startswith("AB-")
    assert bad[0]["status"].startswith(bad[0]["attrs"]["error.type"])
    # No message text in any attribute.
    for s in spans:
        for v in s["attrs"].values():
            assert "Review it." not in str(v) and "hello" != v


def test_nothing_configured_attempts_no_connection(tmp_path, monkeypatch):
    """OTLP's default port on loopback, where an SDK left to its defaults would export: no
    process connects to it when no OTEL_* variable is set."""
    for k in list(os.environ):
        if k.startswith("OTEL_"):
            monkeypatch.delenv(k)
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", 4318))
    except OSError:
        pytest.skip("port 4318 is in use here")
    listener.listen()
    listener.setblocking(False)
    bus = Bus(tmp_path)
    try:
        bus.cli("alpha", "send", address("beta"), "hello")
        bus.cli("beta", "sidecar", "--once")
    finally:
        bus.close()
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()
