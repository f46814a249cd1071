"""Shared helpers: the agentbus binary under test and the repository's data."""

import json
import os
import pathlib
import socket
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PROTOCOL = REPO / "crates" / "agentbus-protocol"
SCHEMAS = PROTOCOL / "schemas"
VECTORS = REPO / "tests" / "data" / "vectors"
BINARY = os.environ.get("AGENTBUS_BIN", str(REPO / "target" / "debug" / "agentbus"))
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bus:
    """A gateway on loopback and two agents, alpha and beta, each with its own AGENTBUS_HOME."""

    def __init__(self, tmp_path, *flags):
        self.tmp = tmp_path
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        # `--json`: one start-up document, printed once the gateway listens.
        self.gateway = subprocess.Popen(
            [BINARY, "--json", "gateway", "--listen", f"127.0.0.1:{port}", "--data",
             str(tmp_path / "gw"), *flags],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        doc = json.loads(self.gateway.stdout.readline())
        self.admin = doc.get("admin_token")
        assert self.admin, f"the gateway printed no admin token: {doc}"
        self.homes = {}
        for name in ("alpha", "beta"):
            home = tmp_path / name
            home.mkdir()
            self.homes[name] = home
            self.cli(name, "connect", "--gateway", self.url, "--token", self.admin, "--name", name)

    def env(self, name):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env.update({"AGENTBUS_HOME": str(self.homes[name]), "AGENTBUS_KEYSTORE": "file",
                    "HOME": str(self.homes[name])})
        return env

    def cli(self, name, *args):
        proc = subprocess.run([BINARY, "--json", *args], env=self.env(name), capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, f"{args}: {proc.stderr}"
        return json.loads(proc.stdout) if proc.stdout.strip() else None

    def profile(self, name):
        """The saved profile of `name` (its agent id and credential)."""
        return json.loads((self.homes[name] / "profiles" / f"{name}.json").read_text())

    def close(self):
        self.gateway.terminate()
        self.gateway.wait(timeout=10)


@pytest.fixture
def bus(tmp_path):
    """A gateway with the agents alpha and beta connected, stopped after the test."""
    b = Bus(tmp_path)
    yield b
    b.close()


@pytest.fixture
def public_bus(tmp_path):
    """`bus` on a gateway that serves public discovery (`--public-discovery`)."""
    b = Bus(tmp_path, "--public-discovery")
    yield b
    b.close()


def address(name):
    """The address of an agent of the bootstrap tenant and workspace."""
    return f"agent://default/default/{name}"
