"""The published workspace policy schema is valid draft 2020-12 for an independent
validator (Python jsonschema), and that validator gives every document of the gateway's own case
file the verdict the gateway gives it, violation paths included."""

import json

from jsonschema import Draft202012Validator

from conftest import REPO

GATEWAY = REPO / "crates" / "agentbus-gateway"
SCHEMA = GATEWAY / "schemas" / "gateway" / "policy" / "v1.json"
CASES = GATEWAY / "tests" / "data" / "policy" / "documents.cases"


def cases():
    for n, line in enumerate(CASES.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        expect, rest = line.split(" ", 1)
        if expect == "ok":
            yield n, None, json.loads(rest)
        else:
            paths, doc = rest.split(" ", 1)
            want = {"" if p == "-" else p for p in paths.split(",")}
            yield n, want, json.loads(doc)


def test_the_policy_schema_is_valid_draft_2020_12():
    schema = json.loads(SCHEMA.read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["$id"] == "https://komsary.agentbus.exchange/schemas/gateway/policy/v1.json"
    assert schema["properties"]["default"]["default"] == "deny"


def test_python_jsonschema_agrees_with_the_gateway_on_every_policy_case():
    validator = Draft202012Validator(json.loads(SCHEMA.read_text()))
    seen = 0
    for n, want, doc in cases():
        got = {"".join(f"/{p}" for p in e.absolute_path) for e in validator.iter_errors(doc)}
        if want is None:
            assert not got, f"documents.cases line {n}: {got}"
        else:
            assert got == want, f"documents.cases line {n}: {got} != {want}"
        seen += 1
    assert seen >= 20
