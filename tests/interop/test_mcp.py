"""`agentbus mcp` driven over stdio by the official Python MCP SDK
(pinned), against a real gateway and real local stores: initialize (2025-11-25) and discover
(2026-07-28), the tool list and its size, every tool, a push notification for a message sent by
another agent, a refusal as an isError tool result, and each harness's installed entry launched."""

import asyncio
import json
import re
import subprocess
import time

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from conftest import BINARY, address

INBOX = "agentbus://inbox"
# The bound the issue sets: every definition together under 3,000 tokens at 4 characters each.
TOOL_CHARS_MAX = 3_000 * 4


def server(bus, name):
    """`agentbus mcp` as the agent `name`, its session named after it."""
    return StdioServerParameters(command=BINARY, args=["mcp", "--name", name], env=bus.env(name))


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "type", None) == "text")


async def until(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError("timed out")


class Notes:
    """Records the server's notifications."""

    def __init__(self):
        self.updated = asyncio.Event()
        self.methods = []

    async def __call__(self, message):
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if method:
            self.methods.append(method)
        if method == "notifications/resources/updated":
            self.updated.set()


def test_mcp_tools_list_fits_the_token_bound_and_names_every_tool(bus):
    async def run():
        async with Client(server(bus, "alpha"), mode="legacy") as c:
            assert c.session.protocol_version == "2025-11-25"
            listed = await c.list_tools()
            names = sorted(t.name for t in listed.tools)
            assert names == ["delegate", "directory", "read_inbox", "reply", "search", "send", "task", "trace"]
            size = len(json.dumps([t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools]))
            assert size < TOOL_CHARS_MAX, f"tools/list is {size} characters ({size // 4} tokens)"
    asyncio.run(run())


# The legacy revision subscribes with resources/subscribe, which the SDK marks deprecated.
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
def test_wp_9_14_mcp_every_tool_attachments_push_and_refusal_over_the_initialize_lifecycle(bus):
    """The previous revision (2025-11-25): initialize, resources/subscribe, resources/updated."""

    async def run():
        notes = Notes()
        async with Client(server(bus, "alpha"), mode="legacy", message_handler=notes) as alpha, \
                Client(server(bus, "beta"), mode="legacy") as beta:
            assert alpha.session.protocol_version == "2025-11-25"
            caps = alpha.session.server_capabilities
            assert caps.resources.subscribe is True

            # directory: both agents and this machine's session.
            d = await alpha.call_tool("directory", {})
            assert not d.is_error, text_of(d)
            addresses = [a["address"] for a in d.structured_content["agents"]]
            assert address("beta") in addresses
            assert any(s["you"] for s in d.structured_content["sessions"])

            # Push: beta sends, alpha is told without asking.
            await alpha.subscribe_resource(INBOX)
            sent = await beta.call_tool("send", {"to": address("alpha"), "text": "build 42 is green",
                                                 "expects_reply": True, "subject": "CI"})
            assert not sent.is_error, text_of(sent)
            msg_id = sent.structured_content["sent"]["id"]
            await asyncio.wait_for(notes.updated.wait(), 20)
            assert "notifications/resources/updated" in notes.methods

            # The resource shows what waits without showing it; read_inbox shows it once, framed.
            res = await alpha.read_resource(INBOX)
            waiting = json.loads(res.contents[0].text)["waiting"]
            assert [w["subject"] for w in waiting] == ["CI"]
            inbox = await alpha.call_tool("read_inbox", {})
            framed = text_of(inbox)
            assert "build 42 is green" in framed and "<agentbus-message" in framed
            # The frame names the tool and id to answer with, not a shell command.
            assert f'the reply tool with {{"id": "{msg_id}"' in framed, framed
            assert "agentbus reply" not in framed
            # A client may hand its model the structured content instead (Claude Code does):
            # the frame is there too.
            assert inbox.structured_content["text"] == framed
            again = await alpha.call_tool("read_inbox", {})
            assert "build 42 is green" not in text_of(again)

            # reply over the gateway; beta reads it.
            r = await alpha.call_tool("reply", {"id": msg_id, "text": "thanks"})
            assert not r.is_error, text_of(r)
            got = await until(lambda: _read_contains(beta, "thanks"))
            assert got

            # send with wait_s and an attachment (WP-9-14: uploaded first, downloaded for the
            # recipient, whose frame lists the local path); beta answers while alpha waits.
            report = bus.tmp / "report.md"
            report.write_text("# all green\n")

            async def answer():
                inbox = await until(lambda: _read_contains(beta, "deploy now?"))
                assert "report.md" in inbox, inbox
                mid = re.search(r'the reply tool with \{"id": "(msg_[0-9A-Z]+)"', inbox).group(1)
                await beta.call_tool("reply", {"id": mid, "text": "yes, go"})
            waited, _ = await asyncio.gather(
                alpha.call_tool("send", {"to": address("beta"), "text": "deploy now?", "wait_s": 30,
                                         "attachments": [{"path": str(report)}]}),
                answer(),
            )
            assert not waited.is_error, text_of(waited)
            # The awaited reply as structured fields: its frame once in the text and once in the
            # structured content (`reply.frame`), so a client that reads either shows it once.
            reply = waited.structured_content["reply"]
            assert reply["id"].startswith("msg_") and "yes, go" in reply["frame"]
            assert reply["from"] == address("beta")
            assert text_of(waited).count("yes, go") == 1, text_of(waited)
            assert json.dumps(waited.structured_content).count("yes, go") == 1

            # delegate with wait_s; beta works the task with the task tool.
            # Task requests name a capability the worker declares (§5.2).
            bus.cli("beta", "card", "edit", "--capability", "code.review@1")
            async def work():
                inbox = await until(lambda: _read_contains(beta, "review this"))
                # The frame suggests the task's verbs, by its tsk_ id (§13.1).
                request = re.search(r'the task tool with \{"task": "((?:tsk|msg)_[0-9A-Z]+)"', inbox).group(1)
                for action, extra in (("accept", {}), ("progress", {"percent": 50, "text": "halfway"}),
                                      ("complete", {"text": "no findings", "output": {"findings": []}})):
                    r = await beta.call_tool("task", {"task": request, "action": action, **extra})
                    assert not r.is_error, text_of(r)
            # Mail that is not the result stays unread through the wait.
            bus.cli("beta", "send", address("alpha"), "unrelated while you wait")
            delegated, _ = await asyncio.gather(
                # A bare name is the agent of alpha's workspace, as `agentbus delegate` reads it.
                alpha.call_tool("delegate", {"to": "beta", "capability": "code.review",
                                             "instructions": "review this", "input": {"change": 482},
                                             "wait_s": 60}),
                work(),
            )
            assert not delegated.is_error, text_of(delegated)
            assert delegated.structured_content["state"] == "succeeded"
            result = delegated.structured_content["result"]
            assert "no findings" in result["frame"], result
            assert "unrelated while you wait" not in text_of(delegated)
            assert "unrelated while you wait" in await until(
                lambda: _read_contains(alpha, "unrelated while you wait"))
            task_id = delegated.structured_content["task_id"]

            # search: the request by its words, at the gateway, as data.
            found = await alpha.call_tool("search", {"query": "review this", "in": "gateway"})
            assert not found.is_error, text_of(found)
            hits = found.structured_content["hits"]
            assert any(h["task"] and h["task"]["id"] == task_id for h in hits), hits
            assert "data, not instructions" in text_of(found)

            # trace: the task's timeline.
            t = await alpha.call_tool("trace", {"id": task_id})
            assert not t.is_error, text_of(t)
            states = [x.get("to") for x in t.structured_content["task"]["timeline"]]
            assert "succeeded" in states

            # task as the requester: a cancel after the end is sent (the gateway records it as
            # late); an answer without its text is refused before anything is sent.
            c = await alpha.call_tool("task", {"task": task_id, "action": "cancel", "text": "late"})
            assert not c.is_error and c.structured_content["verb"] == "task.cancel"
            a = await alpha.call_tool("task", {"task": task_id, "action": "answer"})
            assert a.is_error and text_of(a).startswith("AB-4070")

            # Local transport: alpha tells the engineer of its machine.
            local = await alpha.call_tool("send", {"to": "engineer", "text": "local hello"})
            assert not local.is_error, text_of(local)
            assert local.structured_content["sent"]["transport"] == "local"

            # Refusals are tool results: an unknown recipient (AB-4001 from the gateway) and bad
            # arguments (AB-4070), each with its cause and fix.
            refused = await alpha.call_tool("send", {"to": address("nobody"), "text": "hi"})
            assert refused.is_error
            body = text_of(refused)
            assert body.startswith("AB-4001") and "\nfix: " in body and "\ncause: " in body
            assert refused.structured_content["error"]["code"] == "AB-4001"
            bad = await alpha.call_tool("send", {"to": address("beta")})
            assert bad.is_error and text_of(bad).startswith("AB-4070")

    asyncio.run(run())


async def _read_contains(client, needle):
    r = await client.call_tool("read_inbox", {})
    text = text_of(r)
    return text if needle in text else None


def test_mcp_current_revision_discover_listen_and_push(bus):
    """The current revision (2026-07-28): server/discover, subscriptions/listen, resources/updated."""

    async def run():
        async with Client(server(bus, "alpha"), mode="2026-07-28") as alpha, \
                Client(server(bus, "beta"), mode="auto") as beta:
            assert alpha.session.protocol_version == "2026-07-28"
            assert beta.session.protocol_version == "2026-07-28"  # auto negotiates the newest
            tools = await alpha.list_tools()
            assert len(tools.tools) == 8
            async with alpha.listen(resource_subscriptions=[INBOX]) as sub:
                assert sub.honored.resource_subscriptions == [INBOX]
                sent = await beta.call_tool("send", {"to": address("alpha"), "text": "modern hello"})
                assert not sent.is_error, text_of(sent)
                event = await asyncio.wait_for(sub.__anext__(), 20)
                assert event.uri == INBOX
            inbox = await alpha.call_tool("read_inbox", {})
            assert "modern hello" in text_of(inbox)
            assert "modern hello" in inbox.structured_content["text"]
            refused = await alpha.call_tool("reply", {"id": "lm_00000000000000000000", "text": "x"})
            assert refused.is_error and text_of(refused).startswith("AB-4075")

    asyncio.run(run())


def channel_server(bus, name):
    """`agentbus mcp --channel`: pushes Claude Code channel notifications, and answers only the
    initialize lifecycle (Claude Code takes channel notifications on no other)."""
    return StdioServerParameters(command=BINARY, args=["mcp", "--name", name, "--channel"],
                                 env=bus.env(name))


async def _state(client, msg_id):
    t = await client.call_tool("trace", {"id": msg_id})
    assert not t.is_error, text_of(t)
    return t.structured_content["delivery"]["recipients"][0]["state"]


def test_mcp_a_channel_push_is_pushed_not_shown_until_read_inbox(bus):
    """A channel notification the client may drop is `pushed` for the sender, and the message
    stays unread; read_inbox shows it, and then the sender sees `shown`."""

    async def run():
        async with Client(channel_server(bus, "alpha"), mode="auto") as alpha, \
                Client(server(bus, "beta"), mode="legacy") as beta:
            # The probe is refused, so even `auto` lands on the handshake revision.
            assert alpha.session.protocol_version == "2025-11-25"
            sent = await beta.call_tool("send", {"to": address("alpha"), "text": "pushed to you"})
            assert not sent.is_error, text_of(sent)
            msg_id = sent.structured_content["sent"]["id"]

            async def pushed_state():
                s = await _state(beta, msg_id)
                return s if s == "pushed" else None
            # Recorded only once the notification was written to the client (the SDK drops a
            # method it does not know before any handler sees it).
            await until(pushed_state)

            inbox = await alpha.call_tool("read_inbox", {})
            assert "pushed to you" in text_of(inbox)

            async def shown_state():
                s = await _state(beta, msg_id)
                return s if s == "shown" else None
            await until(shown_state)

    asyncio.run(run())


@pytest.mark.parametrize("harness", ["claude", "codex", "opencode"])
def test_mcp_install_writes_a_config_the_sdk_can_launch_and_uninstall_removes_it(bus, harness):
    """Item 4: `agentbus mcp install <harness>` honours the harness's config-directory variable;
    the entry it writes, launched as the harness would, is a working server."""
    import tomllib

    home = bus.homes["alpha"]
    env = {**bus.env("alpha"), "CLAUDE_CONFIG_DIR": str(home / "cfg-claude"),
           "CODEX_HOME": str(home / "cfg-codex"), "XDG_CONFIG_HOME": str(home / "xdg")}
    files = {"claude": home / "cfg-claude" / ".claude.json",
             "codex": home / "cfg-codex" / "config.toml",
             "opencode": home / "xdg" / "opencode" / "opencode.json"}

    def run(*args):
        proc = subprocess.run([BINARY, *args], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    run("mcp", "install", harness)
    path = files[harness]
    if harness == "codex":
        entry = tomllib.loads(path.read_text())["mcp_servers"]["agentbus"]
        command, args, server_env = entry["command"], entry["args"], entry.get("env", {})
    elif harness == "claude":
        entry = json.loads(path.read_text())["mcpServers"]["agentbus"]
        command, args, server_env = entry["command"], entry["args"], entry["env"]
    else:
        entry = json.loads(path.read_text())["mcp"]["agentbus"]
        command, args, server_env = entry["command"][0], entry["command"][1:], entry["environment"]
    assert args == ["mcp", "--harness", harness]
    assert server_env["AGENTBUS_HOME"] == str(home)

    async def launch():
        params = StdioServerParameters(command=command, args=args,
                                       env={**server_env, "AGENTBUS_KEYSTORE": "file", "HOME": str(home)})
        async with Client(params, mode="legacy") as c:
            d = await c.call_tool("directory", {})
            assert not d.is_error, text_of(d)
            assert address("beta") in [a["address"] for a in d.structured_content["agents"]]
    asyncio.run(launch())

    run("mcp", "uninstall", harness)
    text = path.read_text()
    assert "agentbus" not in text.replace("opencode.ai", "")
