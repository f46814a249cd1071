"""Times canonicalise + sign and canonicalise + verify of the 1 KiB envelope in
tests/data/signing/one-kibibyte.json (docs/benchmarks.md, beside the Rust figure).

    .venv/bin/python sdk/python/bench/signing.py
"""

from __future__ import annotations

import json
import pathlib
import statistics
import time

from agentbus import envelope as E

CASE = pathlib.Path(__file__).resolve().parents[3] / "tests" / "data" / "signing" / "one-kibibyte.json"


def per_call_us(fn, n: int) -> float:
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(runs)


def main() -> None:
    case = json.loads(CASE.read_text())
    key = E.SigningKey(E.b64url_decode(case["seed"]))
    env = dict(case["envelope"])
    E.sign(env, key, case["key_id"])
    size = len(json.dumps(env, separators=(",", ":")).encode())
    sign_us = per_call_us(lambda: E.sign(dict(case["envelope"]), key, case["key_id"]), 2000)
    verify_us = per_call_us(lambda: E.verify(env, key.public_key), 2000)
    print(f"envelope {size} bytes: canonicalise + sign {sign_us:.1f} µs, canonicalise + verify {verify_us:.1f} µs")


if __name__ == "__main__":
    main()
