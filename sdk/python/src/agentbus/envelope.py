"""Envelopes (§2), their canonical form (RFC 8785) and Ed25519 signatures (§3).

The signed bytes are the RFC 8785 form of the envelope without ``sig`` and without the
gateway-set attributes; ``sig`` is ``ed25519:<key_id>:<base64url signature, no padding>``.
Verification is strict (libsodium's, which refuses small-order keys and ``R`` and a non-reduced
``S``: the same twelve ed25519-speccheck answers as the Rust core's ``verify_strict``).
"""

from __future__ import annotations

import base64
import binascii
import copy
from typing import Any, Mapping, MutableMapping, Optional

import nacl.exceptions
import nacl.signing
import rfc8785

from . import ids

SIG_ALGORITHM = "ed25519"
GATEWAY_SET = ("tenant", "workspace", "to_id", "sequence", "received_at", "receipt", "hops")
REGISTRY_BASE = "https://komsary.agentbus.exchange/schemas/"

Envelope = dict[str, Any]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict unpadded base64url: no ``=``, no ``+``/``/``, canonical trailing bits."""
    if "=" in text or any(c in text for c in "+/ \n\t"):
        raise ValueError("not unpadded base64url")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if b64url(raw) != text:
        raise ValueError("non-canonical base64url")
    return raw


def canonicalize(value: Any) -> bytes:
    """RFC 8785 (JCS) bytes of a JSON value."""
    return rfc8785.dumps(value)


def schema_url(kind: str) -> str:
    """The registry URL of a known type's schema: ``agentbus.message.v1`` → ``…/agentbus.message/v1.json``."""
    name, _, major = kind.rpartition(".v")
    return f"{REGISTRY_BASE}{name}/v{major}.json"


class SigningKey:
    """A private Ed25519 key (a 32-byte seed)."""

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise ValueError("an Ed25519 seed is 32 bytes")
        self._key = nacl.signing.SigningKey(seed)

    @classmethod
    def generate(cls) -> "SigningKey":
        return cls(bytes(nacl.signing.SigningKey.generate()))

    @classmethod
    def from_key_file(cls, text: str) -> "SigningKey":
        """The CLI's key file: the seed as base64url on one line."""
        return cls(b64url_decode(text.strip()))

    def to_key_file(self) -> str:
        return b64url(self.seed) + "\n"

    @property
    def seed(self) -> bytes:
        return bytes(self._key)

    @property
    def public_key(self) -> str:
        """The public key as base64url without padding (what the gateway registers)."""
        return b64url(bytes(self._key.verify_key))

    def sign(self, message: bytes) -> bytes:
        return bytes(self._key.sign(message).signature)

    def __repr__(self) -> str:  # never print private material
        return f"SigningKey(public={self.public_key})"


def signing_bytes(envelope: Mapping[str, Any]) -> bytes:
    """The bytes §3.1 signs."""
    return canonicalize(
        {k: v for k, v in envelope.items() if k != "sig" and k not in GATEWAY_SET}
    )


def sign(envelope: MutableMapping[str, Any], key: SigningKey, key_id: str) -> MutableMapping[str, Any]:
    """Signs ``envelope`` in place, setting ``sig``; returns it."""
    signature = key.sign(signing_bytes(envelope))
    envelope["sig"] = f"{SIG_ALGORITHM}:{key_id}:{b64url(signature)}"
    return envelope


def parse_sig(sig: Any) -> tuple[str, bytes]:
    """``(key_id, signature)`` of a ``sig`` attribute; ValueError when malformed (AB-1010)."""
    if not isinstance(sig, str):
        raise ValueError("sig must be a string")
    parts = sig.split(":", 2)
    if len(parts) != 3:
        raise ValueError("three ':'-separated parts are needed")
    alg, key_id, text = parts
    if alg != SIG_ALGORITHM:
        raise ValueError("the algorithm must be ed25519")
    if not key_id.startswith("key_") or len(key_id) != 30:
        raise ValueError("the key id must be a key_ id")
    try:
        raw = b64url_decode(text)
    except (ValueError, binascii.Error) as e:
        raise ValueError("the signature is not unpadded base64url") from e
    if len(raw) != 64:
        raise ValueError("an Ed25519 signature is 64 bytes")
    return key_id, raw


def verify_raw(public: bytes, message: bytes, signature: bytes) -> bool:
    """Strict Ed25519 verification (libsodium)."""
    if len(public) != 32 or len(signature) != 64:
        return False
    try:
        nacl.signing.VerifyKey(public).verify(message, signature)
        return True
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError):
        return False
    except Exception:  # libsodium refuses some malformed keys with other exceptions
        return False


def verify(envelope: Mapping[str, Any], public_key: str | bytes) -> bool:
    """Whether ``envelope``'s signature verifies under ``public_key`` (base64url or 32 bytes)."""
    try:
        _, signature = parse_sig(envelope.get("sig"))
        public = public_key if isinstance(public_key, bytes) else b64url_decode(public_key)
        message = signing_bytes(envelope)
    except (ValueError, binascii.Error, rfc8785.CanonicalizationError):
        return False
    return verify_raw(public, message, signature)


def build(
    *,
    kind: str,
    source: str,
    to: str,
    data: Mapping[str, Any],
    subject: Optional[str] = None,
    conversation_id: Optional[str] = None,
    correlation_id: Optional[str] = None,
    traceparent: Optional[str] = None,
    idempotency_key: Optional[str] = None,
    expires_at: Optional[str] = None,
    capability: Optional[tuple[str, str]] = None,
    budget: Optional[Mapping[str, Any]] = None,
    priority: Optional[str] = None,
    usage: Optional[Mapping[str, Any]] = None,
    msg_id: Optional[str] = None,
    time: Optional[str] = None,
) -> Envelope:
    """An unsigned envelope with every §2.1 attribute a sender sets, in the Rust core's order."""
    env: Envelope = {
        "specversion": "1.0",
        "id": msg_id or ids.mint("msg"),
        "source": source,
        "type": kind,
        "time": time or ids.now_rfc3339(),
        "datacontenttype": "application/json",
    }
    if subject is not None:
        env["subject"] = subject
    env["to"] = to
    env["conversation_id"] = conversation_id or ids.mint("cnv")
    if correlation_id is not None:
        env["correlation_id"] = correlation_id
    env["traceparent"] = traceparent or ids.new_traceparent()
    env["schema"] = schema_url(kind)
    if idempotency_key is not None:
        env["idempotency_key"] = idempotency_key
    if expires_at is not None:
        env["expires_at"] = expires_at
    if capability is not None:
        env["capability"], env["capability_version"] = capability
    if usage is not None:
        env["usage"] = dict(usage)
    if budget is not None:
        env["budget"] = dict(budget)
    # Absent reads as `normal` (§2.1), so `normal` is not written.
    if priority is not None and priority != "normal":
        env["priority"] = priority
    env["data"] = copy.deepcopy(dict(data))
    return env
