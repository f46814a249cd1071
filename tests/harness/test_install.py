"""What an install leaves the real harness: Codex runs our hook only once the user trusted it
(`agentbus hooks install codex --trust`, or `hooks trust codex`), and OpenCode starts with our
plugin while the npm registry is unreachable."""

from model_server import run, say
from runner import REGISTRY, prompt, token
from tables import row


@row("hook", "installed, not trusted", "not claimed", ["codex"])
@row("hook", "after hooks trust", "shown", ["codex"])
def test_codex_runs_no_hook_until_trusted_then_shows_the_waiting_message(make_env, server):
    env = make_env("codex", trust=False)
    server.script(say("First turn done."))
    env.turn(prompt("first"))
    # Untrusted, Codex skipped the hook: this machine never saw the session.
    assert env._only_session() is None, "an untrusted hook ran"
    assert untrusted(env), "hooks status does not say the hook is untrusted"
    word = token()
    env.tell(word, to=env.address_of_thread())
    server.script(run("echo step-two"), say("Second turn done."))
    env.turn(prompt("second"))
    assert not env.contained(word)
    assert not (env.bus / "messages" / "seen").exists(), "something was claimed"
    env.agentbus("hooks", "trust", "codex")
    assert not untrusted(env)
    server.script(run("echo step-three"), say("Third turn done."))
    env.turn(prompt("third"))
    env.check(word)


def untrusted(env):
    """Whether `hooks status` reports any of our Codex hook entries as not trusted."""
    import json
    doc = json.loads(env.agentbus("--json", "hooks", "status", "codex").stdout)
    trust = json.dumps(doc).lower()
    assert "trust" in trust, doc
    return "untrusted" in trust or "not_trusted" in trust or "not trusted" in trust


@row("hook", "the npm registry unreachable", "shown", ["opencode"])
def test_opencode_starts_and_delivers_with_the_registry_unreachable(make_env, server):
    env = make_env("opencode")
    before = len(REGISTRY.hits)
    word = token()
    server.script(run("echo step-one", before=lambda _: env.tell(word)), say("Done."))
    env.turn(prompt())
    env.check(word)
    assert REGISTRY.hits[before:] == [], f"OpenCode asked the registry: {REGISTRY.hits[before:]}"
