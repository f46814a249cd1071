"""Fixtures of the harness conformance suite: the scripted model server and a harness's world."""

import json
import os
import pathlib
import re

import pytest

from model_server import ModelServer
from runner import BINARIES, Env


def pytest_configure(config):
    config._harness_passed = set()
    config.addinivalue_line("markers", "tables: runs after every other case (test_tables.py)")


def pytest_collection_modifyitems(session, config, items):
    """The tables check reads the results of every other case, so it runs last."""
    items.sort(key=lambda item: item.get_closest_marker("tables") is not None)


def pytest_runtest_logreport(report):
    if report.when == "call" and report.passed:
        _CONFIG._harness_passed.add(report.nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    global _CONFIG
    _CONFIG = session.config


_CONFIG = None


@pytest.fixture
def server(request):
    """The scripted model server; with AGENTBUS_HARNESS_DUMP=DIR every request body it got is
    written to DIR/<test>/<n>.json, to see what the model was sent."""
    s = ModelServer()
    yield s
    s.close()
    dump = os.environ.get("AGENTBUS_HARNESS_DUMP")
    if dump:
        out = pathlib.Path(dump) / re.sub(r"[^\w.-]+", "_", request.node.name)
        out.mkdir(parents=True, exist_ok=True)
        for i, r in enumerate(s.requests):
            (out / f"{i:02d}.json").write_text(json.dumps(
                {"path": r.path, "at": r.at, "body": r.body}, indent=1))


@pytest.fixture
def make_env(tmp_path, server):
    """make_env(harness, agent=None, program=None, trust=True, hooks=True): a fresh world for one
    harness, its hook installed unless `hooks=False` (running `program` instead of the binary under
    test, when given; for Codex trusted with `--trust` unless `trust=False`)."""

    made = []

    def make(harness, agent=None, program=None, trust=True, hooks=True):
        if not BINARIES[harness].exists():
            pytest.fail(f"{BINARIES[harness]} is missing: run python3 tests/harness/install.py")
        env = Env(harness, tmp_path / harness, server, agent=agent, program=program, trust=trust,
                  hooks=hooks)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


class Gateway:
    """A real `agentbus gateway` on loopback, and a sender agent with a home of its own."""

    def __init__(self, tmp):
        import json
        import subprocess

        from runner import BINARY
        self.tmp = tmp
        self.binary = BINARY
        self.proc = subprocess.Popen(
            [BINARY, "--json", "gateway", "--listen", "127.0.0.1:0", "--data", str(tmp / "gw")],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=self._env(tmp / "gwhome"))
        doc = json.loads(self.proc.stdout.readline())
        self.url = doc.get("url") or f"http://{doc['listening']}"
        self.admin = doc["admin_token"]
        self.sender_home = tmp / "sender"
        self.sender_home.mkdir(parents=True)
        self._run(self._env(self.sender_home), "connect", "--gateway", self.url, "--token",
                  self.admin, "--name", "sender")

    @staticmethod
    def _env(home):
        import os
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env.update({"AGENTBUS_HOME": str(home), "HOME": str(home), "AGENTBUS_KEYSTORE": "file"})
        return env

    def _run(self, env, *args):
        import subprocess
        proc = subprocess.run([self.binary, *args], env=env, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, f"agentbus {args}: {proc.stderr}"
        return proc

    @staticmethod
    def address(name):
        return f"agent://default/default/{name}"

    def connect(self, env, name):
        """Connects `name` as the agent of env's AGENTBUS_HOME."""
        env.agentbus("connect", "--gateway", self.url, "--token", self.admin, "--name", name)

    def send(self, name, text, priority=None):
        extra = ["--priority", priority] if priority else []
        self._run(self._env(self.sender_home), "send", *extra, self.address(name), text)

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def gateway(tmp_path):
    g = Gateway(tmp_path / "gateway")
    yield g
    g.close()
