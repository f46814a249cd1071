"""The shared conformance data (`tests/data`, README there): the Python library agrees with the
Rust core byte for byte on JCS, Ed25519, signing inputs, frames and the error catalogue."""

from __future__ import annotations

import json

import pytest

import agentbus
from agentbus import envelope as E
from agentbus import validate as V
from agentbus.errors import catalogue, error_for
from agentbus.frame import Frame, frame_envelope, render

from conftest import DATA, REPO

JCS = sorted((DATA / "vectors" / "jcs" / "input").glob("*.json"))


@pytest.mark.parametrize("path", JCS, ids=lambda p: p.name)
def test_wp_3_1_2_jcs_reference_vectors(path):
    value = json.loads(path.read_bytes())
    want = (DATA / "vectors" / "jcs" / "output" / path.name).read_bytes()
    assert E.canonicalize(value) == want


def test_wp_3_1_3_rfc8032_and_cryptography_vectors():
    n = 0
    for line in (DATA / "vectors" / "ed25519" / "rfc8032-and-more-sign.input").read_text().splitlines():
        if not line:
            continue
        f = line.split(":")
        key = E.SigningKey(bytes.fromhex(f[0][:64]))
        msg = bytes.fromhex(f[2])
        assert E.b64url_decode(key.public_key) == bytes.fromhex(f[1])
        assert key.sign(msg).hex() == f[3][:128]
        assert E.verify_raw(bytes.fromhex(f[1]), msg, bytes.fromhex(f[3][:128]))
        n += 1
    assert n == 1024


def test_wp_3_1_3_wycheproof_all_151_cases():
    doc = json.loads((DATA / "vectors" / "ed25519" / "wycheproof-ed25519_test.json").read_text())
    n = 0
    for group in doc["testGroups"]:
        pk = bytes.fromhex(group["publicKey"]["pk"])
        for case in group["tests"]:
            got = E.verify_raw(pk, bytes.fromhex(case["msg"]), bytes.fromhex(case["sig"]))
            assert got == (case["result"] == "valid"), case["tcId"]
            n += 1
    assert n == 151


def test_wp_3_1_3_speccheck_policy_is_the_rust_cores():
    cases = json.loads((DATA / "vectors" / "ed25519" / "speccheck-cases.json").read_text())
    got = [
        E.verify_raw(bytes.fromhex(c["pub_key"]), bytes.fromhex(c["message"]), bytes.fromhex(c["signature"]))
        for c in cases
    ]
    assert got == [i == 3 for i in range(12)]


SIGNING = sorted((DATA / "signing").glob("*.json"))


@pytest.mark.parametrize("path", SIGNING, ids=lambda p: p.stem)
def test_wp_3_1_signing_inputs_and_signatures(path):
    case = json.loads(path.read_text())
    key = E.SigningKey(E.b64url_decode(case["seed"]))
    stem = path.with_suffix("")
    assert E.signing_bytes(case["envelope"]) == stem.with_suffix(".input").read_bytes()
    env = dict(case["envelope"])
    E.sign(env, key, case["key_id"])
    assert env["sig"] + "\n" == stem.with_suffix(".sig").read_text()
    assert key.public_key + "\n" == stem.with_suffix(".pub").read_text()
    assert E.verify(env, key.public_key)
    # Gateway-set attributes do not change the signature; anything else does.
    delivered = {**env, "sequence": 7, "received_at": "2026-10-10T14:00:02Z"}
    assert E.verify(delivered, key.public_key)
    tampered = json.loads(json.dumps(env))
    tampered["data"]["x"] = 1
    assert not E.verify(tampered, key.public_key)


FRAMES = sorted((DATA / "frames").glob("*.json"))


@pytest.mark.parametrize("path", FRAMES, ids=lambda p: p.stem)
def test_wp_13_1_frames_render_byte_for_byte(path):
    c = json.loads(path.read_text())
    f = Frame(
        id=c["id"], local_id=c.get("local_id"), from_=c["from"], kind=c["type"],
        verified=c["verified"], conversation=c["conversation"], transport=c["transport"],
        subject=c["subject"], task=c["task"], late=c["late"], attachments=tuple(c["attachments"]),
        reply_command=c["reply_command"], rest_command=c["rest_command"], body=c["body"],
    )
    assert render(f) == path.with_suffix(".frame").read_text()


ENVELOPE_FRAMES = sorted((DATA / "envelope-frames").glob("*.json"))


@pytest.mark.parametrize("path", ENVELOPE_FRAMES, ids=lambda p: p.stem)
def test_wp_13_1_envelopes_frame_as_the_hook_does(path):
    c = json.loads(path.read_text())
    got = agentbus.frame(
        c["envelope"], request_task=c.get("request_task"), profile=c.get("profile"),
        late=c["late"], local_id=c.get("local_id"),
    )
    assert got == path.with_suffix(".frame").read_text()
    assert got == frame_envelope(
        c["envelope"], request_task=c.get("request_task"), profile=c.get("profile"),
        late=c["late"], local_id=c.get("local_id"),
    )


def test_the_packaged_catalogue_is_the_shared_one():
    packaged = (REPO / "sdk" / "python" / "src" / "agentbus" / "catalogue.json").read_text()
    assert packaged == (DATA / "errors" / "catalogue.json").read_text()
    assert len(catalogue()) > 100


def test_errors_carry_code_cause_fix_and_doc_url():
    e = error_for("AB-1011", "the signature does not verify", gateway="http://127.0.0.1:7700")
    assert isinstance(e, agentbus.RefusedError)
    assert (e.code, e.kind) == ("AB-1011", "refused")
    assert e.cause and e.fix
    assert e.doc_url == "http://127.0.0.1:7700/errors/AB-1011"
    old = error_for("AB-6002", "sidecar 0.0.1 is older than this gateway's minimum 9.0")
    assert isinstance(old, agentbus.SidecarTooOldError)
    assert "min_sidecar_version" in old.upgrade_hint
    assert "upgrade:" in str(old)


def _case(path):
    header, _, body = path.read_text().partition("---\n")
    expected = sorted({
        tuple((line[len("# expect: "):].split(" ", 1) + [""])[:2])
        for line in header.splitlines() if line.startswith("# expect: ")
    })
    return expected, body


def _violations(raw: bytes, **kw):
    """The `(code, path)` pairs of an envelope, as the Rust test computes them: a parse failure
    is its code with an empty path."""
    try:
        env = V.parse(raw)
    except agentbus.AgentBusError as e:
        return [(e.code, "")]
    return sorted({(v.code, v.path) for v in V.validate(env, **kw)})


# Every case of both folders runs here: the library applies every §2 rule the Rust core does,
# the gateway-only G-WP cases included (the library ships the same data schemas). A case that
# could not apply to a client would be listed here by name with its reason; none is.
NOT_APPLICABLE: dict[str, str] = {}
ENVELOPE_CASES = sorted((DATA / "envelopes" / "ok").glob("*.case")) + sorted(
    (DATA / "envelopes" / "err").glob("*.case")
)


@pytest.mark.parametrize("path", ENVELOPE_CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_wp_2_envelope_cases_give_the_rust_cores_codes_and_paths(path):
    expected, body = _case(path)
    assert path.parent.name == ("ok" if not expected else "err")
    assert _violations(body.encode()) == expected


def test_wp_2_every_envelope_case_runs():
    assert not NOT_APPLICABLE
    assert len(ENVELOPE_CASES) >= 70
    assert len([p for p in ENVELOPE_CASES if p.parent.name == "err"]) >= 50


@pytest.mark.parametrize("path", sorted((DATA / "envelopes" / "spec").glob("*.json")), ids=lambda p: p.stem)
def test_wp_2_2_1_the_spec_examples_validate_signatures_aside(path):
    assert _violations(path.read_bytes(), check_sig_form=False) == []
    # With the signature check on, only the placeholder `sig` is at fault (G-WP-20).
    assert _violations(path.read_bytes()) == [("AB-1010", "/sig")]


def test_wp_2_3_1_size_limit_is_exactly_one_mebibyte():
    assert not any(v.code == "AB-3007" for v in V.validate({}, received_bytes=1_048_576))
    assert any(v.code == "AB-3007" for v in V.validate({}, received_bytes=1_048_577))
    with pytest.raises(agentbus.RefusedError) as e:
        V.parse(b" " * 1_048_577)
    assert e.value.code == "AB-3007"


def test_wp_5_1_1_text_is_at_most_500000_characters():
    _, body = _case(DATA / "envelopes" / "ok" / "wp-12-1-request-signed-shape.case")
    for n, ok in ((500_000, True), (500_001, False)):
        env = V.parse(body.encode())
        env["data"]["text"] = "é" * n
        found = V.validate(env)
        assert (found == []) == ok, n
        if not ok:
            assert found[0].path == "/data/text"


def test_i_json_nesting_and_numbers_as_the_rust_parser():
    assert V.loads("[" * 64 + "]" * 64) is not None
    for bad in ("[" * 65 + "]" * 65, "[" * 100_000 + "]" * 100_000, "[1e400]", "[NaN]",
                "9007199254740992", b"\xef\xbb\xbf{}", b"\"\xff\""):
        with pytest.raises(ValueError):
            V.loads(bad)
    assert V.loads("[9007199254740991, -9007199254740991, 1.5e300]")


def test_the_packaged_schemas_are_the_rust_cores():
    core = REPO / "crates" / "agentbus-protocol" / "schemas"
    packaged = REPO / "sdk" / "python" / "src" / "agentbus" / "schemas"
    names = sorted(p.relative_to(core) for p in core.rglob("*.json"))
    assert names == sorted(p.relative_to(packaged) for p in packaged.rglob("*.json"))
    for n in names:
        assert (packaged / n).read_bytes() == (core / n).read_bytes(), n


def test_built_envelopes_carry_what_the_rust_core_writes():
    key = E.SigningKey(bytes(32))
    env = E.build(kind="agentbus.message.v1", source="agent://a/b/c", to="agent://a/b/d",
                  data={"text": "hi"}, priority="normal")
    assert list(env) == ["specversion", "id", "source", "type", "time", "datacontenttype", "to",
                         "conversation_id", "traceparent", "schema", "data"]
    assert env["schema"] == "https://komsary.agentbus.exchange/schemas/agentbus.message/v1.json"
    assert env["id"].startswith("msg_") and len(env["id"]) == 30
    E.sign(env, key, "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V")
    assert E.verify(env, key.public_key)
