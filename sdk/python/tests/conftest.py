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


_S3: dict[str, object] = {}


def s3_url() -> str:
    """The S3-compatible test server: AGENTBUS_TEST_S3_URL (scripts/test starts moto and sets
    it), else moto started here from ./.venv-s3 for this test session, as the Rust S3 tests do.
    Without either the test fails under AGENTBUS_SDK_CROSS (scripts/test, CI), never skips
    silently; elsewhere it is skipped saying how to install moto."""
    url = os.environ.get("AGENTBUS_TEST_S3_URL", "")
    if url:
        return url
    if "url" in _S3:
        return str(_S3["url"])
    python = REPO / ".venv-s3" / "bin" / "python"
    how = ("install moto with `python3 -m venv .venv-s3 && .venv-s3/bin/pip install -r "
           "tests/s3/requirements.txt` (scripts/test does), or set AGENTBUS_TEST_S3_URL")
    if python.exists():
        # It serves until its stdin closes: the pipe is held for this process's life.
        proc = subprocess.Popen([str(python), str(REPO / "tests" / "s3" / "moto_server.py")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line.startswith("http://"):
            _S3.update(url=line, proc=proc)
            return line
        proc.kill()
        proc.wait()
    message = f"the S3 attachment tests need an S3-compatible server: {how}"
    if os.environ.get("AGENTBUS_SDK_CROSS"):
        pytest.fail(message)
    pytest.skip(message)


def s3_gateway_flags(tmp: pathlib.Path) -> list[str]:
    """A bucket of its own on the test server, and the gateway flags that store blobs in it."""
    import secrets

    import httpx

    url = s3_url()
    bucket = f"t-{secrets.token_hex(8)}"
    r = httpx.put(f"{url}/{bucket}")
    assert r.is_success, f"creating bucket {bucket}: {r.status_code}"
    secret = tmp / "s3-secret"
    secret.write_text("test-secret-key\n")
    return ["--s3-endpoint", url, "--s3-bucket", bucket, "--s3-region", "us-east-1",
            "--s3-access-key-id", "testing", "--s3-secret-access-key-file", str(secret),
            "--s3-path-style", "true"]


def s3_objects(flags: list[str]) -> list[str]:
    """The keys in the bucket of `flags` (moto answers unsigned listings)."""
    import re

    import httpx

    url, bucket = flags[flags.index("--s3-endpoint") + 1], flags[flags.index("--s3-bucket") + 1]
    body = httpx.get(f"{url}/{bucket}?list-type=2").text
    return re.findall(r"<Key>([^<]+)</Key>", body)
