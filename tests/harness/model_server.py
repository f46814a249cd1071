"""A scripted model server for the real harnesses: it records every request and answers from a script.

One server speaks the three APIs the harnesses use, each with SSE streaming:
- Anthropic Messages (`POST /v1/messages`, Claude Code), and `count_tokens`;
- OpenAI Responses (`POST /v1/responses`, Codex with `wire_api = "responses"`);
- OpenAI chat completions (`POST /v1/chat/completions`, OpenCode's `@ai-sdk/openai-compatible`).

A script is a queue of model turns (`say(text)`, `run(cmd, ...)` for one or several parallel calls
of the harness's shell tool, `call(name, input)` for another of its tools) taken in order by the
harness's main requests (those offering tools), and rules (`when(match, reply)`) that answer any
request matching first; a request without tools (a title, a summary) that no rule matches gets a
short text. A turn's `before` runs when its request arrives, before the answer is sent, so a
test can act "while the model thinks".
"""

import http.server
import itertools
import json
import socketserver
import threading
import time

_ids = itertools.count(1)


class Reply:
    """One model turn: text, or calls of the harness's shell tool (several are parallel calls)."""

    def __init__(self, text=None, commands=(), before=None, tool=None):
        self.text = text
        self.commands = list(commands)
        self.before = before
        # Another tool of the harness, (name, input): Claude Code's `Agent` for a subagent.
        self.tool = tool


def say(text, before=None):
    return Reply(text=text, before=before)


def run(*commands, before=None):
    return Reply(commands=commands, before=before)


def call(name, tool_input, before=None):
    """A call of the harness's tool `name`, with `tool_input` as its arguments (all three APIs)."""
    return Reply(tool=(name, tool_input), before=before)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


class Request:
    """One recorded request: its path, parsed body and arrival time (time.monotonic())."""

    def __init__(self, path, raw, at):
        self.path = path
        self.raw = raw
        self.at = at
        try:
            self.body = json.loads(raw) if raw else {}
        except ValueError:
            self.body = {}

    @property
    def has_tools(self):
        return bool(self.body.get("tools"))

    def texts(self):
        """Every string of the body: what the model is sent (tool arguments included)."""
        return list(_strings(self.body))

    def count(self, needle):
        return sum(s.count(needle) for s in self.texts())

    def __contains__(self, needle):
        return self.count(needle) > 0

    def tool_names(self):
        names = []
        for t in self.body.get("tools") or []:
            names.append(t.get("name") or (t.get("function") or {}).get("name"))
        return names


class ModelServer:
    def __init__(self):
        self.requests = []
        self.errors = []
        self._queue = []
        self._rules = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server._record(self.path, "")
                self._json(200, {"object": "list", "data": [], "models": []})

            def do_HEAD(self):
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                req = server._record(self.path, raw)
                try:
                    server._answer(self, req)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                except Exception as e:  # reported by the test, never a hung harness
                    server.errors.append(f"{self.path}: {e!r}")
                    self._json(500, {"error": {"type": "api_error", "message": repr(e)}})

            def _json(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, events):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for name, data in events:
                    chunk = ""
                    if name:
                        chunk += f"event: {name}\n"
                    chunk += "data: " + (data if isinstance(data, str) else json.dumps(data))
                    self.wfile.write((chunk + "\n\n").encode())
                    self.wfile.flush()
                self.close_connection = True

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- the script ---------------------------------------------------------------------------

    def script(self, *replies):
        """Appends turns answered, in order, to the main requests (those that offer tools)."""
        with self._lock:
            self._queue.extend(replies)
        return self

    def when(self, match, reply, times=1):
        """Answers `reply` to a request containing `match` (a string, or a predicate on the
        Request), `times` times (None: always); rules are tried before the queue."""
        with self._lock:
            self._rules.append([match, reply, times])
        return self

    def _pick(self, req):
        with self._lock:
            for rule in self._rules:
                match, reply, times = rule
                ok = match(req) if callable(match) else match in req.raw
                if ok and (times is None or times > 0):
                    if times is not None:
                        rule[2] -= 1
                    return reply
            if req.has_tools and self._queue:
                return self._queue.pop(0)
        return say("Done." if req.has_tools else "Harness test")

    # -- what the model was sent ----------------------------------------------------------------

    def _record(self, path, raw):
        req = Request(path, raw, time.monotonic())
        with self._changed:
            self.requests.append(req)
            self._changed.notify_all()
        return req

    def model_requests(self):
        """The requests that asked the model for a turn (not count_tokens, not GETs)."""
        return [r for r in list(self.requests) if r.body and not r.path.startswith("/v1/messages/count")
                and ("messages" in r.body or "input" in r.body)]

    def wait_for(self, predicate, timeout=60):
        """Blocks until predicate(self.requests) holds; returns its value."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                value = predicate(self.requests)
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the model server never saw the awaited request")
                self._changed.wait(left)

    # -- answering ------------------------------------------------------------------------------

    def _answer(self, h, req):
        path = req.path.split("?")[0]
        if path.endswith("/messages/count_tokens"):
            return h._json(200, {"input_tokens": 100})
        if not path.endswith(("/messages", "/responses", "/chat/completions")):
            return h._json(404, {"error": {"type": "not_found", "message": path}})
        reply = self._pick(req)
        if reply.before is not None:
            reply.before(req)
        if path.endswith("/messages"):
            return self._anthropic(h, req, reply)
        if path.endswith("/responses"):
            return self._responses(h, req, reply)
        return self._chat(h, req, reply)

    @staticmethod
    def _tool(req, preferred):
        names = req.tool_names()
        for name in preferred:
            if name in names:
                return name
        raise AssertionError(f"no shell tool among {names}")

    def _anthropic(self, h, req, reply):
        n = next(_ids)
        blocks = []
        if reply.tool:
            blocks.append({"type": "tool_use", "id": f"toolu_{n:04d}", "name": reply.tool[0],
                           "input": reply.tool[1]})
        elif reply.commands:
            tool = self._tool(req, ["Bash"])
            for i, cmd in enumerate(reply.commands):
                blocks.append({"type": "tool_use", "id": f"toolu_{n:04d}{i:02d}", "name": tool,
                               "input": {"command": cmd, "description": f"step {i}"}})
        else:
            blocks.append({"type": "text", "text": reply.text})
        stop = "tool_use" if reply.commands or reply.tool else "end_turn"
        usage = {"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
        model = req.body.get("model", "claude-test")
        message = {"id": f"msg_{n:04d}", "type": "message", "role": "assistant", "model": model,
                   "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
        if not req.body.get("stream"):
            message.update(content=blocks, stop_reason=stop)
            return h._json(200, message)
        events = [("message_start", {"type": "message_start", "message": message})]
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                events += [
                    ("content_block_start", {"type": "content_block_start", "index": i,
                                             "content_block": {"type": "text", "text": ""}}),
                    ("content_block_delta", {"type": "content_block_delta", "index": i,
                                             "delta": {"type": "text_delta", "text": b["text"]}}),
                ]
            else:
                events += [
                    ("content_block_start", {"type": "content_block_start", "index": i,
                                             "content_block": {**b, "input": {}}}),
                    ("content_block_delta", {"type": "content_block_delta", "index": i,
                                             "delta": {"type": "input_json_delta",
                                                       "partial_json": json.dumps(b["input"])}}),
                ]
            events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        events += [
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop,
                                                                  "stop_sequence": None},
                               "usage": {"output_tokens": 10}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        h._sse(events)

    def _responses(self, h, req, reply):
        n = next(_ids)
        items = []
        if reply.tool:
            item = {"type": "function_call", "id": f"fc_{n:04d}", "call_id": f"call_{n:04d}",
                    "name": reply.tool[0], "arguments": json.dumps(reply.tool[1])}
            # Codex offers an MCP server's tools as a `namespace` tool (`mcp__<server>`): a call
            # names the namespace and the tool apart.
            for t in req.body.get("tools") or []:
                ns = t.get("name") or ""
                if t.get("type") == "namespace" and reply.tool[0].startswith(ns + "__"):
                    item.update(namespace=ns, name=reply.tool[0][len(ns) + 2:])
            items.append(item)
        elif reply.commands:
            tool = self._tool(req, ["exec_command", "shell", "local_shell"])
            for i, cmd in enumerate(reply.commands):
                args = {"cmd": cmd} if tool == "exec_command" else {"command": ["bash", "-lc", cmd]}
                items.append({"type": "function_call", "id": f"fc_{n:04d}{i:02d}",
                              "call_id": f"call_{n:04d}{i:02d}", "name": tool,
                              "arguments": json.dumps(args)})
        else:
            items.append({"type": "message", "role": "assistant", "id": f"msg_{n:04d}",
                          "content": [{"type": "output_text", "text": reply.text,
                                       "annotations": []}]})
        rid = f"resp_{n:04d}"
        events = [("response.created", {"type": "response.created",
                                        "response": {"id": rid, "status": "in_progress"}})]
        for i, item in enumerate(items):
            events.append(("response.output_item.added", {"type": "response.output_item.added",
                                                          "output_index": i, "item": item}))
            if item["type"] == "message":
                events.append(("response.output_text.delta", {
                    "type": "response.output_text.delta", "item_id": item["id"],
                    "output_index": i, "content_index": 0, "delta": reply.text}))
            events.append(("response.output_item.done", {"type": "response.output_item.done",
                                                         "output_index": i, "item": item}))
        events.append(("response.completed", {
            "type": "response.completed",
            "response": {"id": rid, "status": "completed", "output": items,
                         "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
                                   "output_tokens": 10,
                                   "output_tokens_details": {"reasoning_tokens": 0},
                                   "total_tokens": 110}}}))
        h._sse(events)

    def _chat(self, h, req, reply):
        n = next(_ids)
        base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": req.body.get("model", "test")}

        def chunk(delta, finish=None, **extra):
            return (None, {**base, "choices": [{"index": 0, "delta": delta,
                                                "finish_reason": finish}], **extra})

        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        if reply.tool:
            calls = [{"index": 0, "id": f"call_{n:04d}", "type": "function",
                      "function": {"name": reply.tool[0], "arguments": json.dumps(reply.tool[1])}}]
        elif reply.commands:
            tool = self._tool(req, ["bash"])
            calls = [{"index": i, "id": f"call_{n:04d}{i:02d}", "type": "function",
                      "function": {"name": tool, "arguments": json.dumps(
                          {"command": cmd, "description": f"step {i}"})}}
                     for i, cmd in enumerate(reply.commands)]
        if reply.commands or reply.tool:
            events = [chunk({"role": "assistant", "content": None, "tool_calls": calls}),
                      chunk({}, "tool_calls", usage=usage)]
        else:
            events = [chunk({"role": "assistant", "content": reply.text}),
                      chunk({}, "stop", usage=usage)]
        if not req.body.get("stream"):
            msg = {"role": "assistant", "content": reply.text}
            if reply.commands or reply.tool:
                msg["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
            return h._json(200, {**base, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": msg,
                 "finish_reason": "tool_calls" if reply.commands or reply.tool else "stop"}]})
        h._sse(events + [(None, "[DONE]")])
