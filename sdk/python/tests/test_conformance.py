"""The shared conformance data (`tests/data`, README there): the Python library agrees with the
Rust core byte for byte on JCS, Ed25519, signing inputs, frames and the error catalogue."""

from __future__ import annotations

import json

import pytest

import agentbus
from agentbus import envelope as E
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


def _cases(folder):
    for path in sorted((DATA / "envelopes" / folder).glob("*.case")):
        header, _, body = path.read_text().partition("---\n")
        codes = sorted({l.split()[2] for l in header.splitlines() if l.startswith("# expect: ")})
        yield path, codes, body


def test_wp_2_envelope_cases_parse_or_fail_as_i_json_says():
    # The library does not re-implement §2 validation (the gateway's); it does share the I-JSON
    # rule that a duplicate key is refused, which a Python dict would hide (AB-3001 cases).
    for path, codes, body in _cases("err"):
        if path.name.startswith("i-json-duplicate"):
            with pytest.raises(ValueError):
                json.loads(body, object_pairs_hook=_no_duplicates)
    for path, codes, body in _cases("ok"):
        assert codes == []
        json.loads(body, object_pairs_hook=_no_duplicates)


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


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
