#!/usr/bin/env python3
"""STAND-IN for `codex app-server` (no model behind it).

It speaks the app-server protocol as OpenAI documents it (developers.openai.com/codex/app-server,
codex-rs/app-server/README.md): JSON-RPC 2.0 without the "jsonrpc" member, one message per line;
initialize/initialized, thread/start, turn/start, turn/interrupt; notifications turn/started,
item/started, item/completed (agentMessage, commandExecution), thread/tokenUsage/updated and
turn/completed (status completed | interrupted | failed); the server request
item/tool/requestUserInput, answered {answers: {<question id>: {answers: [...]}}}.

Scenario (--standin-scenario, JSON): {"model", "steps": [{"say"}, {"run": cmd}, {"ask": {...}},
{"wait_interrupt": true | "exit" | "deaf"}, {"linger": {"ignore_term": bool}}, {"fail": message},
{"usage": {...}}, {"crash": code}]}. Everything it
receives is appended to --standin-log.
"""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid

args = sys.argv[1:]


def opt(name):
    for a in args:
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


SCENARIO = json.load(open(opt("--standin-scenario")))
LOG = opt("--standin-log")
PARENT = os.getppid()
THREAD = "thr_" + uuid.uuid4().hex[:12]
TURN = "turn_" + uuid.uuid4().hex[:12]


def log(entry):
    with open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


log({"argv": args})
if "app-server" not in args:
    print("error: this stand-in only runs `codex app-server`", file=sys.stderr)
    sys.exit(2)

inbox = queue.Queue()


def reader():
    for line in sys.stdin:
        if line.strip():
            msg = json.loads(line)
            log({"in": msg})
            inbox.put(msg)
    inbox.put(None)


threading.Thread(target=reader, daemon=True).start()


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Interrupted(Exception):
    pass


def take(want=None, timeout=0.05):
    """Handles client messages; returns the response to server request `want` when it comes."""
    while True:
        if os.getppid() != PARENT:
            sys.exit(0)
        try:
            msg = inbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if msg is None:
            sys.exit(0)
        m = msg.get("method")
        if m == "turn/interrupt":
            out({"id": msg["id"], "result": {}})
            raise Interrupted()
        if m is None and want is not None and msg.get("id") == want:
            return msg
        if m is not None and "id" in msg:
            out({"id": msg["id"], "error": {"code": -32600, "message": "unexpected " + m}})


def wait_request(method):
    while True:
        if os.getppid() != PARENT:
            sys.exit(0)
        msg = inbox.get()
        if msg is None:
            sys.exit(0)
        if msg.get("method") == method:
            return msg


def item(kind, **fields):
    i = dict(type=kind, id="item_" + uuid.uuid4().hex[:8], **fields)
    out({"method": "item/started", "params": {"threadId": THREAD, "turnId": TURN, "item": i}})
    out({"method": "item/completed", "params": {"threadId": THREAD, "turnId": TURN, "item": i}})


def completed(status, error=None):
    out({"method": "turn/completed", "params": {"threadId": THREAD, "turn": {
        "id": TURN, "items": [], "status": status, "error": error}}})


def main():
    init = wait_request("initialize")
    out({"id": init["id"], "result": {"userAgent": "codex-standin/0.60.0", "platformFamily": "unix"}})
    wait_request("initialized")
    start = wait_request("thread/start")
    out({"id": start["id"], "result": {"thread": {"id": THREAD}, "model": SCENARIO.get("model", "gpt-5.1-codex")}})
    out({"method": "thread/started", "params": {"thread": {"id": THREAD}}})
    turn = wait_request("turn/start")
    out({"id": turn["id"], "result": {"turn": {"id": TURN, "status": "inProgress", "items": [], "error": None}}})
    out({"method": "turn/started", "params": {"threadId": THREAD, "turn": {"id": TURN, "status": "inProgress", "items": []}}})
    try:
        for step in SCENARIO["steps"]:
            take(timeout=0)
            if "say" in step:
                item("agentMessage", text=step["say"])
            elif "run" in step:
                item("commandExecution", command=step["run"], status="completed", exitCode=0)
            elif "usage" in step:
                u = step["usage"]
                out({"method": "thread/tokenUsage/updated", "params": {"threadId": THREAD, "turnId": TURN,
                     "tokenUsage": {"total": u, "last": u, "modelContextWindow": 272000}}})
            elif "ask" in step:
                q = step["ask"]
                rid = 900
                out({"method": "item/tool/requestUserInput", "id": rid, "params": {
                    "threadId": THREAD, "turnId": TURN, "itemId": "item_q",
                    "questions": [{"id": "q1", "header": "Question", "question": q["question"],
                                   "options": [{"label": o, "description": o} for o in q.get("options", [])]}]}})
                answer = None
                while answer is None:
                    answer = take(want=rid)
                log({"answered": answer})
            elif "linger" in step:
                # A command's background process: it keeps the server's stdout and stderr
                # (inherited) open while it lives; with "ignore_term" it outlives SIGTERM.
                ignore = (lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)) if step["linger"].get("ignore_term") else None
                log({"linger": subprocess.Popen(["sleep", "600"], preexec_fn=ignore).pid})
            elif "wait_interrupt" in step:
                # true: the turn ends interrupted; "exit": the server exits at once; "deaf": it
                # never acts on the interrupt.
                mode = step["wait_interrupt"]
                while True:
                    try:
                        take()
                    except Interrupted:
                        if mode == "exit":
                            log({"exit": "on the interrupt"})
                            os._exit(0)
                        if mode != "deaf":
                            raise
            elif "fail" in step:
                completed("failed", {"message": step["fail"]})
                return
            elif "crash" in step:
                os._exit(step["crash"])
        completed("completed")
    except Interrupted:
        completed("interrupted")
    # The server stays up until its stdin closes.
    while inbox.get() is not None:
        pass


main()
