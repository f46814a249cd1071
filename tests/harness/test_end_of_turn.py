"""The end of a turn on the real harnesses (docs/local.md, "End of turn"): a message that arrives
while the model writes its last answer keeps the session going with the message shown, once
(Claude Code's and Codex's `Stop`, OpenCode's `session.idle`); `normal` does so unless the
setting says wait; consecutive continuations are bounded, so two sessions cannot keep each other
running forever."""

import itertools

import pytest

from model_server import say
from runner import prompt, token
from tables import row

# crates/agentbus-local/src/consts.rs
STOP_CONTINUES = 3


@row("hook", "end of turn", "shown")
@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_a_message_arriving_during_the_last_answer_keeps_the_session_going(
        make_env, server, harness):
    env = make_env(harness)
    word = token()
    # Sent while the model writes its final answer: every hook of the turn before Stop has run.
    server.script(say("All done.", before=lambda _: env.tell(word)), say("Read it."))
    env.turn(prompt())
    reqs = env.requests_of_session()
    assert word not in reqs[0]
    assert len(reqs) == 2, f"the session did not go on for the message ({len(reqs)} requests)"
    env.check(word)


@row("hook", "end of turn", "shown", ["opencode"])
def test_opencode_goes_on_at_session_idle_with_the_message(make_env, server):
    env = make_env("opencode").serve()
    word = token()
    server.script(say("All done.", before=lambda _: env.tell(word)), say("Read it."))
    env.serve_turn(prompt())
    server.wait_for(lambda reqs: any(word in r for r in reqs if r.has_tools), timeout=90)
    env.check(word)


@row("hook", "end of turn, normal set to wait", "not claimed")
@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_with_normal_set_to_wait_a_tell_waits_for_the_next_prompt(make_env, server, harness):
    env = make_env(harness)
    env.env["AGENTBUS_STOP_NORMAL"] = "wait"
    word = token()
    server.script(say("All done.", before=lambda _: env.tell(word)))
    env.turn(prompt("first"))
    assert len(env.requests_of_session()) == 1, "a normal message kept the session going"
    assert not env.contained(word)
    assert not env.recorded_local(word), "recorded as shown, never in a request"
    server.script(say("Second turn done."))
    env.turn(prompt("second"))
    env.check(word)


@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_continuations_in_a_row_are_bounded(make_env, server, harness):
    env = make_env(harness)
    peers = itertools.count()

    def another(_):
        # A new sender each time: a fresh pair's window admits one unacknowledged message.
        env.tell(token(), sender=f"peer{next(peers)}")

    # Every answer of the session brings another message: only the bound ends the turn.
    server.when(lambda r: r.has_tools and env.prompt_marker in r, say("ok", before=another),
                times=None)
    env.turn(prompt())
    assert len(env.requests_of_session()) == 1 + STOP_CONTINUES


@row("hook", "end of turn, a low-priority gateway message", "not claimed")
@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_a_low_priority_message_waits_for_the_next_prompt(make_env, server, gateway, harness):
    env = make_env(harness, agent=gateway.address("worker"))
    gateway.connect(env, "worker")
    word = token()

    def arrive(_):
        gateway.send("worker", word, priority="low")
        env.agentbus("sidecar", "--once")

    server.script(say("All done.", before=arrive))
    env.turn(prompt("first"))
    assert len(env.requests_of_session()) == 1, "a low-priority message kept the session going"
    assert not env.contained(word) and not env.recorded_gateway(word)
    server.script(say("Second turn done."))
    env.turn(prompt("second"))
    env.check(word, gateway=True)


@row("hook", "end of turn, a high-priority gateway message, normal set to wait", "shown")
@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_a_high_priority_message_keeps_the_session_going_when_normal_waits(
        make_env, server, gateway, harness):
    env = make_env(harness, agent=gateway.address("worker"))
    env.env["AGENTBUS_STOP_NORMAL"] = "wait"
    gateway.connect(env, "worker")
    word = token()

    def arrive(_):
        gateway.send("worker", word, priority="high")
        env.agentbus("sidecar", "--once")

    server.script(say("All done.", before=arrive), say("Read it."))
    env.turn(prompt())
    assert len(env.requests_of_session()) == 2, "the session did not go on for the message"
    env.check(word, gateway=True)
