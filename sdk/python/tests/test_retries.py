"""Retries: a 429/503 answer is tried again after Retry-After with the same signed envelope (the
same id, so the gateway answers a replay, never a second message); a refusal raises at once."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

import agentbus
from agentbus import Agent, SigningKey


def agent_with(handler) -> Agent:
    a = Agent("http://gw.test", "aba_x", SigningKey(bytes(32)), "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V",
              "agent://default/default/alpha", "agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V")
    a._http = httpx.AsyncClient(base_url="http://gw.test", transport=httpx.MockTransport(handler),
                                headers=dict(a._http.headers))
    return a


def test_a_503_is_retried_after_retry_after_with_the_same_envelope():
    bodies, at = [], []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        at.append(time.monotonic())
        assert request.headers["agentbus-sidecar-version"] == agentbus.__version__
        if len(bodies) == 1:
            return httpx.Response(503, headers={"retry-after": "0.3"},
                                  json={"error": {"code": "AB-9002", "message": "busy"}})
        return httpx.Response(202, json={"receipt": "rcp_1", "id": bodies[-1]["id"], "state": "persisted"})

    async def body():
        a = agent_with(handler)
        sent = await a.send("agent://default/default/beta", "hi")
        assert sent.receipt["state"] == "persisted"

    asyncio.run(body())
    assert len(bodies) == 2
    assert bodies[0] == bodies[1]  # the same id and signature: a replay, not a new message
    assert at[1] - at[0] >= 0.3


def test_a_refusal_raises_its_typed_error_at_once():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(403, json={"error": {
            "code": "AB-2001", "message": "policy denies", "doc_url": "http://gw.test/errors/AB-2001",
            "request_id": "req_1"}})

    async def body():
        a = agent_with(handler)
        with pytest.raises(agentbus.RefusedError) as e:
            await a.send("agent://default/default/beta", "hi")
        assert e.value.code == "AB-2001" and e.value.request_id == "req_1"
        assert e.value.doc_url == "http://gw.test/errors/AB-2001" and e.value.fix

    asyncio.run(body())
    assert len(calls) == 1


def test_rate_limits_give_up_after_the_retries_with_the_last_error():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"retry-after": "0"},
                              json={"error": {"code": "AB-5001", "message": "slow down"}})

    async def body():
        a = agent_with(handler)
        a.max_retries = 2
        with pytest.raises(agentbus.AgentBusError) as e:
            await a.send("agent://default/default/beta", "hi")
        assert e.value.code == "AB-5001" and e.value.retry_after == 0.0 and e.value.retryable

    asyncio.run(body())
