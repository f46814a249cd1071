// Blob sealing (agentbus-chunked-v1) for the S3 target: XChaCha20-Poly1305 built on Node's IETF
// ChaCha20-Poly1305 with HChaCha20 here, checked against draft-irtf-cfrg-xchacha's vectors; the
// end-to-end S3 test checks it against the gateway's own sealing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";

import { SealError, hchacha20, open, seal, sealedLength, xchachaOpen, xchachaSeal } from "../dist/blobseal.js";

const hex = (h) => Buffer.from(h, "hex");

test("HChaCha20 and XChaCha20-Poly1305 give draft-irtf-cfrg-xchacha's vectors", () => {
  const key = Buffer.from([...Array(32).keys()]);
  assert.equal(hchacha20(key, hex("000000090000004a0000000031415927")).toString("hex"),
    "82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc");
  const plain = Buffer.from("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.");
  const k = hex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f");
  const iv = hex("404142434445464748494a4b4c4d4e4f5051525354555657");
  const aad = hex("50515253c0c1c2c3c4c5c6c7");
  const sealed = xchachaSeal(k, iv, plain, aad);
  assert.equal(sealed.subarray(0, 16).toString("hex"), "bd6d179d3e83d43b9576579493c0e939");
  assert.equal(sealed.subarray(sealed.length - 16).toString("hex"), "c0875924c1c7987947deafd8780acf49");
  assert.ok(xchachaOpen(k, iv, sealed, aad).equals(plain));
});

test("content seals in pieces and opens only whole, in order and under its key", () => {
  const key = randomBytes(32);
  const piece = 1024;
  for (const size of [0, 1, piece - 1, piece, piece + 1, 3 * piece + 5]) {
    const plain = randomBytes(size);
    const sealed = seal(key, plain, piece);
    assert.equal(sealed.length, sealedLength(size, piece), `${size}`);
    assert.ok(open(key, sealed, size, piece).equals(plain), `${size}`);
  }
  const plain = randomBytes(3 * piece);
  const sealed = seal(key, plain, piece);
  const step = piece + 16;
  const swapped = Buffer.concat([sealed.subarray(step, 2 * step), sealed.subarray(0, step), sealed.subarray(2 * step)]);
  const flipped = Buffer.from(sealed);
  flipped[5] ^= 1;
  // Cut after a whole piece: the remaining last piece was sealed as not-last, so it fails.
  const cut = sealed.subarray(0, 2 * step);
  for (const [why, bad, size] of [["reordered", swapped, 3 * piece], ["flipped", flipped, 3 * piece], ["cut", cut, 2 * piece], ["extended", Buffer.concat([sealed, Buffer.alloc(1)]), 3 * piece]]) {
    assert.throws(() => open(key, bad, size, piece), SealError, why);
  }
  assert.throws(() => open(randomBytes(32), sealed, 3 * piece, piece), SealError);
});
