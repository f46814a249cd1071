"""Shared paths and a real gateway for the end-to-end tests."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data"
BINARY = os.environ.get("AGENTBUS_BIN", str(REPO / "target" / "debug" / "agentbus"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gateway:
    """`agentbus gateway` on a loopback port with its own data folder (SQLite)."""

    def __init__(self, tmp: pathlib.Path, *flags: str) -> None:
        self.tmp = tmp
        self.flags = flags
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin = ""
        self.proc: subprocess.Popen[str] | None = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [BINARY, "--json", "gateway", "--listen", f"127.0.0.1:{self.port}", "--data",
             str(self.tmp / "gw"), *self.flags],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        assert self.proc.stdout is not None
        doc = json.loads(self.proc.stdout.readline())
        # The admin token is printed on the first start only.
        self.admin = doc.get("admin_token") or self.admin

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=15)
            self.proc = None

    def cli(self, home: pathlib.Path, *args: str) -> object:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env.update({"AGENTBUS_HOME": str(home), "AGENTBUS_KEYSTORE": "file", "HOME": str(home)})
        proc = subprocess.run([BINARY, "--json", *args], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"{args}: {proc.stderr}"
        return json.loads(proc.stdout) if proc.stdout.strip() else None


@pytest.fixture
def gateway(tmp_path: pathlib.Path):
    g = Gateway(tmp_path)
    yield g
    g.stop()
