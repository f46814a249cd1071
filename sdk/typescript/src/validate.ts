/**
 * §2 validation, as the Rust core's `Envelope::validate`: every broken rule of an envelope with
 * its `AB-` code and the JSON Pointer of the attribute, in the same order. The shared cases under
 * `tests/data/envelopes/` hold the expected codes; this library and the Rust core run them all.
 */

import { GATEWAY_SET } from "./envelope.js";
import { JsonError, parseStrict } from "./json.js";
import { REGISTRY_BASE, validateProtocol } from "./schema.js";

/** One broken rule: the catalogue code, the JSON Pointer of the attribute and what is wrong. */
export interface Violation {
  code: string;
  path: string;
  message: string;
}

export const MAX_ENVELOPE_BYTES = 1024 * 1024;
export const MAX_SUBJECT_CHARS = 200;
export const MAX_IDEMPOTENCY_KEY_CHARS = 128;
export const MAX_EXTENSIONS = 16;
export const MAX_CAPABILITY_CHARS = 100;

// The catalogue codes §2 validation names (crates/agentbus-protocol/src/errors.rs).
const MALFORMED_SIGNATURE = "AB-1010";
const MALFORMED_JSON = "AB-3001";
const MISSING_ATTRIBUTE = "AB-3002";
const INVALID_ATTRIBUTE = "AB-3003";
const SCHEMA_MISMATCH = "AB-3004";
const ENVELOPE_TOO_LARGE = "AB-3007";
const ATTRIBUTE_TOO_LONG = "AB-3008";
const INVALID_ATTRIBUTE_NAME = "AB-3009";
const TOO_MANY_EXTENSIONS = "AB-3010";
const DATA_INVALID = "AB-3011";
const UNKNOWN_TYPE = "AB-3012";
const MISSING_CORRELATION = "AB-3013";
const INVALID_CAPABILITY = "AB-3014";
const INVALID_ADDRESS = "AB-3015";
const TASK_TO_TOPIC = "AB-3018";
const INVALID_ATTACHMENT_NAME = "AB-3022";

/** Attributes the sender sets (§2.1). */
export const SENDER_SET = [
  "specversion", "id", "source", "type", "time", "datacontenttype", "dataschema", "subject", "data", "to",
  "conversation_id", "traceparent", "schema", "sig", "correlation_id", "reply_to", "idempotency_key",
  "expires_at", "capability", "capability_version", "priority", "budget", "usage",
];

/** Attributes a sender must supply (§2.1). */
export const REQUIRED = [
  "specversion", "id", "source", "type", "time", "datacontenttype", "to", "conversation_id", "traceparent",
  "schema", "sig", "data",
];

/** The v1 types with a schema, and whether §2.1 (G-WP-16) requires `correlation_id` on each. */
const KNOWN_TYPES: Record<string, { correlation: boolean }> = {
  "agentbus.message.v1": { correlation: false },
  "agentbus.task.request.v1": { correlation: false },
  "agentbus.task.accept.v1": { correlation: true },
  "agentbus.task.progress.v1": { correlation: true },
  "agentbus.task.result.v1": { correlation: true },
  "agentbus.task.error.v1": { correlation: true },
  "agentbus.task.cancel.v1": { correlation: true },
  "agentbus.task.needs_input.v1": { correlation: true },
  "agentbus.task.input.v1": { correlation: true },
  "agentbus.ack.v1": { correlation: true },
  "agentbus.system.undeliverable.v1": { correlation: false },
  "agentbus.system.expired.v1": { correlation: false },
};

export interface ValidateOptions {
  /** The size of the received bytes, checked against 1 MiB; otherwise the compact JSON's size. */
  receivedBytes?: number;
  /** Whether to validate `data` against the type's schema (and refuse unknown types). */
  checkData?: boolean;
  /** Whether to check the form of `sig` (off only for the spec's placeholder signatures). */
  checkSigForm?: boolean;
}

/** Parses envelope bytes: at most 1 MiB, I-JSON, an object. Throws a {@link Violation} list of
 * one (AB-3007 or AB-3001) as an {@link EnvelopeParseError}. */
export class EnvelopeParseError extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
  }
}

export function parseEnvelope(bytes: Uint8Array | string): Record<string, unknown> {
  const size = typeof bytes === "string" ? Buffer.byteLength(bytes) : bytes.length;
  if (size > MAX_ENVELOPE_BYTES) {
    throw new EnvelopeParseError(ENVELOPE_TOO_LARGE, `the envelope is ${size} bytes; the limit is 1 MiB (1,048,576 bytes)`);
  }
  let value: unknown;
  try {
    value = parseStrict(bytes);
  } catch (e) {
    throw new EnvelopeParseError(MALFORMED_JSON, e instanceof JsonError ? e.message : String(e));
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new EnvelopeParseError(MALFORMED_JSON, "an envelope is a JSON object");
  }
  return value as Record<string, unknown>;
}

/** Every §2 violation of `envelope`: bytes are parsed first (a parse failure is its one
 * violation, with an empty path); an object is checked as it is. */
export function validateEnvelope(envelope: Uint8Array | string | Record<string, unknown>, o: ValidateOptions = {}): Violation[] {
  let attrs: Record<string, unknown>;
  if (typeof envelope === "string" || envelope instanceof Uint8Array) {
    try {
      attrs = parseEnvelope(envelope);
    } catch (e) {
      if (e instanceof EnvelopeParseError) return [{ code: e.code, path: "", message: e.message }];
      throw e;
    }
  } else attrs = envelope;
  const v: Violation[] = [];
  const bad = (code: string, path: string, message: string) => v.push({ code, path, message });
  checkNames(attrs, bad);
  for (const name of REQUIRED) {
    if (!Object.hasOwn(attrs, name)) bad(MISSING_ATTRIBUTE, `/${name}`, `\`${name}\` is required (§2.1)`);
  }
  checkForms(attrs, o.checkSigForm ?? true, v);
  const size = o.receivedBytes ?? Buffer.byteLength(JSON.stringify(attrs));
  if (size > MAX_ENVELOPE_BYTES) bad(ENVELOPE_TOO_LARGE, "", `the envelope is ${size} bytes; at most ${MAX_ENVELOPE_BYTES} (§2.3)`);
  const kind = checkTypeAndSchema(attrs, bad);
  if (kind !== undefined) checkTypeRules(attrs, kind, bad);
  if (o.checkData ?? true) checkData(attrs, kind, bad);
  return v;
}

type Bad = (code: string, path: string, message: string) => void;

const escapePointer = (s: string) => s.replace(/~/g, "~0").replace(/\//g, "~1");

function checkNames(attrs: Record<string, unknown>, bad: Bad): void {
  let extensions = 0;
  for (const name of Object.keys(attrs)) {
    if (!/^[a-z0-9_]+$/.test(name)) {
      bad(INVALID_ATTRIBUTE_NAME, `/${escapePointer(name)}`, `attribute name ${JSON.stringify(name)} is not lowercase [a-z0-9_] (§2.1)`);
      continue;
    }
    if (!SENDER_SET.includes(name) && !GATEWAY_SET.includes(name)) extensions++;
  }
  if (extensions > MAX_EXTENSIONS) bad(TOO_MANY_EXTENSIONS, "", `${extensions} extension attributes; at most ${MAX_EXTENSIONS} (§2.3)`);
}

// ---- the forms of ids, addresses, times -------------------------------------------------------

const ID_PREFIXES = ["msg_", "cnv_", "tsk_", "rcp_", "agt_", "key_", "ten_", "ws_", "usr_", "blb_"];

/** Why `s` is not an id of `prefix` (26 upper-case Crockford base32 characters, the first at most
 * 7), or undefined when it is one. */
export function idProblem(s: string, prefix: string): string | undefined {
  const kind = ID_PREFIXES.find((p) => s.startsWith(p));
  if (kind === undefined) return `${JSON.stringify(s)} has no known id prefix (${ID_PREFIXES.join(" ")})`;
  if (!/^[0-7][0-9A-HJKMNP-TV-Z]{25}$/.test(s.slice(kind.length))) {
    return `${JSON.stringify(s)}: after the prefix an id has 26 upper-case Crockford base32 characters (0-9, A-Z without I L O U), the first at most 7`;
  }
  if (kind !== prefix) return `${JSON.stringify(s)} is not a ${prefix} id`;
  return undefined;
}

const slugOk = (s: string, dots: boolean) =>
  s.length >= 3 && s.length <= 40 && (dots ? /^[a-z0-9][a-z0-9.-]*[a-z0-9]$/ : /^[a-z0-9][a-z0-9-]*[a-z0-9]$/).test(s);

/** Why `s` is not an address (`agent://`, `topic://` or an `agt_` id), or undefined. */
export function addressProblem(s: string, agentOnly = false): string | undefined {
  const scheme = s.startsWith("agent://") ? "agent://" : s.startsWith("topic://") && !agentOnly ? "topic://" : undefined;
  if (scheme === undefined) {
    if (!agentOnly && s.startsWith("agt_")) return idProblem(s, "agt_") === undefined ? undefined : `${JSON.stringify(s)} is not a valid agt_ id`;
    return agentOnly
      ? `${JSON.stringify(s)} is not an address: use agent://<tenant>/<workspace>/<name>`
      : `${JSON.stringify(s)} is not an address: use agent://<tenant>/<workspace>/<name>, topic://<tenant>/<workspace>/<topic> or an agt_ id`;
  }
  const parts = s.slice(scheme.length).split("/");
  if (parts.length !== 3) return `${JSON.stringify(s)} must have exactly three segments after the scheme: <tenant>/<workspace>/<name>`;
  const names = ["tenant", "workspace", scheme === "agent://" ? "name" : "topic"];
  for (let i = 0; i < 3; i++) {
    const dots = i === 2 && scheme === "topic://";
    if (!slugOk(parts[i], dots)) {
      return `${names[i]} ${JSON.stringify(parts[i])} must be 3-40 characters of a-z, 0-9 and '-'${dots ? ", '.'" : ""}, starting and ending with a letter or digit`;
    }
  }
  return undefined;
}

const DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** Whether `s` is an RFC 3339 date-time with a zone. */
export function isTimestamp(s: string): boolean {
  const m = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$/.exec(s);
  if (m === null) return false;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number);
  if (month < 1 || month > 12 || day < 1 || day > DAYS[month - 1]) return false;
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  if (month === 2 && day === 29 && !leap) return false;
  if (hour > 23 || minute > 59 || second > 59) return false;
  if (m[9] !== undefined && (Number(m[9]) > 23 || Number(m[10]) > 59)) return false;
  return true;
}

/** Whether `s` is a W3C Trace Context `traceparent`. */
export function isTraceparent(s: string): boolean {
  const m = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(s);
  return m !== null && m[1] !== "ff" && /[^0]/.test(m[2]) && /[^0]/.test(m[3]);
}

/** Whether `s` is a capability name: dot-separated `[a-z][a-z0-9-]*` segments, at most 100 chars. */
export const isCapability = (s: string): boolean =>
  s.length <= MAX_CAPABILITY_CHARS && s.split(".").every((seg) => /^[a-z][a-z0-9-]*$/.test(seg));

/** Whether `s` is a major version: `0` or digits without a leading zero, at most 9. */
export const isMajor = (s: string): boolean => /^(0|[1-9][0-9]{0,8})$/.test(s);

const isDecimalAmount = (s: string) => /^-?[0-9]+(\.[0-9]{1,6})?$/.test(s);

// Rust's `char::is_control`: the Unicode general category Cc.
const hasControl = (s: string) => /\p{Cc}/u.test(s);
const chars = (s: string) => [...s].length;

function budgetProblem(value: unknown): string | undefined {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return "`budget` must be an object {currency, max}";
  const b = value as Record<string, unknown>;
  if (typeof b.currency !== "string" || !/^[A-Z]{3}$/.test(b.currency)) return "`budget.currency` must be three upper-case letters such as USD";
  if (typeof b.max !== "string" || !isDecimalAmount(b.max) || b.max.startsWith("-")) return "`budget.max` must be a decimal string such as \"2.00\"";
  return undefined;
}

/** `[keyId, signature]` of a `sig` attribute's form, or why it is malformed. */
function sigProblem(s: string): string | undefined {
  const first = s.indexOf(":");
  const second = first < 0 ? -1 : s.indexOf(":", first + 1);
  if (second < 0) return "three ':'-separated parts are needed";
  if (s.slice(0, first) !== "ed25519") return "the algorithm must be ed25519";
  if (idProblem(s.slice(first + 1, second), "key_") !== undefined) return "the key id must be a key_ id";
  const text = s.slice(second + 1);
  if (!/^[A-Za-z0-9_-]*$/.test(text) || Buffer.from(text, "base64url").toString("base64url") !== text) {
    return "the signature is not unpadded base64url";
  }
  if (Buffer.from(text, "base64url").length !== 64) return "an Ed25519 signature is 64 bytes";
  return undefined;
}

const NOT_STRINGS = ["data", "budget", "usage", "sequence", "hops"];

function checkForms(attrs: Record<string, unknown>, checkSig: boolean, v: Violation[]): void {
  const nested: Violation[] = [];
  const bad = (name: string, code: string, message: string) => v.push({ code, path: `/${name}`, message });
  for (const [name, value] of Object.entries(attrs)) {
    const stringAttr = !NOT_STRINGS.includes(name) && (SENDER_SET.includes(name) || GATEWAY_SET.includes(name));
    if (stringAttr && typeof value !== "string") {
      bad(name, INVALID_ATTRIBUTE, `\`${name}\` must be a string`);
      continue;
    }
    const s = typeof value === "string" ? value : "";
    const id = (prefix: string) => {
      const why = idProblem(s, prefix);
      if (why !== undefined) bad(name, INVALID_ATTRIBUTE, `\`${name}\`: ${why}`);
    };
    switch (name) {
      case "specversion":
        if (s !== "1.0") bad(name, INVALID_ATTRIBUTE, `\`specversion\` must be "1.0", not ${JSON.stringify(s)}`);
        break;
      case "id":
      case "correlation_id":
        id("msg_");
        break;
      case "conversation_id":
        id("cnv_");
        break;
      case "source": {
        const why = addressProblem(s, true);
        if (why !== undefined) bad(name, INVALID_ADDRESS, `\`source\`: ${why}`);
        break;
      }
      case "to": {
        const why = addressProblem(s);
        if (why !== undefined) bad(name, INVALID_ADDRESS, `\`to\`: ${why}`);
        break;
      }
      case "reply_to": {
        const why = addressProblem(s);
        if (why !== undefined) bad(name, INVALID_ADDRESS, `\`reply_to\`: ${why}`);
        else if (s.startsWith("topic://")) bad(name, INVALID_ADDRESS, "`reply_to` must name an agent, not a topic");
        break;
      }
      case "time":
      case "expires_at":
      case "received_at":
        if (!isTimestamp(s)) bad(name, INVALID_ATTRIBUTE, `\`${name}\`: ${JSON.stringify(s)} is not an RFC 3339 date-time with a zone, such as 2026-10-10T14:00:00Z`);
        break;
      case "datacontenttype":
        if (s !== "application/json") {
          bad(name, INVALID_ATTRIBUTE, s === "application/jose"
            ? "`datacontenttype: application/jose` (encrypted data) is post-MVP; send application/json"
            : `\`datacontenttype\` must be application/json, not ${JSON.stringify(s)}`);
        }
        break;
      case "traceparent":
        if (!isTraceparent(s)) bad(name, INVALID_ATTRIBUTE, `\`traceparent\` ${JSON.stringify(s)} is not a W3C Trace Context value 00-<32 hex>-<16 hex>-<2 hex>`);
        break;
      case "subject":
        if (chars(s) > MAX_SUBJECT_CHARS) bad(name, ATTRIBUTE_TOO_LONG, `\`subject\` has ${chars(s)} characters; at most ${MAX_SUBJECT_CHARS} (§2.3)`);
        else if (hasControl(s)) bad(name, INVALID_ATTRIBUTE, "`subject` is one line: no control characters or line breaks");
        break;
      case "idempotency_key":
        if (chars(s) > MAX_IDEMPOTENCY_KEY_CHARS) bad(name, ATTRIBUTE_TOO_LONG, `\`idempotency_key\` has ${chars(s)} characters; at most ${MAX_IDEMPOTENCY_KEY_CHARS} (§2.3)`);
        else if (s.length === 0 || hasControl(s)) bad(name, INVALID_ATTRIBUTE, "`idempotency_key` must be non-empty, without control characters");
        break;
      case "capability":
        if (!isCapability(s)) bad(name, INVALID_CAPABILITY, `\`capability\` ${JSON.stringify(s)} must be dot-separated lowercase identifiers such as code.review`);
        break;
      case "capability_version":
        if (!isMajor(s)) bad(name, INVALID_CAPABILITY, `\`capability_version\` ${JSON.stringify(s)} must be a major version such as "1"`);
        break;
      case "priority":
        if (!["low", "normal", "high"].includes(s)) bad(name, INVALID_ATTRIBUTE, `\`priority\` must be low, normal or high, not ${JSON.stringify(s)}`);
        break;
      case "data":
        if (value === null || typeof value !== "object" || Array.isArray(value)) bad(name, INVALID_ATTRIBUTE, "`data` must be a JSON object");
        break;
      case "budget": {
        const why = budgetProblem(value);
        if (why !== undefined) bad(name, INVALID_ATTRIBUTE, why);
        break;
      }
      case "usage":
        for (const p of validateProtocol("common/usage/v1.json", value, "/usage") ?? []) {
          nested.push({ code: INVALID_ATTRIBUTE, path: p.path, message: `\`usage\`: ${p.message}` });
        }
        break;
      case "tenant":
        id("ten_");
        break;
      case "workspace":
        id("ws_");
        break;
      case "to_id":
        id("agt_");
        break;
      case "receipt":
        id("rcp_");
        break;
      case "sequence":
        if (!Number.isSafeInteger(value) || (value as number) < 0) bad(name, INVALID_ATTRIBUTE, "`sequence` must be a non-negative integer");
        break;
      case "hops":
        if (!Array.isArray(value)) bad(name, INVALID_ATTRIBUTE, "`hops` must be an array");
        break;
      case "sig":
        if (checkSig) {
          const why = sigProblem(s);
          if (why !== undefined) bad(name, MALFORMED_SIGNATURE, why);
        }
        break;
    }
  }
  v.push(...nested);
  const has = (n: string) => Object.hasOwn(attrs, n);
  if (has("capability_version") && !has("capability")) bad("capability", INVALID_CAPABILITY, "`capability_version` is set without `capability`");
  if (has("capability") && !has("capability_version")) bad("capability_version", INVALID_CAPABILITY, "`capability_version` is required when `capability` is set (§2.1)");
}

/** The name and major of a `type` string, or undefined when it breaks the grammar. */
export function parseType(s: string): { name: string; major: number } | undefined {
  const at = s.lastIndexOf(".v");
  if (at < 0) return undefined;
  const [name, major] = [s.slice(0, at), s.slice(at + 2)];
  if (!/^[1-9][0-9]{0,8}$/.test(major)) return undefined;
  const segments = name.split(".");
  if (segments[0] !== "agentbus" || segments.length < 2) return undefined;
  if (!segments.slice(1).every((seg) => /^[a-z][a-z0-9_]*$/.test(seg))) return undefined;
  return { name, major: Number(major) };
}

/** The major of a schema URL ending in `/v<N>.json`. */
export function schemaMajor(url: string): number | undefined {
  const m = /\/v([0-9]+)\.json$/.exec("/" + url.slice(url.lastIndexOf("/") + 1));
  return m === null ? undefined : Number(m[1]);
}

function checkTypeAndSchema(attrs: Record<string, unknown>, bad: Bad): string | undefined {
  const t = attrs.type;
  if (typeof t !== "string") return undefined;
  const parsed = parseType(t);
  if (parsed === undefined) {
    bad(INVALID_ATTRIBUTE, "/type", `${JSON.stringify(t)} is not a message type: agentbus.<family>[.<name>].v<major>, lowercase segments`);
    return undefined;
  }
  const schema = attrs.schema;
  if (typeof schema === "string") {
    const m = schemaMajor(schema);
    if (m === undefined) {
      bad(SCHEMA_MISMATCH, "/schema", `\`schema\` ${JSON.stringify(schema)} does not end in /v<major>.json, so its major cannot agree with \`type\``);
    } else if (m !== parsed.major) {
      bad(SCHEMA_MISMATCH, "/schema", `\`type\` is major ${parsed.major} but \`schema\` is major ${m} (§13.5)`);
    }
    if (typeof attrs.dataschema === "string" && attrs.dataschema !== schema) {
      bad(SCHEMA_MISMATCH, "/dataschema", "`dataschema` mirrors `schema` and must equal it (checklist G-WP-14)");
    }
  }
  const kind = `${parsed.name}.v${parsed.major}`;
  return Object.hasOwn(KNOWN_TYPES, kind) ? kind : undefined;
}

/** Why an attachment name is not a plain file name (§9), or undefined. */
export function attachmentNameProblem(name: string): string | undefined {
  if (name === "" || name === "." || name === "..") return `attachment name ${JSON.stringify(name)} is not a file name`;
  if (chars(name) > 255) return "attachment names are at most 255 characters";
  if (/[/\\]/.test(name)) return `attachment name ${JSON.stringify(name)} contains a path separator`;
  if (hasControl(name)) return `attachment name ${JSON.stringify(name)} contains a control character`;
  return undefined;
}

function checkTypeRules(attrs: Record<string, unknown>, kind: string, bad: Bad): void {
  if (KNOWN_TYPES[kind].correlation && !Object.hasOwn(attrs, "correlation_id")) {
    bad(MISSING_CORRELATION, "/correlation_id", `\`correlation_id\` is required on ${kind} (§2.1, §7)`);
  }
  if (kind === "agentbus.task.request.v1") {
    if (!Object.hasOwn(attrs, "capability")) bad(INVALID_CAPABILITY, "/capability", "`capability` is required on task.request (§5.2)");
    if (typeof attrs.to === "string" && attrs.to.startsWith("topic://")) {
      bad(TASK_TO_TOPIC, "/to", "a task.request has one recipient; topics are refused (checklist G-WP-17)");
    }
  }
  const data = attrs.data as Record<string, unknown> | undefined;
  const attachments = data !== null && typeof data === "object" ? data.attachments : undefined;
  if (Array.isArray(attachments)) {
    attachments.forEach((a, i) => {
      const name = a !== null && typeof a === "object" ? (a as Record<string, unknown>).name : undefined;
      const why = typeof name === "string" ? attachmentNameProblem(name) : undefined;
      if (why !== undefined) bad(INVALID_ATTACHMENT_NAME, `/data/attachments/${i}/name`, why);
    });
  }
}

function checkData(attrs: Record<string, unknown>, kind: string | undefined, bad: Bad): void {
  const data = attrs.data;
  if (data === null || typeof data !== "object" || Array.isArray(data)) return;
  if (kind === undefined) {
    if (typeof attrs.type === "string" && parseType(attrs.type) !== undefined) {
      bad(UNKNOWN_TYPE, "/type", `no schema is registered for ${attrs.type}`);
    }
    return;
  }
  const path = `${kind.slice(0, -3)}/v1.json`;
  const schema = attrs.schema;
  if (typeof schema === "string" && schemaMajor(schema) === 1 && schema !== REGISTRY_BASE + path) {
    bad(UNKNOWN_TYPE, "/schema", `\`schema\` must be the registry URL ${REGISTRY_BASE + path} (the URL is an identifier, checklist G-WP-28)`);
  }
  for (const p of validateProtocol(path, data, "/data") ?? []) bad(DATA_INVALID, p.path, p.message);
}
