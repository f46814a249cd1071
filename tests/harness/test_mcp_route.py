"""The MCP route on the real harnesses: `agentbus mcp install <harness>` as a user runs it, then the
model calls the server's tools, and the assertions are on what the next model request held and on
the store's and the gateway's records.

All three MCP clients run headless: Claude Code (`-p`, its MCP tools deferred, so the model first
calls `ToolSearch` with `select:<tool>`, and `--allowedTools mcp__agentbus`), Codex (`codex exec`
with `[mcp_servers.agentbus]`; the tools come as one `namespace` tool, `mcp__agentbus`) and
OpenCode (`opencode run` with `mcp.agentbus`; the tools are `agentbus_<tool>`).

Started without `--session`, as `install` writes it, the server is a local session of its own
(`mcp-<hex>`, bound to the profile's agent), so a local message for it is addressed to that id and
its claim is that session's.
"""

import json
import subprocess
import threading

import pytest

from model_server import call, run, say
from runner import FRAME, prompt, token, wait_until
from tables import row

HARNESSES = ["claude", "codex", "opencode"]


def tool_calls(harness, tool, args, before=None):
    """The model turns that call the agentbus server's `tool`: Claude Code's MCP tools are
    deferred, so its model loads the tool with `ToolSearch` first."""
    if harness == "opencode":
        return [call(f"agentbus_{tool}", args, before=before)]
    name = f"mcp__agentbus__{tool}"
    if harness == "claude":
        return [call("ToolSearch", {"query": f"select:{name}"}, before=before), call(name, args)]
    return [call(name, args, before=before)]


def sessions(env):
    listed = json.loads(env.agentbus("--json", "sessions").stdout or "null")
    return listed.get("sessions", []) if isinstance(listed, dict) else listed or []


def mcp_session(env):
    """The session the MCP server registered (it is running once the model is asked)."""
    def find():
        ids = [r["session"] for r in sessions(env) if str(r.get("session", "")).startswith("mcp-")]
        return ids[0] if len(ids) == 1 else None
    return wait_until(find, timeout=30, what="the MCP server's session")


def unwrapped(text):
    """`text` and, when a line of it starts a JSON object (a client that hands its model the
    structured result as JSON: Claude Code with a reminder after it, Codex after a `Wall time`
    line), every string inside it: the frame's newlines are real there."""
    yield text
    start = 0 if text.startswith("{") else text.find("\n{") + 1
    if start or text.startswith("{"):
        try:
            inner, _ = json.JSONDecoder().raw_decode(text[start:])
        except ValueError:
            return
        stack = [inner]
        while stack:
            v = stack.pop()
            if isinstance(v, str):
                yield from unwrapped(v)
            elif isinstance(v, dict):
                stack.extend(v.values())
            elif isinstance(v, list):
                stack.extend(v)


def frames_of(req):
    return [m for s in req.texts() for t in unwrapped(s) for m in FRAME.finditer(t)]


def answered_by_tool(env, word, tool):
    """Each frame of `word` names the MCP tool and the message's id to answer with, not a shell
    command (the model of an MCP client may have no shell)."""
    hits = [m for r in env.requests() for m in frames_of(r) if word in m.group("body")]
    assert hits, f"{word} is in no frame"
    for m in hits:
        mid = m.group("attrs").split('id="', 1)[1].split('"', 1)[0]
        head = m.group("head")
        assert f'To answer: the {tool} tool with {{"id": "{mid}"' in head, head
        assert "agentbus reply" not in head and "agentbus task" not in head, head


def first_holding(env, word):
    return next(i for i, r in enumerate(env.requests()) if word in r)


class Snapshot:
    """What the store says while the server runs (it forgets its session, claims included, when
    the client leaves): taken when the request after the tool call arrives."""

    def __init__(self, env):
        self.env = env
        self.session = None
        self.claims = set()
        self.rows = []

    def __call__(self, _req=None):
        self.session = self.session or mcp_session(self.env)
        root = self.env.bus / "messages" / "seen" / self.session
        self.claims = {p.name for p in root.iterdir()} if root.exists() else set()
        self.rows = sessions(self.env)

    def recorded(self, word):
        """Claimed by the server's session and a Seen line by it: both, or neither."""
        mid = self.env.message_id(word)
        seen = any(m.get("kind") == "seen" and m.get("by") == self.session
                   and mid in m.get("ids", []) for m in self.env.log())
        return (mid in self.claims) and seen

    def unread(self):
        row = next(r for r in self.rows if r.get("session") == self.session)
        return row


def check_mcp(env, snap, word, gateway=False):
    """The suite's three assertions for a message the MCP route showed: once, framed, recorded
    shown if and only if a model request held it."""
    env.shown_once(word)
    hits = [m for r in env.requests() for m in frames_of(r) if word in m.group("body")]
    assert hits, f"{word} is in no agentbus-message frame"
    for m in hits:
        assert m.group("head").startswith(
            "The following was sent by another agent."), m.group("head")
        assert f'transport="{"gateway" if gateway else "local"}"' in m.group("attrs")
    recorded = env.recorded_gateway(word) if gateway else snap.recorded(word)
    assert recorded == env.contained(word), (
        f"{word}: recorded as shown={recorded}, in a model request={env.contained(word)}")


@row("MCP", "read_inbox, a local tell to the server's session", "shown")
@row("MCP", "read_inbox, a gateway message for the agent", "shown")
@pytest.mark.parametrize("harness", HARNESSES)
def test_read_inbox_shows_a_local_and_a_gateway_message_once(make_env, server, gateway, harness):
    env = make_env(harness, hooks=False)
    gateway.connect(env, "worker")
    env.install_mcp()
    local, remote = token("local"), token("remote")
    snap = Snapshot(env)
    asked = []

    def arrive(req):
        asked.append(len(env.requests()))
        env.tell(local, to=mcp_session(env), sender="peer")
        gateway.send("worker", remote)
        # The server receives for its agent itself (no sidecar runs here).
        wait_until(lambda: any(remote in m.get("text", "") for m in env.log()), timeout=30,
                   what="the gateway message to be imported")

    server.script(*tool_calls(harness, "read_inbox", {}, before=arrive),
                  say("Done.", before=snap))
    env.turn(prompt("check my messages"))
    for word, gw in ((local, False), (remote, True)):
        # Not before the read_inbox call, and in the request right after its result.
        assert first_holding(env, word) >= asked[0], f"{word} reached the model before the call"
        check_mcp(env, snap, word, gateway=gw)
        answered_by_tool(env, word, "reply")
    assert snap.recorded(local)


def local_peer(env, ask, answer):
    """A second local session of this machine (`<id>@<node>`, unknown until it speaks) that
    answers the question from its own terminal."""
    env.agentbus("sessions")
    peer = "peer" + token("")[3:]
    node = (env.bus / "node").read_text().strip()

    def replies():
        mid = wait_until(lambda: next((m["id"] for m in env.log()
                                       if ask in m.get("text", "")), None), timeout=60,
                         what="the question")
        return env.agentbus("reply", "--from", peer, mid, answer)
    return f"{peer}@{node}", replies


def gateway_peer(gateway, ask, answer):
    """The gateway's sender agent, receiving with `listen` (no sidecar) and answering the
    question with `agentbus reply`."""
    env = gateway._env(gateway.sender_home)

    def replies():
        got = subprocess.run([gateway.binary, "--json", "listen", "--count", "1"], env=env,
                             capture_output=True, text=True, timeout=60)
        doc = json.loads(got.stdout.splitlines()[0])
        assert ask in doc["text"], doc
        return gateway._run(env, "reply", doc["message_id"], answer)
    return gateway.address("sender"), replies


@row("MCP", "send with wait_s, the reply", "shown")
@row("MCP", "send with wait_s, another message waiting", "not claimed")
@pytest.mark.parametrize("peer", ["local", "gateway"])
@pytest.mark.parametrize("harness", HARNESSES)
def test_send_wait_returns_the_reply_and_leaves_other_mail_unread(make_env, server, gateway,
                                                                   harness, peer):
    env = make_env(harness, hooks=False)
    gateway.connect(env, "worker")
    env.install_mcp()
    ask, answer, other = token("ask"), token("answer"), token("other")
    to, replies = (local_peer(env, ask, answer) if peer == "local"
                   else gateway_peer(gateway, ask, answer))
    snap = Snapshot(env)
    replied = []

    def before_send(_):
        # Mail that was waiting before the call: the wait must leave it for read_inbox.
        env.tell(other, to=mcp_session(env), sender="bystander")
        threading.Thread(target=lambda: replied.append(replies()), daemon=True).start()

    calls = tool_calls(harness, "send", {"to": to, "text": ask, "wait_s": 30},
                       before=before_send)
    server.script(*calls, say("Done.", before=snap))
    env.turn(prompt("ask the peer"))
    assert replied, "the peer never replied"
    check_mcp(env, snap, answer, gateway=peer == "gateway")
    answered_by_tool(env, answer, "reply")
    # The message that was waiting: not in any request, not claimed, no Seen line, and still
    # counted unread for the server's session while it ran.
    env.not_shown(other)
    mid = env.message_id(other)
    assert mid not in snap.claims, "the wait claimed a message it did not show"
    assert not any(mid in m.get("ids", []) for m in env.log() if m.get("kind") == "seen")
    assert snap.unread().get("unread") == 1, f"the waiting message is not counted: {snap.rows}"


@row("MCP", "the hook and the server together", "shown", ["claude"])
def test_hook_and_mcp_together_show_each_message_once(make_env, server, gateway):
    """Claude Code with both `hooks install claude` and `mcp install claude`: a tell to the hook's
    session, a tell to the server's session and a gateway message for the agent both are bound to
    each reach the model once in total, whichever route shows it."""
    env = make_env("claude", agent=gateway.address("worker"))
    gateway.connect(env, "worker")
    env.install_mcp()
    to_hook, to_mcp, remote = token("hook"), token("mcp"), token("remote")
    snap = Snapshot(env)

    def arrive(_):
        env.tell(to_hook, sender="peer")
        env.tell(to_mcp, to=mcp_session(env), sender="peer")
        gateway.send("worker", remote)
        wait_until(lambda: any(remote in m.get("text", "") for m in env.log()), timeout=30,
                   what="the gateway message to be imported")

    server.script(*tool_calls("claude", "read_inbox", {}, before=arrive),
                  run("echo step-two"), say("Done.", before=snap))
    env.turn(prompt("check my messages"))
    env.check(to_hook)
    check_mcp(env, snap, to_mcp)
    env.shown_once(remote)
    env.framed(remote, "gateway")
    assert env.recorded_gateway(remote)
