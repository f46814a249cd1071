"""Send → in the model's next request: how long a message takes to reach the model of a real
harness session that is busy with a turn, per harness, for a local tell and a gateway message.

The scripted model answers at once with a shell call of `true` again and again, so the session
keeps making requests, as a working session does. While the turn runs, a message is sent in the
background (`agentbus tell` to the session, or `agentbus send` through a real gateway to the agent
the session is bound to, whose sidecar holds the WebSocket); the figure is the time from starting
that command to the arrival of the first model request that holds it. The next message is sent
once the model has it, so the samples do not overlap. The model's own thinking time is zero here:
what is measured is the delivery path and the harness (the send command, for the gateway the
publish, push and import, then the harness's tool call, the hook, and the next request).

Run by `scripts/bench-harness` (figures go to docs/benchmarks.md); not part of the test command.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from conftest import Gateway  # noqa: E402
from model_server import ModelServer, run, say  # noqa: E402
from runner import BINARIES, Env, token  # noqa: E402


class Sampler:
    """Sends one message at a time in the background and times its arrival at the model."""

    def __init__(self, env, send, samples):
        self.env = env
        self.send = send
        self.samples = samples
        self.results = []
        self.errors = []
        self._current = None  # (word, started)
        self._lock = threading.Lock()

    def on_request(self, req):
        with self._lock:
            if self._current and self._current[0] in req:
                self.results.append(req.at - self._current[1])
                self._current = None
            if self._current is None and len(self.results) < self.samples:
                word = token("lat")
                self._current = (word, time.monotonic())
                threading.Thread(target=self._send, args=(word,), daemon=True).start()

    def _send(self, word):
        try:
            self.send(word)
        except Exception as e:  # reported after the run: a failed send leaves a sample missing
            self.errors.append(repr(e))

    def done(self):
        return len(self.results) >= self.samples


def percentile(xs, p):
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def measure(harness, kind, samples, tmp):
    server = ModelServer()
    gateway = None
    sidecar = None
    try:
        agent = None
        if kind == "gateway":
            gateway = Gateway(tmp / "gateway")
            agent = Gateway.address("worker")
        env = Env(harness, tmp / harness, server, agent=agent)
        if kind == "gateway":
            gateway.connect(env, "worker")
            sidecar = subprocess.Popen([str(env_binary()), "sidecar"], env=env.env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def send(word):
            if kind == "local":
                env.agentbus("tell", env.address(), word)
            else:
                gateway.send("worker", word)

        sampler = Sampler(env, send, samples)
        # The session must exist (and be bound) before the first message: its first request starts
        # the sampling. Each later answer is another shell call, until every sample is in.
        first = [True]

        def before(req):
            if first[0]:
                first[0] = False
                env.address()
            sampler.on_request(req)

        steps = samples * 12 + 10
        server.script(*[run("true", before=before) for _ in range(steps)])
        server.when(lambda r: r.has_tools and sampler.done(), say("Done."), times=None)
        env.turn("harness-suite latency: keep running true until told to stop")
        if sampler.errors:
            raise RuntimeError(f"sends failed: {sampler.errors[:3]}")
        if len(sampler.results) < samples:
            raise RuntimeError(f"{harness}/{kind}: {len(sampler.results)} of {samples} arrived")
        return sampler.results
    finally:
        if sidecar:
            sidecar.terminate()
            sidecar.wait(timeout=10)
        if gateway:
            gateway.close()
        server.close()


def env_binary():
    from runner import BINARY
    return BINARY


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--harness", action="append", choices=sorted(BINARIES))
    ap.add_argument("--kind", action="append", choices=["local", "gateway"])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    for harness in a.harness or ["claude", "codex", "opencode"]:
        for kind in a.kind or ["local", "gateway"]:
            with tempfile.TemporaryDirectory() as tmp:
                xs = measure(harness, kind, a.samples, pathlib.Path(tmp))
            ms = [x * 1000 for x in xs]
            row = {"harness": harness, "kind": kind, "n": len(ms),
                   "p50_ms": round(statistics.median(ms), 1),
                   "p99_ms": round(percentile(ms, 99), 1),
                   "min_ms": round(min(ms), 1), "max_ms": round(max(ms), 1)}
            rows.append(row)
            print(json.dumps(row) if a.json else
                  f"{harness:9} {kind:8} n={row['n']:3} p50 {row['p50_ms']:7.1f} ms  "
                  f"p99 {row['p99_ms']:7.1f} ms  (min {row['min_ms']}, max {row['max_ms']})",
                  flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
