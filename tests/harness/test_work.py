"""`agentbus work` on the real harnesses: a task delegated through a real gateway is worked by the
real Claude Code, Codex or OpenCode against the scripted model server.

The requester (the gateway fixture's `sender`) delegates with `agentbus delegate --capability`,
answers with `agentbus answer` and cancels with `agentbus cancel`; the worker agent's card offers
the capability. Every assertion is on what the model was sent (the recorded requests) and on the
gateway's task record (`agentbus --json trace`), never on the worker's own output.
"""

import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

from model_server import _strings, call, run, say
from runner import BINARIES, BINARY, FRAME, PREAMBLE, token, wait_until

HARNESSES = ["claude", "codex", "opencode"]
CAPABILITY = "code.review"
# How long a task may take to reach a state. A cancel is answered well inside the gateway's own
# 60 s grace, which would record `cancelled` by itself (wire protocol §6.2).
STATE_TIMEOUT = 90
CANCEL_TIMEOUT = 15

# What each harness must be given to run its shell tool without a prompt nobody could answer:
# Claude Code through its flags; Codex and OpenCode through the config `runner.Env` writes.
WORKER_ARGS = {"claude": ["--arg=--allowedTools", "--arg=Bash"], "codex": [], "opencode": []}


def ask_tool(harness, question, options):
    """A call of the harness's ask-the-user tool, in the shape its model sees it declared."""
    opts = [{"label": o, "description": f"compare against {o}"} for o in options]
    if harness == "claude":
        return call("AskUserQuestion", {"questions": [
            {"question": question, "header": "Branch", "options": opts, "multiSelect": False}]})
    if harness == "codex":
        return call("request_user_input", {"questions": [
            {"id": "branch", "header": "Branch", "question": question, "options": opts}]})
    return call("question", {"questions": [
        {"question": question, "header": "Branch", "options": opts}]})


def model_strings(req):
    """Every string the model was sent; a string that is itself a JSON document (Codex hands the
    model a tool's output as JSON text) counts as the strings inside it."""
    for s in req.texts():
        doc = None
        if s.lstrip()[:1] in ("{", "["):
            try:
                doc = json.loads(s)
            except ValueError:
                pass
        if isinstance(doc, (dict, list)):
            yield from _strings(doc)
        else:
            yield s


def count_in(req, word):
    return sum(s.count(word) for s in model_strings(req))


def frames_in(req):
    """The §13.1 frames of a request: (attributes, head, body)."""
    return [(m.group("attrs"), m.group("head"), m.group("body"))
            for s in model_strings(req) for m in FRAME.finditer(s)]


def processes_with(marker):
    """(pid, argv) of every live process whose command line contains `marker`."""
    found = []
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(marker.encode() in a for a in argv):
            found.append((int(d.name), [a.decode("utf-8", "replace") for a in argv if a]))
    return found


class Work:
    """A worker agent on the gateway running `agentbus work` with one real harness, and the
    requester's commands against it."""

    def __init__(self, harness, env, gateway, tmp):
        self.harness, self.env, self.gateway = harness, env, gateway
        self.name = "reviewer"
        gateway.connect(env, self.name)
        env.agentbus("card", "edit", "--capability", f"{CAPABILITY}@1")
        self.log = tmp / f"worker-{harness}.log"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [BINARY, "--json", "work", "--harness", harness, "--program",
                 str(BINARIES[harness]), *WORKER_ARGS[harness], "--heartbeat", "0s"],
                env=env.env, cwd=env.work, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT)

    def requester(self, *args):
        g = self.gateway
        proc = g._run(g._env(g.sender_home), "--json", *args)
        return json.loads(proc.stdout) if proc.stdout.strip() else None

    def delegate(self, text):
        doc = self.requester("delegate", "--capability", CAPABILITY, "--progress-timeout", "600",
                             self.gateway.address(self.name), text)
        return doc["task_id"]

    def trace(self, task):
        return self.requester("trace", task)

    def until(self, task, states, timeout=STATE_TIMEOUT):
        """The task's trace once its state is one of `states`."""
        last = {}

        def reached():
            last["t"] = self.trace(task)
            return last["t"] if last["t"]["task"]["state"] in states else None

        try:
            return wait_until(reached, timeout, f"task {task} to be {'/'.join(states)}")
        except AssertionError as e:
            state = last.get("t", {}).get("task", {}).get("state")
            raise AssertionError(f"{e}; it is {state}; worker:\n{self.worker_log()}") from None

    def worker_log(self):
        return self.log.read_text()[-3000:] if self.log.exists() else ""

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def timeline(trace):
    """The task's envelopes as (short type, data)."""
    return [(e["type"].removeprefix("agentbus.").removesuffix(".v1"), e["data"])
            for e in trace["conversation"]["envelopes"]]


def result_of(trace):
    results = [d for k, d in timeline(trace) if k == "task.result"]
    assert len(results) == 1, f"task.result envelopes: {results}"
    return results[0]


@pytest.fixture
def work(make_env, gateway, tmp_path):
    """work(harness): the worker for `harness`, stopped at the end of the test."""
    made = []

    def make(harness):
        # No hooks: the worker drives the harness itself; the hook route has its own suite.
        env = make_env(harness, hooks=False)
        w = Work(harness, env, gateway, tmp_path)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


def main_requests(server):
    """The requests of the harness's own loop (they offer tools), in order."""
    return [r for r in server.model_requests() if r.has_tools]


def assert_request_framed(server, word, task):
    """The task request reached the model once, as data: a §13.1 frame of the gateway's
    `task.request` for this task holds the instructions."""
    reqs = main_requests(server)
    assert reqs, "the model got no request"
    assert max(count_in(r, word) for r in server.model_requests()) <= 1
    hits = [f for f in frames_in(reqs[0]) if word in f[2]]
    assert len(hits) == 1, f"the task's instructions are in {len(hits)} frames of the first request"
    attrs, head, _ = hits[0]
    assert head.startswith(PREAMBLE), head
    for attr in ('type="agentbus.task.request.v1"', 'transport="gateway"', f'task="{task}"'):
        assert attr in attrs, attrs


@pytest.mark.parametrize("harness", HARNESSES)
def test_work_succeeds_with_the_models_answer(work, server, harness):
    w = work(harness)
    word, answer = token("review"), f"Reviewed the change: no findings ({token('answer')})."
    server.script(say(answer))
    task = w.delegate(f"harness-suite: review change {word}.")
    t = w.until(task, ["succeeded", "failed", "cancelled"])
    assert t["task"]["state"] == "succeeded", (timeline(t), w.worker_log())
    assert result_of(t)["summary"] == answer
    kinds = [k for k, _ in timeline(t)]
    assert kinds[0] == "task.request" and "task.accept" in kinds, kinds
    assert_request_framed(server, word, task)


@pytest.mark.parametrize("harness", HARNESSES)
def test_work_needs_input_and_the_answer_reaches_the_model_framed(work, server, harness):
    w = work(harness)
    word, reply = token("review"), token("branch")
    question = "Which branch should I compare against?"
    asked = []
    ask = ask_tool(harness, question, ["main", "release"])
    ask.before = asked.append
    final = f"Compared against the chosen branch: no findings ({token('answer')})."
    server.script(ask, say(final))
    task = w.delegate(f"harness-suite: review change {word}.")
    t = w.until(task, ["needs_input", "succeeded", "failed", "cancelled"])
    assert t["task"]["state"] == "needs_input", (timeline(t), w.worker_log())
    needs = [d for k, d in timeline(t) if k == "task.needs_input"]
    assert len(needs) == 1 and needs[0]["question"] == question, needs
    assert needs[0].get("options") == ["main", "release"], needs
    assert not any(reply in r for r in server.model_requests())

    w.requester("answer", task, reply)
    t = w.until(task, ["succeeded", "failed", "cancelled"])
    assert t["task"]["state"] == "succeeded", (timeline(t), w.worker_log())
    assert result_of(t)["summary"] == final

    # The request after the question holds the answer once, as a framed `task.input`; no request
    # before it holds it, and none holds it twice.
    reqs = server.model_requests()
    assert len(asked) == 1
    at = next(i for i, r in enumerate(reqs) if r is asked[0])
    after = [r for r in reqs[at + 1:] if r.has_tools]
    assert after, "the model was never asked again after the question"
    assert not any(reply in r for r in reqs[:at + 1])
    assert max(count_in(r, reply) for r in reqs) == 1, [count_in(r, reply) for r in reqs]
    assert count_in(after[0], reply) == 1
    hits = [f for f in frames_in(after[0]) if reply in f[2]]
    assert len(hits) == 1, f"the answer is in {len(hits)} frames of the next request"
    attrs, head, body = hits[0]
    assert head.startswith(PREAMBLE), head
    assert body.strip() == reply, body
    for attr in ('type="agentbus.task.input.v1"', 'transport="gateway"', f'task="{task}"'):
        assert attr in attrs, attrs
    assert_request_framed(server, word, task)


@pytest.mark.parametrize("harness", HARNESSES)
def test_work_cancel_mid_turn_ends_a_lingering_tool(work, server, harness):
    w = work(harness)
    # The marker is a file that does not exist: `tail` says so and follows /dev/null on, and the
    # marker sits in the command line of every process of the tool, to find them by.
    marker = token("linger")
    tail = f"tail -f /dev/null {marker}"
    command = f"(trap '' TERM; exec {tail}) & echo started; {tail}"
    server.script(run(command), say("never reached"))
    task = w.delegate(f"harness-suite: review change {token('review')}.")
    try:
        # Mid-turn: both tails run, one of them deaf to SIGTERM.
        wait_until(lambda: len([p for p in processes_with(marker) if p[1][0] == "tail"]) == 2,
                 STATE_TIMEOUT, "the tool's two tail processes")
        asked = len(main_requests(server))
        started = time.monotonic()
        w.requester("cancel", task)
        t = w.until(task, ["cancelled", "succeeded", "failed"], timeout=CANCEL_TIMEOUT)
        took = time.monotonic() - started
        assert t["task"]["state"] == "cancelled", (timeline(t), w.worker_log())
        result = result_of(t)
        assert result["failure"]["code"] == "cancelled", result
        left = processes_with(marker)
        assert not left, f"still running {took:.1f}s after the cancel: {left}"
        assert len(main_requests(server)) == asked, "the model was asked again after the cancel"
    finally:
        for pid, _ in processes_with(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("harness", HARNESSES)
def test_work_harness_crash_fails_the_task(work, server, harness):
    w = work(harness)
    server.script(run("kill -9 $PPID"), say("never reached"))
    task = w.delegate(f"harness-suite: review change {token('review')}.")
    t = w.until(task, ["succeeded", "failed", "cancelled"])
    assert t["task"]["state"] == "failed", (timeline(t), w.worker_log())
    failure = result_of(t)["failure"]
    assert failure["code"] == "harness_crashed", failure
    # The reason says how the harness ended (all three die of the SIGKILL here).
    assert "SIGKILL" in failure.get("message", ""), failure
    # The harness died in its tool call: the model was asked once, never after.
    assert len(main_requests(server)) == 1, len(main_requests(server))
