#!/usr/bin/env python3
"""STAND-IN for `opencode serve` (no model behind it).

It serves the routes of OpenCode's server API that the worker uses, with the shapes OpenCode
documents (opencode.ai/docs/server, the OpenAPI document at /doc, the SDK's types):
GET /event (server-sent events of {type, properties}), POST /session, POST
/session/{id}/prompt_async, GET /session/{id}/message, POST /session/{id}/abort, POST
/question/{id}/reply, POST /session/{id}/permissions/{pid}. It prints
"opencode server listening on http://127.0.0.1:<port>" like the real server.

Scenario (--standin-scenario, JSON): {"model", "provider", "steps": [{"tool": name}, {"say": text},
{"ask": {"question", "options"}}, {"permission": tool}, {"tokens": {...}, "cost": n},
{"wait_interrupt": true | "exit" | "deaf"}, {"linger": {"ignore_term": bool}}]}. Every request is
appended to --standin-log.
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]


def opt(name):
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return a[len(name) + 1:]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


SCENARIO = json.load(open(opt("--standin-scenario")))
LOG = opt("--standin-log")
PARENT = os.getppid()
MODEL = SCENARIO.get("model", "claude-sonnet-4-5")
PROVIDER = SCENARIO.get("provider", "anthropic")
lock = threading.Lock()


def log(entry):
    with lock, open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


log({"argv": args})
if "serve" not in args:
    print("error: this stand-in only runs `opencode serve`", file=sys.stderr)
    sys.exit(2)

subscribers = []
sessions = {}       # id -> list of messages ({info, parts})
answers = {}        # question id -> queue
aborted = threading.Event()


def emit(kind, props):
    for q in list(subscribers):
        q.put({"type": kind, "properties": props})


def now():
    return int(time.time() * 1000)


def run(sid):
    """The turn: plays the scenario's steps, then goes idle."""
    mid = "msg_" + uuid.uuid4().hex[:12]
    info = {"id": mid, "sessionID": sid, "role": "assistant", "modelID": MODEL, "providerID": PROVIDER,
            "time": {"created": now()}, "tokens": {"input": 0, "output": 0, "reasoning": 0,
            "cache": {"read": 0, "write": 0}}, "cost": 0}
    parts = []
    sessions[sid].append({"info": info, "parts": parts})
    emit("session.status", {"sessionID": sid, "status": {"type": "busy"}})
    try:
        for step in SCENARIO["steps"]:
            if aborted.is_set():
                raise InterruptedError()
            if "say" in step:
                part = {"id": "prt_" + uuid.uuid4().hex[:8], "sessionID": sid, "messageID": mid, "type": "text",
                        "text": step["say"], "time": {"start": now(), "end": now()}}
                parts.append(part)
                emit("message.part.updated", {"part": part})
            elif "tool" in step:
                part = {"id": "prt_" + uuid.uuid4().hex[:8], "sessionID": sid, "messageID": mid, "type": "tool",
                        "tool": step["tool"], "callID": "call_1", "state": {"status": "completed", "input": {},
                        "output": "ok", "title": step["tool"]}}
                emit("message.part.updated", {"part": part})
            elif "tokens" in step:
                info["tokens"] = step["tokens"]
                info["cost"] = step.get("cost", 0)
                emit("message.updated", {"info": info})
            elif "ask" in step:
                qid = "que_" + uuid.uuid4().hex[:8]
                answers[qid] = queue.Queue()
                q = step["ask"]
                emit("question.asked", {"id": qid, "sessionID": sid, "questions": [{"question": q["question"],
                     "header": "Question", "options": [{"label": o, "description": o} for o in q.get("options", [])]}]})
                answers[qid].get()
            elif "permission" in step:
                emit("permission.updated", {"id": "per_" + uuid.uuid4().hex[:8], "sessionID": sid,
                     "type": step["permission"], "title": "Run " + step["permission"], "metadata": {}})
            elif "linger" in step:
                # A tool's background process: it keeps the server's stdout and stderr
                # (inherited) open while it lives; with "ignore_term" it outlives SIGTERM.
                ignore = (lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)) if step["linger"].get("ignore_term") else None
                log({"linger": subprocess.Popen(["sleep", "600"], preexec_fn=ignore).pid})
            elif "wait_interrupt" in step:
                # true: the turn ends aborted; "exit": the server exits at once; "deaf": it
                # never acts on the abort.
                mode = step["wait_interrupt"]
                if mode == "deaf":
                    threading.Event().wait()
                aborted.wait()
                if mode == "exit":
                    log({"exit": "on the abort"})
                    os._exit(0)
                raise InterruptedError()
        info["time"]["completed"] = now()
    except InterruptedError:
        info["error"] = {"name": "MessageAbortedError", "data": {"message": "The operation was aborted."}}
        emit("session.error", {"sessionID": sid, "error": info["error"]})
    emit("message.updated", {"info": info})
    emit("session.idle", {"sessionID": sid})


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def send_json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        log({"GET": self.path})
        if self.path == "/event":
            q = queue.Queue()
            subscribers.append(q)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self.wfile.write(b'data: {"type":"server.connected","properties":{}}\n\n')
            self.wfile.flush()
            while True:
                ev = q.get()
                self.wfile.write(("data: " + json.dumps(ev) + "\n\n").encode())
                self.wfile.flush()
        parts = self.path.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "session" and parts[2] == "message":
            return self.send_json(sessions.get(parts[1], []))
        self.send_json({"name": "NotFoundError"}, 404)

    def do_POST(self):
        body = self.body()
        log({"POST": self.path, "body": body})
        parts = self.path.strip("/").split("/")
        if parts == ["session"]:
            sid = "ses_" + uuid.uuid4().hex[:12]
            sessions[sid] = []
            return self.send_json({"id": sid, "title": body.get("title", ""), "directory": os.getcwd(),
                                   "version": "1.0.0-standin", "time": {"created": now(), "updated": now()}})
        if len(parts) == 3 and parts[0] == "session" and parts[2] == "prompt_async":
            sessions[parts[1]].append({"info": {"id": "msg_u", "sessionID": parts[1], "role": "user"},
                                       "parts": body.get("parts", [])})
            threading.Thread(target=run, args=(parts[1],), daemon=True).start()
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if len(parts) == 3 and parts[0] == "session" and parts[2] == "abort":
            aborted.set()
            return self.send_json(True)
        if len(parts) == 4 and parts[0] == "session" and parts[2] == "permissions":
            return self.send_json(True)
        if len(parts) == 3 and parts[0] == "question" and parts[2] == "reply":
            answers[parts[1]].put(body)
            return self.send_json(True)
        self.send_json({"name": "NotFoundError"}, 404)


def watch_parent():
    while os.getppid() == PARENT:
        time.sleep(0.1)
    os._exit(0)


threading.Thread(target=watch_parent, daemon=True).start()
server = ThreadingHTTPServer((opt("--hostname") or "127.0.0.1", int(opt("--port") or 0)), Handler)
server.daemon_threads = True
print(f"opencode server listening on http://{server.server_address[0]}:{server.server_address[1]}", flush=True)
server.serve_forever()
