"""WP-5-1, WP-2.2-1, WP-12: our schema files are valid draft 2020-12 for an independent validator,
and the spec's own examples validate, signatures aside."""

import json

import pytest
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

from conftest import PROTOCOL, REPO, SCHEMAS, dumps, minimal_envelope

BASE = "https://komsary.agentbus.exchange/schemas/"
FILES = sorted(p for p in SCHEMAS.rglob("*.json"))
EXAMPLES = sorted((REPO / "tests" / "data" / "envelopes" / "spec").glob("*.json"))


def registry():
    resources = [(BASE + str(p.relative_to(SCHEMAS)), Resource.from_contents(json.loads(p.read_text()))) for p in FILES]
    return Registry().with_resources(resources)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SCHEMAS)))
def test_wp_5_1_every_schema_is_valid_draft_2020_12(path):
    schema = json.loads(path.read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["$id"] == BASE + str(path.relative_to(SCHEMAS))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_wp_2_2_1_spec_examples_validate(agentbus, path):
    raw = path.read_bytes()
    env = json.loads(raw)
    # Independently: the data against its schema, with formats checked.
    schema_url = env["schema"]
    schema = json.loads((SCHEMAS / schema_url.removeprefix(BASE)).read_text())
    validator = Draft202012Validator(schema, registry=registry(), format_checker=FormatChecker())
    assert list(validator.iter_errors(env["data"])) == []
    # And through the CLI, the placeholder signature set aside (G-WP-20).
    out = agentbus("--json", "envelope", "validate", "--no-sig-check", str(path))
    assert json.loads(out.stdout) == {"valid": True, "violations": []}


def test_schema_verdicts_agree_with_python_jsonschema(agentbus):
    cases = [
        ("agentbus.task.result", {"task_id": "tsk_1", "status": "done"}, False),
        ("agentbus.task.result", {"task_id": "tsk_1", "status": "failed", "failure": {"code": "cancelled"}}, True),
        ("agentbus.message", {"text": "x", "attachments": [{"ref": "blob://acme/blb_X", "name": "a", "size": 1, "sha256": "AB"}]}, False),
        ("agentbus.message", {"text": "x", "format": "text/plain", "context": {"repo": "r"}}, True),
        ("agentbus.system.expired", {"original_message_id": "msg_1", "expired_at": "yesterday"}, False),
        ("agentbus.system.expired", {"original_message_id": "msg_1", "expired_at": "2026-10-10T14:00:00Z"}, True),
        ("agentbus.task.progress", {"task_id": "tsk_1", "usage_delta": {"reported_by": "user"}}, False),
    ]
    for name, data, valid in cases:
        schema = json.loads((SCHEMAS / name / "v1.json").read_text())
        validator = Draft202012Validator(schema, registry=registry(), format_checker=FormatChecker())
        assert (not list(validator.iter_errors(data))) == valid, (name, data)
        env = minimal_envelope(type=name + ".v1", schema=BASE + name + "/v1.json", data=data, sig="ed25519:key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V:placeholder")
        if name.startswith("agentbus.task."):
            env["correlation_id"] = "msg_01J9ZK7A0000000000000000A0"
        out = agentbus("--json", "envelope", "validate", "--no-sig-check", stdin=dumps(env), check=False)
        verdict = json.loads(out.stdout)
        assert verdict["valid"] == valid, (name, data, verdict)
        if not valid:
            assert {v["code"] for v in verdict["violations"]} == {"AB-3011"}
