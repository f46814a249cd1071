"""WP-1-1 (G-WP-1): the official CloudEvents SDK refuses the wire names, and parses the projection."""

import json

import pytest
from cloudevents.core.exceptions import CloudEventValidationError
from cloudevents.core.formats.json import JSONFormat

from conftest import dumps, minimal_envelope


def test_wp_1_1_wire_names_break_the_sdk_and_the_projection_parses(agentbus, tmp_path):
    key = tmp_path / "k.key"
    public = json.loads(agentbus("--json", "keys", "generate", "--out", str(key)).stdout)["public_key"]
    env = minimal_envelope(
        budget={"currency": "USD", "max": "2.00"},
        x_trace_tag=True,
        correlation_id="msg_01J9ZK7A0000000000000000A0",
    )
    signed = agentbus("envelope", "sign", "--key", str(key), "--key-id", "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V", stdin=dumps(env)).stdout
    delivered = json.loads(signed) | {"sequence": 4182, "to_id": "agt_01J9ZK7A0000000000000000A2", "hops": []}
    # As the spec writes it, the SDK refuses the envelope (the names have underscores).
    with pytest.raises(CloudEventValidationError):
        JSONFormat().read(None, dumps(delivered))
    projected = agentbus("envelope", "cloudevent", stdin=dumps(delivered)).stdout
    event = JSONFormat().read(None, projected)
    attrs = event.get_attributes()
    assert attrs["conversationid"] == env["conversation_id"]
    assert attrs["type"] == "agentbus.message.v1"
    assert event.get_data() == env["data"]
    # And back, losslessly: the signature still verifies.
    restored = agentbus("envelope", "cloudevent", "--reverse", stdin=projected).stdout
    assert json.loads(restored) == delivered
    agentbus("envelope", "verify", "--public-key", public, stdin=restored)
