"""Shared helpers: the agentbus binary under test and the repository's data."""

import json
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PROTOCOL = REPO / "crates" / "agentbus-protocol"
SCHEMAS = PROTOCOL / "schemas"
VECTORS = PROTOCOL / "tests" / "data" / "vectors"
GATEWAY_SET = {"tenant", "workspace", "to_id", "sequence", "received_at", "receipt", "hops"}


@pytest.fixture(scope="session")
def agentbus():
    """Runs the agentbus binary and returns the completed process."""
    binary = os.environ.get("AGENTBUS_BIN", str(REPO / "target" / "debug" / "agentbus"))

    def run(*args, stdin=None, check=True):
        proc = subprocess.run(
            [binary, *args],
            input=stdin,
            capture_output=True,
            timeout=60,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"agentbus {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()}"
            )
        return proc

    return run


def minimal_envelope(**extra):
    env = {
        "specversion": "1.0",
        "id": "msg_01J9ZK7A0000000000000000A1",
        "source": "agent://acme/backend/release-bot",
        "type": "agentbus.message.v1",
        "time": "2026-10-10T14:00:00Z",
        "datacontenttype": "application/json",
        "to": "agent://acme/backend/reviewer",
        "conversation_id": "cnv_01J9ZK7A0000000000000000C1",
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "schema": "https://komsary.agentbus.exchange/schemas/agentbus.message/v1.json",
        "data": {"text": "Is change 482 clear for the 14:30 deploy?", "expects_reply": True},
    }
    env.update(extra)
    return env


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False).encode()
