"""WP-10-5: an agent card served in the A2A form, parsed by the official A2A
Python SDK's AgentCard (a2a-sdk, pinned) without loss of the fields §10 maps, and discovered at
the A2A well-known path only where the card's visibility allows it."""

import asyncio
import json
import urllib.error
import urllib.request

import httpx
import pytest
from a2a.client.card_resolver import A2ACardResolver, parse_agent_card
from a2a.client.errors import AgentCardResolutionError
from google.protobuf.json_format import MessageToDict

from conftest import address

CAPABILITY = {
    "name": "code.review",
    "version": "1",
    "description": "Review a diff and return findings.",
    "input_schema": {"type": "object", "properties": {"artifact_id": {"type": "string"}}},
    "output_schema": {"type": "object", "properties": {"findings": {"type": "array"}}},
    "accepts_attachments": ["text/x-diff", "text/plain"],
    "typical_duration_s": 300,
}


def http(method, url, token=None, body=None):
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None)
    req.add_header("content-type", "application/json")
    if token:
        req.add_header("authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_wp_10_5_the_a2a_card_parses_in_the_a2a_sdk_with_every_mapped_field(bus):
    alpha = bus.profile("alpha")
    agent, token = alpha["agent_id"], alpha["token"]
    status, _ = http("PATCH", f"{bus.url}/v1/agents/{agent}", token, {
        "description": "Reviews Go and TypeScript changes.", "capabilities": [CAPABILITY],
        "tags": ["backend", "review"],
    })
    assert status == 200
    status, doc = http("GET", f"{bus.url}/v1/agents/{agent}/a2a", token)
    assert status == 200, doc
    card = parse_agent_card(json.loads(json.dumps(doc)))

    assert card.name == "alpha"
    assert card.description == "Reviews Go and TypeScript changes."
    endpoint = f"{bus.url}/v1/agents/{agent}"
    assert [i.url for i in card.supported_interfaces] == [endpoint]
    assert list(card.default_input_modes) == ["application/json"]
    assert list(card.default_output_modes) == ["application/json"]
    [skill] = card.skills
    assert skill.name == "code.review" and skill.id == "code.review/v1"
    assert skill.description == CAPABILITY["description"]
    assert list(skill.input_modes) == ["application/json", "text/x-diff", "text/plain"]
    assert list(skill.output_modes) == ["application/json"]
    assert "review" in skill.tags
    # What A2A has no field for rides in the AgentBus extension, whole.
    [ext] = card.capabilities.extensions
    params = MessageToDict(ext.params)
    assert params["address"] == address("alpha")
    [schema] = params["capabilities"]
    assert schema["input_schema"] == CAPABILITY["input_schema"]
    assert schema["output_schema"] == CAPABILITY["output_schema"]
    assert "agentbus" in card.security_schemes


def test_wp_10_5_well_known_discovery_serves_only_public_cards_without_a_credential(public_bus):
    bus = public_bus
    alpha = bus.profile("alpha")
    agent, token = alpha["agent_id"], alpha["token"]
    endpoint = f"{bus.url}/v1/agents/{agent}"

    async def resolve(headers=None):
        async with httpx.AsyncClient() as client:
            return await A2ACardResolver(client, endpoint).get_agent_card(
                http_kwargs={"headers": headers or {}})

    # A workspace card is not discoverable without a credential, and the refusal is the same as
    # for an agent that does not exist.
    with pytest.raises(AgentCardResolutionError):
        asyncio.run(resolve())
    hidden = http("GET", f"{endpoint}/.well-known/agent-card.json")
    missing = http("GET", f"{bus.url}/v1/agents/agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V/.well-known/agent-card.json")
    assert hidden[0] == missing[0] == 404
    assert hidden[1]["error"]["code"] == missing[1]["error"]["code"]
    # With the agent's credential the resolver gets it; made public, anyone does.
    assert asyncio.run(resolve({"authorization": f"Bearer {token}"})).name == "alpha"
    assert http("PATCH", endpoint, token, {"visibility": "public"})[0] == 200
    card = asyncio.run(resolve())
    assert card.name == "alpha"
    assert [i.url for i in card.supported_interfaces] == [endpoint]
