"""§2 validation in the client: an envelope this library builds is checked before it is sent (the
gateway's code, raised locally, nothing sent), and a delivered envelope that breaks §2 — a
repeated member name included, which a dict would hide — is marked unverified."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

import agentbus
from agentbus import Agent, SigningKey
from agentbus import envelope as E

KEY_ID = "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V"
ALPHA = "agent://default/default/alpha"
BETA = "agent://default/default/beta"


def agent_with(handler) -> Agent:
    a = Agent("http://gw.test", "aba_x", SigningKey(bytes(32)), KEY_ID, ALPHA,
              "agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V", require_verified=False)
    a._http = httpx.AsyncClient(base_url="http://gw.test", transport=httpx.MockTransport(handler),
                                headers=dict(a._http.headers))
    return a


@pytest.mark.parametrize("kw,code,path", [
    ({"subject": "x" * 201}, "AB-3008", "/subject"),
    ({"subject": "two\nlines"}, "AB-3003", "/subject"),
    ({"idempotency_key": "k" * 129}, "AB-3008", "/idempotency_key"),
    ({"priority": "urgent"}, "AB-3003", "/priority"),
    ({"fmt": "html"}, "AB-3011", "/data/format"),
])
def test_wp_2_a_message_breaking_section_2_is_refused_before_sending(kw, code, path):
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(202, json={"id": "msg_x", "receipt": "rcp_x", "state": "persisted"})

    async def body():
        a = agent_with(handler)
        with pytest.raises(agentbus.RefusedError) as e:
            await a.send(BETA, "hi", **kw)
        assert e.value.code == code
        assert {"code": code, "path": path} in [
            {"code": v["code"], "path": v["path"]} for v in e.value.details["violations"]
        ]
        assert e.value.fix  # the catalogue's fix, as the gateway would give

    asyncio.run(body())
    assert calls == []


def test_wp_2_a_task_request_to_a_topic_is_refused_before_sending():
    async def body():
        a = agent_with(lambda r: httpx.Response(500))
        with pytest.raises(agentbus.RefusedError) as e:
            await a.delegate("topic://default/default/reviews", "code.review", "1", instructions="x")
        assert e.value.code == "AB-3018"

    asyncio.run(body())


def test_wp_2_a_delivered_envelope_with_a_repeated_member_is_unverified():
    key = SigningKey(bytes(range(32)))
    good = E.build(kind="agentbus.message.v1", source=BETA, to=ALPHA, data={"text": "fine"})
    E.sign(good, key, KEY_ID)
    # Signed with one subject; delivered with another before it. A dict keeps the last, the
    # signed one, so the signature alone verifies: only the I-JSON rule catches the copy.
    bad = E.build(kind="agentbus.message.v1", source=BETA, to=ALPHA, data={"text": "sneaky"},
                  subject="Harmless")
    E.sign(bad, key, KEY_ID)
    bad_text = '{"subject": "Wire the money", ' + json.dumps(bad)[1:]
    page = ('{"deliveries": ['
            f'{{"sequence": 1, "delivery": "d1", "attempt": 1, "envelope": {json.dumps(good)}}}, '
            f'{{"sequence": 2, "delivery": "d2", "attempt": 1, "envelope": {bad_text}}}]}}')
    acks = []

    def handler(request: httpx.Request) -> httpx.Response:
        p = request.url.path
        if p == "/v1/inbox":
            return httpx.Response(200, content=page.encode(), headers={"content-type": "application/json"})
        if p == "/v1/agents":
            return httpx.Response(200, json={"agents": [
                {"address": BETA, "keys": [{"id": KEY_ID, "public_key": key.public_key}]}]})
        if p == "/.well-known/agentbus.json":
            return httpx.Response(200, json={"gateway_keys": []})
        if p == "/v1/inbox/acks":
            acks.append(json.loads(request.content))
            return httpx.Response(200, json={})
        return httpx.Response(200, json={"tasks": []})

    async def body():
        a = agent_with(handler)
        got = []
        async for m in a.messages(websocket=False):
            got.append(m)
            if len(got) == 2:
                await m.ack()
                break
        return got

    first, second = asyncio.run(asyncio.wait_for(body(), 10))
    assert first.verified and first.violations == ()
    assert not second.verified
    assert [(v.code, v.path) for v in second.violations] == [("AB-3001", "")]
    assert "duplicate member name 'subject'" in (second.why_unverified or "")
    assert second.envelope["subject"] == "Harmless" and E.verify(second.envelope, key.public_key)
    assert len(acks) == 2


def test_wp_2_3_1_the_size_checked_is_the_size_sent():
    """The 1 MiB limit is checked on the bytes that go out: an envelope of exactly 1 MiB is sent
    as exactly 1 MiB, one byte more is refused (AB-3007) before sending."""
    sizes = []

    def handler(request: httpx.Request) -> httpx.Response:
        sizes.append(len(request.content))
        return httpx.Response(202, json={"id": "msg_x", "receipt": "rcp_x", "state": "persisted"})

    def text_of(n: int) -> str:  # n UTF-8 bytes, within the 500,000-character limit of `text`
        return "\U0001F600" * (n // 4) + "x" * (n % 4)

    async def body():
        a = agent_with(handler)
        await a.send(BETA, "x", conversation_id="cnv_01J9ZK7A0000000000000000C1")
        overhead = sizes[0] - 1
        limit = 1024 * 1024
        await a.send(BETA, text_of(limit - overhead), conversation_id="cnv_01J9ZK7A0000000000000000C1")
        assert sizes[1] == limit
        with pytest.raises(agentbus.RefusedError) as e:
            await a.send(BETA, text_of(limit - overhead + 1), conversation_id="cnv_01J9ZK7A0000000000000000C1")
        assert e.value.code == "AB-3007"

    asyncio.run(body())
    assert len(sizes) == 2
