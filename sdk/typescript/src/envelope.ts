/**
 * Envelopes (§2), their canonical form (RFC 8785) and Ed25519 signatures (§3), on Node's built-in
 * Ed25519. OpenSSL's verifier is not strict, so the checks the Rust core's `verify_strict` makes
 * are made first: `S` reduced, public key and `R` canonical and not of small order. With them the
 * twelve ed25519-speccheck answers are the Rust core's (only case 3 verifies).
 */

import { createPrivateKey, createPublicKey, randomBytes, sign as edSign, verify as edVerify, KeyObject } from "node:crypto";
import canonicalizeJson from "canonicalize";

export const SIG_ALGORITHM = "ed25519";
export const GATEWAY_SET = ["tenant", "workspace", "to_id", "sequence", "received_at", "receipt", "hops"];
export const REGISTRY_BASE = "https://komsary.agentbus.exchange/schemas/";

export type Envelope = Record<string, unknown>;

export const b64url = (b: Uint8Array): string => Buffer.from(b).toString("base64url");

/** Strict unpadded base64url: the one textual form of each byte string. */
export function b64urlDecode(text: string): Buffer {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) throw new Error("not unpadded base64url");
  const raw = Buffer.from(text, "base64url");
  if (b64url(raw) !== text) throw new Error("non-canonical base64url");
  return raw;
}

/** RFC 8785 (JCS) bytes of a JSON value. */
export function canonicalize(value: unknown): Buffer {
  const text = canonicalizeJson(value);
  if (text === undefined) throw new Error("the value has no canonical JSON form");
  return Buffer.from(text, "utf8");
}

export function schemaUrl(kind: string): string {
  const at = kind.lastIndexOf(".v");
  return `${REGISTRY_BASE}${kind.slice(0, at)}/v${kind.slice(at + 2)}.json`;
}

const PKCS8_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");
const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

/** A private Ed25519 key (a 32-byte seed). */
export class SigningKey {
  readonly seed: Buffer;
  private readonly key: KeyObject;
  readonly publicKey: string;

  constructor(seed: Uint8Array) {
    if (seed.length !== 32) throw new Error("an Ed25519 seed is 32 bytes");
    this.seed = Buffer.from(seed);
    this.key = createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, this.seed]), format: "der", type: "pkcs8" });
    const spki = createPublicKey(this.key).export({ format: "der", type: "spki" });
    this.publicKey = b64url(spki.subarray(spki.length - 32));
  }

  static generate(): SigningKey {
    return new SigningKey(randomBytes(32));
  }

  /** The CLI's key file: the seed as base64url on one line. */
  static fromKeyFile(text: string): SigningKey {
    return new SigningKey(b64urlDecode(text.trim()));
  }

  toKeyFile(): string {
    return b64url(this.seed) + "\n";
  }

  sign(message: Uint8Array): Buffer {
    return edSign(null, message, this.key);
  }

  toJSON(): string {
    return `SigningKey(public=${this.publicKey})`; // never print private material
  }
}

// The group order L, little-endian, for the "S is reduced" check.
const L = Buffer.from("edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010", "hex");
// Small-order points (libsodium's list); the top bit (the sign of x) is ignored when comparing.
const SMALL_ORDER = [
  "0000000000000000000000000000000000000000000000000000000000000000",
  "0100000000000000000000000000000000000000000000000000000000000000",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
].map((h) => Buffer.from(h, "hex"));

function lessThanLE(a: Uint8Array, b: Uint8Array): boolean {
  for (let i = a.length - 1; i >= 0; i--) {
    if (a[i] !== b[i]) return a[i] < b[i];
  }
  return false;
}

function hasSmallOrder(p: Uint8Array): boolean {
  return SMALL_ORDER.some((s) => {
    for (let i = 0; i < 31; i++) if (s[i] !== p[i]) return false;
    return (s[31] & 0x7f) === (p[31] & 0x7f);
  });
}

/** Whether a point encoding's y is below p = 2^255 - 19 (the only encoding of that y). */
function isCanonicalPoint(p: Uint8Array): boolean {
  if ((p[31] & 0x7f) !== 0x7f) return true;
  for (let i = 30; i > 0; i--) if (p[i] !== 0xff) return true;
  return p[0] < 0xed;
}

// Parsing a key costs more than a verification: senders' keys are few, so each is parsed once.
const keyObjects = new Map<string, KeyObject>();
function publicKeyObject(publicKey: Uint8Array): KeyObject {
  const id = Buffer.from(publicKey).toString("hex");
  let key = keyObjects.get(id);
  if (key === undefined) {
    key = createPublicKey({ key: Buffer.concat([SPKI_PREFIX, publicKey]), format: "der", type: "spki" });
    if (keyObjects.size >= 1024) keyObjects.clear();
    keyObjects.set(id, key);
  }
  return key;
}

/** Strict Ed25519 verification, with the Rust core's policy. */
export function verifyRaw(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  if (publicKey.length !== 32 || signature.length !== 64) return false;
  const r = signature.subarray(0, 32);
  const s = signature.subarray(32);
  if (!lessThanLE(s, L)) return false;
  if (!isCanonicalPoint(publicKey) || hasSmallOrder(publicKey)) return false;
  if (!isCanonicalPoint(r) || hasSmallOrder(r)) return false;
  try {
    return edVerify(null, message, publicKeyObject(publicKey), signature);
  } catch {
    return false;
  }
}

/** The bytes §3.1 signs: RFC 8785 without `sig` and the gateway-set attributes. */
export function signingBytes(envelope: Envelope): Buffer {
  const copy: Envelope = {};
  for (const [k, v] of Object.entries(envelope)) {
    if (k !== "sig" && !GATEWAY_SET.includes(k)) copy[k] = v;
  }
  return canonicalize(copy);
}

/** Signs `envelope` in place, setting `sig`; returns it. */
export function sign<T extends Envelope>(envelope: T, key: SigningKey, keyId: string): T {
  const signature = key.sign(signingBytes(envelope));
  (envelope as Envelope)["sig"] = `${SIG_ALGORITHM}:${keyId}:${b64url(signature)}`;
  return envelope;
}

/** `[keyId, signature]` of a `sig` attribute; throws when malformed (AB-1010). */
export function parseSig(sig: unknown): [string, Buffer] {
  if (typeof sig !== "string") throw new Error("sig must be a string");
  const first = sig.indexOf(":");
  const second = sig.indexOf(":", first + 1);
  if (first < 0 || second < 0) throw new Error("three ':'-separated parts are needed");
  const [alg, keyId, text] = [sig.slice(0, first), sig.slice(first + 1, second), sig.slice(second + 1)];
  if (alg !== SIG_ALGORITHM) throw new Error("the algorithm must be ed25519");
  if (!/^key_[0-7][0-9A-HJKMNP-TV-Z]{25}$/.test(keyId)) throw new Error("the key id must be a key_ id");
  const raw = b64urlDecode(text);
  if (raw.length !== 64) throw new Error("an Ed25519 signature is 64 bytes");
  return [keyId, raw];
}

/** Whether `envelope`'s signature verifies under `publicKey` (base64url). */
export function verify(envelope: Envelope, publicKey: string | Uint8Array): boolean {
  try {
    const [, signature] = parseSig(envelope["sig"]);
    const pk = typeof publicKey === "string" ? b64urlDecode(publicKey) : publicKey;
    return verifyRaw(pk, signingBytes(envelope), signature);
  } catch {
    return false;
  }
}

// ---- ids, times, traces ----------------------------------------------------------------------

const ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/** A new id `<prefix>_<26 chars>`: 48 bits of milliseconds then 80 random bits, as a ULID. */
export function mint(prefix: string, nowMs: number = Date.now()): string {
  let value = (BigInt(nowMs) & ((1n << 48n) - 1n)) << 80n;
  value |= BigInt("0x" + randomBytes(10).toString("hex"));
  let out = "";
  for (let i = 0; i < 26; i++) {
    out = ALPHABET[Number(value & 31n)] + out;
    value >>= 5n;
  }
  return `${prefix}_${out}`;
}

export const nowRfc3339 = (nowMs: number = Date.now()): string => new Date(nowMs).toISOString();

export const newTraceparent = (): string =>
  `00-${randomBytes(16).toString("hex")}-${randomBytes(8).toString("hex")}-01`;

export function childTraceparent(parent: unknown): string {
  const parts = typeof parent === "string" ? parent.split("-") : [];
  if (parts.length === 4 && parts[1].length === 32) return `00-${parts[1]}-${randomBytes(8).toString("hex")}-${parts[3]}`;
  return newTraceparent();
}

export interface BuildOptions {
  kind: string;
  source: string;
  to: string;
  data: Record<string, unknown>;
  subject?: string;
  conversationId?: string;
  correlationId?: string;
  traceparent?: string;
  idempotencyKey?: string;
  expiresAt?: string;
  capability?: [string, string];
  budget?: Record<string, unknown>;
  priority?: string;
  usage?: Record<string, unknown>;
  id?: string;
  time?: string;
}

/** An unsigned envelope with every §2.1 attribute a sender sets, in the Rust core's order. */
export function build(o: BuildOptions): Envelope {
  const env: Envelope = {
    specversion: "1.0",
    id: o.id ?? mint("msg"),
    source: o.source,
    type: o.kind,
    time: o.time ?? nowRfc3339(),
    datacontenttype: "application/json",
  };
  if (o.subject !== undefined) env.subject = o.subject;
  env.to = o.to;
  env.conversation_id = o.conversationId ?? mint("cnv");
  if (o.correlationId !== undefined) env.correlation_id = o.correlationId;
  env.traceparent = o.traceparent ?? newTraceparent();
  env.schema = schemaUrl(o.kind);
  if (o.idempotencyKey !== undefined) env.idempotency_key = o.idempotencyKey;
  if (o.expiresAt !== undefined) env.expires_at = o.expiresAt;
  if (o.capability !== undefined) [env.capability, env.capability_version] = o.capability;
  if (o.usage !== undefined) env.usage = o.usage;
  if (o.budget !== undefined) env.budget = o.budget;
  // Absent reads as `normal` (§2.1), so `normal` is not written.
  if (o.priority !== undefined && o.priority !== "normal") env.priority = o.priority;
  env.data = structuredClone(o.data);
  return env;
}
