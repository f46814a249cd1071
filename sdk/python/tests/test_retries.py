"""Retries: a 429/503 answer is tried again after Retry-After with the same signed envelope (the
same id, so the gateway answers a replay, never a second message); a refusal raises at once."""

from __future__ import annotations

import asyncio
import email.utils
import json

import httpx
import pytest

import agentbus
from agentbus import Agent, SigningKey


from agentbus.client import _retry_after

NOW = 1_796_000_000.0  # the injected wall clock (Unix seconds, late 2026)


def agent_with(handler, waits=None) -> Agent:
    """An agent whose retries record their waits in ``waits`` instead of sleeping."""

    async def sleep(seconds: float) -> None:
        if waits is not None:
            waits.append(seconds)

    a = Agent("http://gw.test", "aba_x", SigningKey(bytes(32)), "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V",
              "agent://default/default/alpha", "agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V",
              sleep=sleep, clock=lambda: NOW)
    a._http = httpx.AsyncClient(base_url="http://gw.test", transport=httpx.MockTransport(handler),
                                headers=dict(a._http.headers))
    return a


def test_a_503_is_retried_after_retry_after_with_the_same_envelope():
    bodies, waits = [], []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        assert request.headers["agentbus-sidecar-version"] == agentbus.__version__
        if len(bodies) == 1:
            return httpx.Response(503, headers={"retry-after": "0.3"},
                                  json={"error": {"code": "AB-9002", "message": "busy"}})
        return httpx.Response(202, json={"receipt": "rcp_1", "id": bodies[-1]["id"], "state": "persisted"})

    async def body():
        a = agent_with(handler, waits)
        sent = await a.send("agent://default/default/beta", "hi")
        assert sent.receipt["state"] == "persisted"

    asyncio.run(body())
    assert len(bodies) == 2
    assert bodies[0] == bodies[1]  # the same id and signature: a replay, not a new message
    assert waits == [0.3]


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_as_an_http_date_is_honoured_with_the_same_envelope(status):
    # RFC 9110 §10.2.3: Retry-After is delay-seconds or an HTTP-date; a date is a wait until then,
    # measured on the agent's clock.
    bodies, waits = [], []
    when = email.utils.formatdate(NOW + 7, usegmt=True)  # IMF-fixdate, seven seconds on

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        if len(bodies) < 3:
            return httpx.Response(status, headers={"retry-after": when},
                                  json={"error": {"code": "AB-5001" if status == 429 else "AB-9002",
                                                  "message": "later"}})
        return httpx.Response(202, json={"receipt": "rcp_1", "id": bodies[-1]["id"], "state": "persisted"})

    async def body():
        a = agent_with(handler, waits)
        return await a.send("agent://default/default/beta", "hi")

    sent = asyncio.run(body())
    assert waits == [7.0, 7.0]
    assert len(bodies) == 3 and bodies[0] == bodies[1] == bodies[2]
    assert sent.id == bodies[0]["id"]


def test_retry_after_forms():
    assert _retry_after("120", NOW) == 120.0
    assert _retry_after("0", NOW) == 0.0
    # The three HTTP-date forms RFC 9110 §5.6.7 has recipients accept, all UTC.
    imf = email.utils.formatdate(NOW + 30, usegmt=True)
    assert _retry_after(imf, NOW) == 30.0
    assert _retry_after("Sunday, 06-Nov-94 08:49:37 GMT", 784111777.0 - 5) == 5.0
    assert _retry_after("Sun Nov  6 08:49:37 1994", 784111777.0 - 5) == 5.0
    assert _retry_after(email.utils.formatdate(NOW - 60, usegmt=True), NOW) == 0.0  # past: now
    for bad in (None, "", "soon", "inf", "nan", "-5", "1."):
        assert _retry_after(bad, NOW) is None, bad


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

    waits = []

    async def body():
        a = agent_with(handler, waits)
        a.max_retries = 2
        with pytest.raises(agentbus.AgentBusError) as e:
            await a.send("agent://default/default/beta", "hi")
        assert e.value.code == "AB-5001" and e.value.retry_after == 0.0 and e.value.retryable

    asyncio.run(body())
    assert waits == [0.0, 0.0]
