"""Ids (§2.1: a prefix and 26 Crockford base32 characters, time-ordered), timestamps, traceparents."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def mint(prefix: str, now_ms: int | None = None) -> str:
    """A new id ``<prefix>_<26 chars>``: 48 bits of milliseconds then 80 random bits, as a ULID."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms & ((1 << 48) - 1)) << 80 | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return f"{prefix}_{''.join(reversed(chars))}"


def now_rfc3339(now_ms: int | None = None) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ``, as the Rust core writes ``time``."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    t = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def new_traceparent() -> str:
    """A new W3C traceparent, version 00, sampled."""
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"


def child_traceparent(parent: str | None) -> str:
    """The same trace under a new span; a new trace when ``parent`` is not a traceparent."""
    parts = (parent or "").split("-")
    if len(parts) == 4 and len(parts[1]) == 32:
        return f"00-{parts[1]}-{os.urandom(8).hex()}-{parts[3]}"
    return new_traceparent()
