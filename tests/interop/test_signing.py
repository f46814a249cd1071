"""WP-3.1-1..3: JCS and Ed25519 interoperate with rfc8785 and PyNaCl, both ways."""

import base64
import json

import nacl.exceptions
import nacl.signing
import pytest
import rfc8785

from conftest import GATEWAY_SET, VECTORS, dumps, minimal_envelope


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def signing_input(env: dict) -> bytes:
    """§3.1 by the independent library: JCS of the envelope without sig and gateway attributes."""
    return rfc8785.dumps({k: v for k, v in env.items() if k != "sig" and k not in GATEWAY_SET})


@pytest.mark.parametrize("name", sorted(p.name for p in (VECTORS / "jcs" / "input").iterdir()))
def test_wp_3_1_2_canonical_form_equals_python_rfc8785(agentbus, name):
    raw = (VECTORS / "jcs" / "input" / name).read_bytes()
    ours = agentbus("envelope", "canonical", stdin=raw).stdout
    assert ours == rfc8785.dumps(json.loads(raw))
    assert ours == (VECTORS / "jcs" / "output" / name).read_bytes().rstrip(b"\n")


RICH_DATA = {
    "text": "Ünïcödé ✓ 😂 \u2028 \"quotes\" </script> \\ \u0001",
    "context": {"numbers": [0, -0.0, 1.5, 1e21, 1e-7, 333333333.33333329, 9007199254740991], "nested": {"b": 1, "a": [True, None]}},
}


def test_wp_3_1_1_agentbus_signatures_verify_under_pynacl(agentbus, tmp_path):
    key = tmp_path / "k.key"
    public = json.loads(agentbus("--json", "keys", "generate", "--out", str(key)).stdout)["public_key"]
    env = minimal_envelope(data=RICH_DATA, x_tag={"z": 1, "a": [1, 2]}, subject="Deploy check")
    signed = json.loads(agentbus("envelope", "sign", "--key", str(key), "--key-id", "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V", stdin=dumps(env)).stdout)
    alg, key_id, sig = signed["sig"].split(":")
    assert (alg, key_id) == ("ed25519", "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V")
    assert "=" not in sig
    verify_key = nacl.signing.VerifyKey(unb64url(public))
    verify_key.verify(signing_input(signed), unb64url(sig))
    # Gateway-set attributes on a delivered copy leave the signature valid (WP-3.1-1).
    delivered = dict(signed, tenant="ten_01J9ZK7A0000000000000000T1", to_id="agt_01J9ZK7A0000000000000000A2", sequence=7)
    verify_key.verify(signing_input(delivered), unb64url(sig))
    # Any change to a signed attribute breaks it (WP-3.1-5).
    with pytest.raises(nacl.exceptions.BadSignatureError):
        verify_key.verify(signing_input(dict(signed, x_tag={"z": 2, "a": [1, 2]})), unb64url(sig))


def test_wp_3_1_1_pynacl_signatures_verify_in_agentbus(agentbus):
    key = nacl.signing.SigningKey.generate()
    public = b64url(bytes(key.verify_key))
    env = minimal_envelope(data=RICH_DATA, x_tag="külcsön", to_id="agt_01J9ZK7A0000000000000000A2")
    signature = key.sign(signing_input(env)).signature
    env["sig"] = f"ed25519:key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V:{b64url(signature)}"
    out = agentbus("--json", "envelope", "verify", "--public-key", public, stdin=dumps(env))
    assert json.loads(out.stdout)["verified"] is True
    # The same envelope with one byte of data changed is refused with AB-1011 and exit code 1.
    env["data"]["text"] += "!"
    bad = agentbus("--json", "envelope", "verify", "--public-key", public, stdin=dumps(env), check=False)
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["code"] == "AB-1011"


def test_wp_3_1_4_padded_signature_is_refused(agentbus):
    key = nacl.signing.SigningKey.generate()
    env = minimal_envelope()
    signature = key.sign(signing_input(env)).signature
    env["sig"] = "ed25519:key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V:" + base64.urlsafe_b64encode(signature).decode()
    assert env["sig"].endswith("=")
    out = agentbus("--json", "envelope", "validate", stdin=dumps(env), check=False)
    assert out.returncode == 1
    assert [v["code"] for v in json.loads(out.stdout)["violations"]] == ["AB-1010"]


def test_i_json_refuses_what_a_common_parser_would_change(agentbus):
    # Python's json keeps the last duplicate; agentbus refuses the document instead.
    for body in [b'{"a":1,"a":2}', b'{"n":9007199254740993}', b'{"s":"\\ud800"}']:
        out = agentbus("envelope", "canonical", stdin=body, check=False)
        assert out.returncode == 3, body
        assert b"AB-3001" in out.stderr
