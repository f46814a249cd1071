"""The suite's own checks catch a broken delivery: a hook that claims a message and records it
as shown while its answer never reaches the harness fails `check`."""

import pytest

from model_server import run, say
from runner import BINARY, prompt, token


def test_a_hook_whose_answer_is_lost_fails_the_check(make_env, server, tmp_path):
    lossy = tmp_path / "lossy-hook"
    # The real hook, run whole (it claims and records), with its answer thrown away.
    lossy.write_text(f'#!/bin/sh\n"{BINARY}" "$@" >/dev/null\n')
    lossy.chmod(0o755)
    env = make_env("claude", program=str(lossy))
    word = token()
    server.script(run("echo step-one", before=lambda _: env.tell(word)), say("Done."))
    env.turn(prompt())
    assert not env.contained(word)
    assert env.recorded_local(word), "the lossy hook did not claim the message"
    with pytest.raises(AssertionError):
        env.check(word)
