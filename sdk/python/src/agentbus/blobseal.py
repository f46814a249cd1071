"""Blob content sealed in pieces (§9, ``agentbus-chunked-v1``), as the Rust core's ``blobseal``.

With an S3-compatible store the gateway hands the uploader (and a party downloading) the blob's
content key; the content is cut into 1 MiB pieces, each sealed with XChaCha20-Poly1305 under it
with the nonce ``piece index (u64 big-endian) ‖ 1 on the last piece, else 0 ‖ 15 zero bytes``, so
the store only ever holds ciphertext. libsodium (PyNaCl) does the AEAD.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Optional

from nacl import bindings, exceptions

from .errors import error_for

SCHEME = "agentbus-chunked-v1"
CHUNK = 1 << 20
TAG = 16


def sealing_key(sealing: Optional[Any]) -> bytes:
    """The 32-byte content key of a ``sealing`` object from the gateway's answer."""
    if not isinstance(sealing, dict) or sealing.get("scheme") != SCHEME:
        scheme = sealing.get("scheme") if isinstance(sealing, dict) else None
        raise error_for("AB-3057", f"the gateway offered a sealing this library does not know: {scheme!r}")
    text = str(sealing.get("key", ""))
    try:
        key = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise error_for("AB-3057", "the blob's content key is not 32 bytes of base64url")
    return key


def pieces(size: int) -> int:
    return max(1, -(-size // CHUNK))


def sealed_len(size: int) -> int:
    return size + TAG * pieces(size)


def _nonce(index: int, last: bool) -> bytes:
    return index.to_bytes(8, "big") + (b"\x01" if last else b"\x00") + bytes(15)


def seal(key: bytes, plain: bytes) -> bytes:
    """All of ``plain``, sealed piece by piece (empty content is one empty piece)."""
    n = pieces(len(plain))
    out = bytearray()
    for i in range(n):
        piece = plain[i * CHUNK:(i + 1) * CHUNK]
        out += bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(piece, None, _nonce(i, i + 1 == n), key)
    return bytes(out)


def open_(key: bytes, sealed: bytes, size: int) -> bytes:
    """The content of ``size`` bytes in ``sealed``; AB-3057 when a piece does not open or the
    length is not the one ``size`` makes."""
    if len(sealed) != sealed_len(size):
        raise error_for("AB-3057", f"sealed content is {len(sealed)} bytes; the declared size makes it {sealed_len(size)}")
    n = pieces(size)
    out = bytearray()
    for i in range(n):
        piece = sealed[i * (CHUNK + TAG):(i + 1) * (CHUNK + TAG)]
        try:
            out += bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(piece, None, _nonce(i, i + 1 == n), key)
        except exceptions.CryptoError:
            raise error_for("AB-3057", f"piece {i} does not open under the blob's content key") from None
    return bytes(out)
