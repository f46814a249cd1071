/**
 * Blob content sealing, `agentbus-chunked-v1` (docs/security.md, the Rust core's `blobseal`): the
 * content is cut into pieces of `piece_bytes` (1 MiB), each sealed with XChaCha20-Poly1305 under
 * the blob's key with the nonce `piece index (u64 BE) ‖ last-piece flag (1 byte) ‖ 15 zero
 * bytes`, no associated data. A gateway with an S3 store hands the key to the uploader (who seals
 * before the pre-signed PUT) and to downloaders of a pre-signed GET (who open).
 *
 * Node's crypto has the IETF ChaCha20-Poly1305 but not the extended-nonce variant, so the
 * XChaCha20 subkey is derived here with HChaCha20 (draft-irtf-cfrg-xchacha §2.2); the AEAD itself
 * is OpenSSL's.
 */

import { createCipheriv, createDecipheriv } from "node:crypto";

export const SCHEME = "agentbus-chunked-v1";
export const TAG = 16;

/** Why sealed content does not open. */
export class SealError extends Error {}

const rotl = (x: number, n: number) => ((x << n) | (x >>> (32 - n))) >>> 0;

/** HChaCha20: the 32-byte subkey of `key` and the first 16 bytes of an XChaCha20 nonce. */
export function hchacha20(key: Uint8Array, nonce16: Uint8Array): Buffer {
  if (key.length !== 32 || nonce16.length !== 16) throw new RangeError("HChaCha20 takes a 32-byte key and a 16-byte nonce");
  const k = Buffer.from(key);
  const n = Buffer.from(nonce16);
  const s = new Uint32Array(16);
  s.set([0x61707865, 0x3320646e, 0x79622d32, 0x6b206574]);
  for (let i = 0; i < 8; i++) s[4 + i] = k.readUInt32LE(4 * i);
  for (let i = 0; i < 4; i++) s[12 + i] = n.readUInt32LE(4 * i);
  const qr = (a: number, b: number, c: number, d: number) => {
    s[a] = (s[a] + s[b]) >>> 0; s[d] = rotl(s[d] ^ s[a], 16);
    s[c] = (s[c] + s[d]) >>> 0; s[b] = rotl(s[b] ^ s[c], 12);
    s[a] = (s[a] + s[b]) >>> 0; s[d] = rotl(s[d] ^ s[a], 8);
    s[c] = (s[c] + s[d]) >>> 0; s[b] = rotl(s[b] ^ s[c], 7);
  };
  for (let round = 0; round < 10; round++) {
    qr(0, 4, 8, 12); qr(1, 5, 9, 13); qr(2, 6, 10, 14); qr(3, 7, 11, 15);
    qr(0, 5, 10, 15); qr(1, 6, 11, 12); qr(2, 7, 8, 13); qr(3, 4, 9, 14);
  }
  const out = Buffer.alloc(32);
  for (let i = 0; i < 4; i++) out.writeUInt32LE(s[i], 4 * i);
  for (let i = 0; i < 4; i++) out.writeUInt32LE(s[12 + i], 16 + 4 * i);
  return out;
}

/** The subkey and the IETF nonce XChaCha20-Poly1305 uses for a 24-byte nonce. */
function xparts(key: Uint8Array, nonce24: Uint8Array): [Buffer, Buffer] {
  const ietf = Buffer.alloc(12);
  Buffer.from(nonce24.subarray(16, 24)).copy(ietf, 4);
  return [hchacha20(key, nonce24.subarray(0, 16)), ietf];
}

/** XChaCha20-Poly1305 encryption: ciphertext then the 16-byte tag. */
export function xchachaSeal(key: Uint8Array, nonce24: Uint8Array, plain: Uint8Array, aad?: Uint8Array): Buffer {
  const [sub, nonce] = xparts(key, nonce24);
  const c = createCipheriv("chacha20-poly1305", sub, nonce, { authTagLength: TAG });
  if (aad !== undefined) c.setAAD(aad, { plaintextLength: plain.length });
  return Buffer.concat([c.update(plain), c.final(), c.getAuthTag()]);
}

/** XChaCha20-Poly1305 decryption; throws {@link SealError} when the tag does not verify. */
export function xchachaOpen(key: Uint8Array, nonce24: Uint8Array, sealed: Uint8Array, aad?: Uint8Array): Buffer {
  if (sealed.length < TAG) throw new SealError("sealed content is shorter than its tag");
  const [sub, nonce] = xparts(key, nonce24);
  const d = createDecipheriv("chacha20-poly1305", sub, nonce, { authTagLength: TAG });
  d.setAuthTag(sealed.subarray(sealed.length - TAG));
  if (aad !== undefined) d.setAAD(aad, { plaintextLength: sealed.length - TAG });
  try {
    return Buffer.concat([d.update(sealed.subarray(0, sealed.length - TAG)), d.final()]);
  } catch {
    throw new SealError("the content does not open under its key");
  }
}

function pieceNonce(index: number, last: boolean): Buffer {
  const n = Buffer.alloc(24);
  n.writeBigUInt64BE(BigInt(index), 0);
  n[8] = last ? 1 : 0;
  return n;
}

/** How many pieces `size` plain bytes make (at least one: empty content is one empty piece). */
export const pieces = (size: number, pieceBytes: number): number => Math.max(1, Math.ceil(size / pieceBytes));

/** The sealed length of `size` plain bytes. */
export const sealedLength = (size: number, pieceBytes: number): number => size + TAG * pieces(size, pieceBytes);

/** Seals `plain` as `agentbus-chunked-v1` under the 32-byte `key`. */
export function seal(key: Uint8Array, plain: Uint8Array, pieceBytes: number): Buffer {
  const n = pieces(plain.length, pieceBytes);
  const out: Buffer[] = [];
  for (let i = 0; i < n; i++) {
    out.push(xchachaSeal(key, pieceNonce(i, i + 1 === n), plain.subarray(i * pieceBytes, (i + 1) * pieceBytes)));
  }
  return Buffer.concat(out);
}

/** Opens sealed content of `size` plain bytes; throws {@link SealError} when a piece does not
 * open, the pieces are reordered or the content is cut short or extended. */
export function open(key: Uint8Array, sealed: Uint8Array, size: number, pieceBytes: number): Buffer {
  if (sealed.length !== sealedLength(size, pieceBytes)) {
    throw new SealError(`sealed content is ${sealed.length} bytes; the declared size makes it ${sealedLength(size, pieceBytes)}`);
  }
  const n = pieces(size, pieceBytes);
  const out: Buffer[] = [];
  const step = pieceBytes + TAG;
  for (let i = 0; i < n; i++) {
    try {
      out.push(xchachaOpen(key, pieceNonce(i, i + 1 === n), sealed.subarray(i * step, Math.min((i + 1) * step, sealed.length))));
    } catch {
      throw new SealError(`piece ${i} does not open under the blob's content key`);
    }
  }
  return Buffer.concat(out);
}
