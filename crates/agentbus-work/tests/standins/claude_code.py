#!/usr/bin/env python3
"""STAND-IN for Claude Code in headless stream-json mode (no model behind it).

It speaks the protocol the `claude` CLI speaks with `-p --input-format stream-json
--output-format stream-json --verbose --permission-prompt-tool stdio`, as documented by
Anthropic's headless mode page (code.claude.com/docs/en/headless) and the Agent SDK, whose
official Python client (claude-agent-sdk: _internal/query.py, message_parser.py) shows the
message shapes:

- stdin: {"type":"user","message":{"role":"user","content":...}} lines, and control messages
  {"type":"control_request","request_id":…,"request":{"subtype":"interrupt"|"initialize"}} and
  {"type":"control_response","response":{"subtype":"success","request_id":…,"response":{…}}};
- stdout: {"type":"system","subtype":"init","session_id",…}, {"type":"assistant","message":{…,
  "usage":{…}}}, {"type":"user",…tool_result…}, control requests of subtype "can_use_tool"
  (AskUserQuestion, answered with updatedInput.answers), control responses, and a final
  {"type":"result","subtype":…,"usage":{…},"total_cost_usd":…,"session_id":…}.

What it does comes from a scenario file (--standin-scenario), and everything it receives is
appended to a log (--standin-log), so tests can see the interrupt and the answers it got.
"""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid

args = sys.argv[1:]


def opt(name):
    """The value of `--name v` or `--name=v`."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1 :]
    return None


SCENARIO = json.load(open(opt("--standin-scenario")))
LOG = opt("--standin-log")
GATES = opt("--standin-gates") or os.path.dirname(LOG)


def log(entry):
    with open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


log({"argv": args, "cwd": os.getcwd()})

# The CLI's own argument checks, as it reports them.
if opt("--input-format") == "stream-json" and opt("--output-format") != "stream-json":
    print("Error: --input-format=stream-json requires output-format=stream-json.", file=sys.stderr)
    sys.exit(1)
if opt("--output-format") == "stream-json" and "--verbose" not in args:
    print("Error: When using --print, --output-format=stream-json requires --verbose", file=sys.stderr)
    sys.exit(1)
if "-p" not in args and "--print" not in args:
    print("Error: this stand-in only runs headless (-p)", file=sys.stderr)
    sys.exit(1)

RESUMED = opt("--resume")
SESSION = RESUMED or SCENARIO.get("session_id") or str(uuid.uuid4())
MODEL = SCENARIO.get("model", "claude-sonnet-4-5")
PARENT = os.getppid()

inbox = queue.Queue()


def reader():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            log({"unparsed": line})
            continue
        log({"in": msg})
        inbox.put(msg)
    inbox.put(None)


threading.Thread(target=reader, daemon=True).start()


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Interrupted(Exception):
    pass


class Eof(Exception):
    pass


pending = []  # user messages that arrived while a turn ran


def handle_control(msg):
    """Answers control requests from the host; raises Interrupted on an interrupt."""
    req = msg.get("request", {})
    sub = req.get("subtype")
    rid = msg.get("request_id")
    if sub == "interrupt":
        out({"type": "control_response", "response": {"subtype": "success", "request_id": rid, "response": {}}})
        raise Interrupted()
    if sub == "initialize":
        out({"type": "control_response", "response": {"subtype": "success", "request_id": rid,
             "response": {"commands": [], "output_style": "default", "models": []}}})
        return
    out({"type": "control_response", "response": {"subtype": "error", "request_id": rid,
         "error": f"unsupported control request {sub}"}})


def take(wait_for=None, timeout=0.02):
    """Handles what arrived; returns the control_response for `wait_for` when it comes."""
    while True:
        if os.getppid() != PARENT:
            sys.exit(0)  # the host died: so does the CLI, its stdin gone
        try:
            msg = inbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if msg is None:
            raise Eof()
        t = msg.get("type")
        if t == "control_request":
            handle_control(msg)
        elif t == "control_response":
            r = msg.get("response", {})
            if wait_for is not None and r.get("request_id") == wait_for:
                return r
        elif t == "user":
            pending.append(msg)


def usage_of(u):
    u = u or {}
    return {
        "input_tokens": u.get("input_tokens", 0),
        "output_tokens": u.get("output_tokens", 0),
        "cache_creation_input_tokens": u.get("cache_creation_input_tokens", 0),
        "cache_read_input_tokens": u.get("cache_read_input_tokens", 0),
    }


def assistant(content, usage=None):
    out({"type": "assistant", "message": {"id": "msg_" + uuid.uuid4().hex[:24], "type": "message",
         "role": "assistant", "model": MODEL, "content": content, "stop_reason": None,
         "usage": usage_of(usage)}, "parent_tool_use_id": None, "session_id": SESSION,
         "uuid": str(uuid.uuid4())})


def tool_result(tool_use_id, text, is_error=False):
    out({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result",
         "tool_use_id": tool_use_id, "content": text, "is_error": is_error}]},
         "parent_tool_use_id": None, "session_id": SESSION, "uuid": str(uuid.uuid4())})


def result(spec, started, turns):
    r = {"type": "result", "subtype": spec.get("subtype", "success"),
         "is_error": spec.get("is_error", False), "duration_ms": spec.get("duration_ms", int((time.time() - started) * 1000)),
         "duration_api_ms": spec.get("duration_api_ms", 0), "num_turns": turns,
         "result": spec.get("text", ""), "session_id": SESSION,
         "total_cost_usd": spec.get("total_cost_usd", 0.0), "usage": usage_of(spec.get("usage")),
         "modelUsage": {MODEL: {"inputTokens": usage_of(spec.get("usage"))["input_tokens"],
                                "outputTokens": usage_of(spec.get("usage"))["output_tokens"]}},
         "permission_denials": []}
    if "structured_output" in spec:
        r["structured_output"] = spec["structured_output"]
    out(r)


def gate(name):
    path = os.path.join(GATES, name)
    while not os.path.exists(path):
        take()
    log({"gate": name})


def linger(spec):
    """A tool's background process: it keeps the CLI's stdout and stderr (inherited) open for as
    long as it lives; with "ignore_term" it outlives SIGTERM."""
    def ignore():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # With "session", in a session of its own, as Claude Code runs its Bash tool.
    p = subprocess.Popen(["sleep", "600"], preexec_fn=ignore if spec.get("ignore_term") else None,
                         start_new_session=bool(spec.get("session")))
    log({"linger": p.pid})


def wait_interrupt(mode):
    """Waits for the interrupt. true: the turn ends interrupted; "exit": the CLI exits at once,
    without a result; "deaf": the CLI never acts on it."""
    while True:
        try:
            take(timeout=0.05)
        except Interrupted:
            if mode == "exit":
                log({"exit": "on the interrupt"})
                os._exit(0)
            if mode != "deaf":
                raise


def run(steps):
    started = time.time()
    turns = 1
    for step in steps:
        take(timeout=0)
        if "say" in step:
            assistant([{"type": "text", "text": step["say"]}], step.get("usage"))
        elif "tool" in step:
            tid = "toolu_" + uuid.uuid4().hex[:20]
            assistant([{"type": "tool_use", "id": tid, "name": step["tool"], "input": step.get("input", {})}],
                      step.get("usage"))
            tool_result(tid, step.get("output", "ok"))
            turns += 1
        elif "write" in step:
            # The Write tool: the file lands relative to the working folder.
            w = step["write"]
            tid = "toolu_" + uuid.uuid4().hex[:20]
            assistant([{"type": "tool_use", "id": tid, "name": "Write",
                        "input": {"file_path": w["path"], "content": w["text"]}}])
            os.makedirs(os.path.dirname(w["path"]) or ".", exist_ok=True)
            with open(w["path"], "w") as f:
                f.write(w["text"])
            tool_result(tid, "File created successfully at: " + w["path"])
            turns += 1
        elif "gate" in step:
            gate(step["gate"])
        elif "ask" in step:
            q = step["ask"]
            questions = [{"question": q["question"], "header": q.get("header", "Question"),
                          "options": [{"label": o, "description": o} for o in q.get("options", [])],
                          "multiSelect": False}]
            tid = "toolu_" + uuid.uuid4().hex[:20]
            assistant([{"type": "tool_use", "id": tid, "name": "AskUserQuestion", "input": {"questions": questions}}])
            rid = "req_" + uuid.uuid4().hex[:8]
            out({"type": "control_request", "request_id": rid, "request": {
                "subtype": "can_use_tool", "tool_name": "AskUserQuestion", "input": {"questions": questions},
                "tool_use_id": tid, "permission_suggestions": []}})
            # Parallel tool calls go on while the question waits.
            for extra in q.get("meanwhile", []):
                assistant([{"type": "text", "text": extra}])
            answer = None
            while answer is None:
                answer = take(wait_for=rid)
            log({"answered": answer})
            resp = answer.get("response", {})
            if resp.get("behavior") == "allow":
                answers = resp.get("updatedInput", {}).get("answers", {})
                tool_result(tid, "User has answered your questions: " + json.dumps(answers))
            else:
                tool_result(tid, resp.get("message", "denied"), is_error=True)
            turns += 1
        elif "linger" in step:
            linger(step["linger"])
        elif "wait_interrupt" in step:
            wait_interrupt(step["wait_interrupt"])
        elif "crash" in step:
            sys.stdout.flush()
            os._exit(step["crash"])
        elif "garbage" in step:
            sys.stdout.write(step["garbage"] + "\n")
            sys.stdout.flush()
        elif "result" in step:
            result(step["result"], started, turns)
            return


def main():
    script = SCENARIO.get("resume", SCENARIO["steps"]) if RESUMED else SCENARIO["steps"]
    turn = 0
    try:
        while True:
            while not pending:
                try:
                    take(timeout=0.05)
                except Interrupted:
                    pass  # nothing runs between turns: the interrupt has nothing to stop
            msg = pending.pop(0)
            if turn == 0:
                out({"type": "system", "subtype": "init", "session_id": SESSION, "model": MODEL,
                     "cwd": os.getcwd(), "tools": ["Bash", "Read", "Write", "AskUserQuestion"],
                     "mcp_servers": [], "permissionMode": opt("--permission-mode") or "default",
                     "apiKeySource": "none", "claude_code_version": "2.1.240-standin"})
                steps = script
            else:
                steps = SCENARIO.get("followup", [{"result": {"text": "noted"}}])
            turn += 1
            try:
                run(steps)
            except Interrupted:
                out({"type": "user", "message": {"role": "user", "content": [{"type": "text",
                     "text": "[Request interrupted by user]"}]}, "parent_tool_use_id": None,
                     "session_id": SESSION, "uuid": str(uuid.uuid4())})
                result({"subtype": "error_during_execution", "is_error": True}, time.time(), 1)
    except Eof:
        log({"eof": True})
        sys.exit(0)


main()
