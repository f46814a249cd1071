"""The hook route on the real harnesses: a message reaches the model's input once, framed (§13.1),
and is recorded as shown exactly when a model request contained it.

Each case runs the real harness headless against the scripted model server; every assertion is on
what the model was sent (the recorded requests) and on the store's record, never on the hook's own
output.
"""

import pytest

from model_server import call, run, say
from runner import BINARY, prompt, spelt, token

HARNESSES = ["claude", "codex", "opencode"]

# A tool command that sends from the engineer's terminal: without the harness's variables the
# command is the engineer's, not the session's (a session's own messages are never shown to it).
# The address is the session running the command, from the variables the harness sets.
SESSION_VARS = "${AGENTBUS_SESSION:-${CLAUDE_CODE_SESSION_ID:-${CODEX_THREAD_ID:-$OPENCODE_SESSION_ID}}}"


def engineer_tell(env, word):
    """The binary by its path: Codex runs commands in a login shell, which resets PATH. It prints
    `told-ok` (spelt so the command itself does not contain it) once the tell is written."""
    return (f'to="{SESSION_VARS}"; env -i HOME="$HOME" AGENTBUS_HOME="$AGENTBUS_HOME" '
            f'{BINARY} tell "$to" {spelt(word)} && echo told-$(echo ok)')


@pytest.mark.parametrize("harness", ["claude"])
def test_tell_before_the_session_starts(make_env, server, harness):
    env = make_env(harness)
    word = token()
    env.tell(word, to=env.address_before_start())
    server.script(say("Noted."))
    env.turn(prompt())
    env.check(word)


@pytest.mark.parametrize("harness", ["codex", "opencode"])
def test_tell_before_the_session_starts_needs_a_session_id(harness):
    pytest.skip(f"{harness} names its session when it starts, so a local tell has no address "
                "before it: messages waiting at a start are the resume case and "
                "test_gateway_message_waiting_when_the_session_starts")


@pytest.mark.parametrize("harness", HARNESSES)
def test_tell_mid_turn_between_prompt_and_tool_call(make_env, server, harness):
    env = make_env(harness)
    word = token()
    # Sent while the model "thinks" about the prompt: the hooks of the prompt have run already.
    server.script(run("echo step-one", before=lambda _: env.tell(word)), say("Done."))
    env.turn(prompt())
    first = env.requests_of_session()[0]
    assert word not in first
    env.check(word)


@pytest.mark.parametrize("harness", HARNESSES)
def test_tell_during_a_tool(make_env, server, harness):
    env = make_env(harness)
    word = token()
    server.script(run(engineer_tell(env, word)), run("echo step-two"), say("Done."))
    env.turn(prompt())
    assert any("told-ok" in r for r in env.requests()), "the tool's tell did not run"
    env.check(word)


@pytest.mark.parametrize("harness", HARNESSES)
def test_tell_between_turns_is_shown_on_resume(make_env, server, harness):
    env = make_env(harness)
    word = token()
    server.script(say("First turn done."))
    env.turn(prompt("first"))
    env.tell(word)
    before = len(env.requests())
    server.script(say("Second turn done."))
    env.turn(prompt("second"))
    assert not any(word in r for r in env.requests()[:before])
    env.check(word)


@pytest.mark.parametrize("harness", HARNESSES)
def test_pause_denies_the_tool_call_and_resume_shows_the_message(make_env, server, harness):
    env = make_env(harness)
    word, reason = token(), token("reason")
    server.script(say("First turn done."))
    env.turn(prompt("first"))
    env.agentbus("pause", env.address(), reason)
    # Sent after the prompt's hooks ran: the turn's only hook event after it is the blocked
    # tool call, which must show nothing.
    server.script(run("echo must-not-\"\"run", before=lambda _: env.tell(word)),
                  say("Paused, waiting."))
    env.turn(prompt("second"))
    reqs = env.requests_of_session()
    assert reason in reqs[-1], "the deny reason never reached the model"
    assert "must-not-run" not in reqs[-1], "the tool ran"
    env.not_shown(word)
    env.agentbus("resume", env.address())
    server.script(run("echo resumed-\"\"ran"), say("Done."))
    env.turn(prompt("third"))
    assert "resumed-ran" in env.requests_of_session()[-1]
    env.check(word)


@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_a_paused_session_is_told_once_per_turn(make_env, server, harness):
    env = make_env(harness)
    reason = token("reason")
    server.script(say("First turn done."))
    env.turn(prompt("first"))
    env.agentbus("pause", env.address(), reason)
    server.script(say("Waiting."))
    env.turn(prompt("second"))
    first_of_turn = [r for r in env.requests_of_session() if "harness-suite: second" in r][0]
    assert first_of_turn.count(reason) == 1, f"pause note {first_of_turn.count(reason)} times"


@pytest.mark.parametrize("harness", HARNESSES)
def test_over_the_budget_messages_wait_and_are_each_shown_once(make_env, server, harness):
    env = make_env(harness)
    server.script(say("First turn done."))
    env.turn(prompt("first"))
    # Each about 3,500 characters: the harness's budget (8,000 to 9,000) holds two at one event.
    words = [token(f"long{i}") for i in range(5)]
    for i, w in enumerate(words):
        # One sender each: a fresh pair's window admits one unacknowledged message.
        env.tell(w + " " + ("lorem ipsum dolor " * 190), sender=f"peer{i}")
    server.script(run("echo a"), run("echo b"), run("echo c"), run("echo d"), say("Done."))
    env.turn(prompt("second"))
    per_request = [[w for w in words if w in r] for r in env.requests_of_session()]
    assert not all(w in env.requests_of_session()[1] for w in words), (
        f"all fitted at once, nothing waited: {per_request}")
    for w in words:
        env.check(w)


@pytest.mark.parametrize("harness", HARNESSES)
def test_parallel_tool_calls_show_the_message_once(make_env, server, harness):
    env = make_env(harness)
    word = token()
    server.script(run("echo p1", "echo p2", "echo p3", before=lambda _: env.tell(word)),
                  say("Done."))
    env.turn(prompt())
    env.check(word)


SUBAGENT_TOOL = {
    # Claude Code's Task tool is `Agent`; OpenCode's is `task` (a child session).
    "claude": ("Agent", {"description": "helper", "prompt": "subagent-task: run one step",
                         "subagent_type": "general-purpose"}),
    "opencode": ("task", {"description": "helper", "prompt": "subagent-task: run one step",
                          "subagent_type": "general"}),
}


@pytest.mark.parametrize("harness", ["claude", "opencode"])
def test_subagent_events_leave_the_message_for_the_session(make_env, server, harness):
    env = make_env(harness)
    word = token()

    def in_subagent(req):
        return req.has_tools and "subagent-task" in req and "harness-suite" not in req

    server.when(in_subagent, run("echo sub-step", before=lambda _: env.tell(word)))
    server.when(in_subagent, say("Subagent finished."))
    server.script(call(*SUBAGENT_TOOL[harness]), run("echo main-step"), say("Done."))
    env.turn(prompt())
    sub = [r for r in env.requests() if in_subagent(r)]
    assert len(sub) >= 2, "the subagent made no requests"
    assert not any(word in r for r in sub), "a subagent was shown the session's message"
    env.check(word)


@pytest.mark.parametrize("harness", ["codex"])
def test_subagent_events_leave_the_message_for_the_session_not_run(harness):
    pytest.skip("codex exec offers the model no subagent tool, and Codex's hook input has no "
                "agent_id to tell a subagent's events apart")


@pytest.mark.parametrize("harness", HARNESSES)
def test_gateway_message_imported_mid_turn(make_env, server, gateway, harness):
    env = make_env(harness, agent=gateway.address("worker"))
    gateway.connect(env, "worker")
    word = token()

    def import_now(_):
        gateway.send("worker", word)
        env.agentbus("sidecar", "--once")

    server.script(run("echo step-one", before=import_now), say("Done."))
    env.turn(prompt())
    env.check(word, gateway=True)


@pytest.mark.parametrize("harness", HARNESSES)
def test_gateway_message_waiting_when_the_session_starts(make_env, server, gateway, harness):
    # The agent identity is an address before any session exists: the session bound to it at its
    # first event is shown what its gateway inbox held (every harness, unlike a local tell).
    env = make_env(harness, agent=gateway.address("worker"))
    gateway.connect(env, "worker")
    word = token()
    gateway.send("worker", word)
    env.agentbus("sidecar", "--once")
    server.script(say("Noted."))
    env.turn(prompt())
    env.check(word, gateway=True)
