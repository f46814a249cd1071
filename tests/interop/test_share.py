"""AS-3-6, AS-3.2-1, AS-4-1, AS-6-1: files the git share writes, read by independent peers:
PyYAML (a YAML 1.1 loader, the strictest about typing) and the Python blake3 package."""

import os
import pathlib
import subprocess

import blake3
import pytest
import yaml

from conftest import REPO

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "Interop",
    "GIT_AUTHOR_EMAIL": "interop@example.org",
    "GIT_COMMITTER_NAME": "Interop",
    "GIT_COMMITTER_EMAIL": "interop@example.org",
}


@pytest.fixture
def share(tmp_path):
    """A bare remote, a share in it, one joined clone; returns (run, checkout)."""
    env = {**os.environ, **GIT_ENV, "HOME": str(tmp_path)}
    env.pop("AGENTBUS_SHARE", None)
    binary = os.environ.get("AGENTBUS_BIN", str(REPO / "target" / "debug" / "agentbus"))

    def run(*args, cwd=tmp_path):
        proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr.decode()
        return proc.stdout.decode()

    run("git", "init", "--quiet", "--bare", "remote.git")  # the README's recipe: git's default branch
    run(binary, "share", "init", "admin", "--remote", str(tmp_path / "remote.git"))
    run("git", "clone", "--quiet", "remote.git", "a")
    checkout = tmp_path / "a"
    run(binary, "share", "join", "--operator", "acme", "--instance", "fleet", "--agent", "reviewer", cwd=checkout)
    return (lambda *args: run(binary, *args, cwd=checkout)), checkout


def split(path: pathlib.Path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    header, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(header), body


def preimage(body: str) -> bytes:
    """§3.2 by hand: trim, drop a trailing `_Dispatched by …_` line, trim again."""
    t = body.strip(" \t\n\r\x0b\x0c")
    lines = t.split("\n")
    if lines[-1].startswith("_Dispatched by ") and lines[-1].endswith("_"):
        t = "\n".join(lines[:-1]).strip(" \t\n\r\x0b\x0c")
    return t.encode()


def test_as_3_6_and_as_3_2_1_a_message_loads_in_pyyaml_and_its_hash_verifies(share):
    run, checkout = share
    run("share", "send", "--to", "acme/reviewer", "--to", "acme/any", "--type", "question", "--footer",
        "  # Yes?\n\nIs 1e3 a number, and is no a boolean?  \n")
    files = sorted((checkout / "messages").rglob("*.md"))
    assert len(files) == 2
    for f in files:
        fm, body = split(f)
        assert fm["protocol"] == "0.1.0" and isinstance(fm["protocol"], str)
        assert set(fm) == {"protocol", "id", "from", "to", "thread", "type", "created", "status",
                           "recipients", "content_hash"}
        assert fm["from"] == {"operator": "acme", "instance": "fleet", "agent": "reviewer"}
        assert f.parent.name == fm["to"]["agent"] and f.parent.parent.name == fm["to"]["operator"]
        assert fm["type"] == "question" and fm["status"] == "open"
        # G-AS-14: a YAML 1.1 loader keeps created a string, because the writer quotes it.
        assert isinstance(fm["created"], str) and fm["created"].endswith("Z")
        assert isinstance(fm["id"], str) and isinstance(fm["thread"], str)
        assert body.rstrip().endswith("_")
        assert fm["content_hash"] == "blake3:" + blake3.blake3(preimage(body)).hexdigest()


def test_as_4_1_a_broadcast_to_is_the_string_star(share):
    run, checkout = share
    run("share", "broadcast", "--slug", "maintenance", "Friday 18:00 UTC")
    (f,) = (checkout / "broadcast").glob("*.md")
    fm, body = split(f)
    assert fm["to"] == {"operator": "*", "agent": "*"}
    assert fm["content_hash"] == "blake3:" + blake3.blake3(preimage(body)).hexdigest()


def test_as_6_1_a_publication_loads_with_its_keys(share):
    run, checkout = share
    run("share", "publish", "--topic", "payments-api", "--last-verified", "2026-11-29",
        "--source-repo", "https://git.example.org/acme/docs", "# Survey")
    (f,) = (checkout / "knowledge" / "payments-api").glob("*.md")
    fm, _ = split(f)
    assert set(fm) == {"protocol", "id", "publisher", "topic", "source", "created", "last_verified"}
    assert fm["topic"] == f.parent.name
    assert isinstance(fm["last_verified"], str)
    assert fm["source"] == {"repo": "https://git.example.org/acme/docs"}


def test_as_8_1_registry_keys_a_yaml_1_1_reader_would_type_stay_strings(share, tmp_path):
    """`join --operator 0x1f` must not read back as the integer 31."""
    run, checkout = share
    run("share", "join", "--operator", "0x1f", "--instance", "1e3", "--agent", "y2k", "--offline")
    registry = yaml.safe_load((checkout / "operators.yaml").read_text(encoding="utf-8"))
    assert "0x1f" in registry and 31 not in registry
    assert list(registry["0x1f"]["instances"]) == ["1e3"]
    assert registry["0x1f"]["instances"]["1e3"]["agents"] == ["y2k"]
    assert registry["acme"]["instances"]["fleet"]["agents"] == ["reviewer"]


def test_g_as_4_gitattributes_keep_artifacts_byte_exact(share):
    """Init's .gitattributes stops CRLF conversion of artifacts."""
    _, checkout = share
    rules = [l.split() for l in (checkout / ".gitattributes").read_text().splitlines() if l and l[0] != "#"]
    assert ["messages/**", "-text"] in rules and ["log/*.jsonl", "merge=union"] in rules
