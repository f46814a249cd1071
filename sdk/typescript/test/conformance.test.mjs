// The shared conformance data (tests/data, README there): the TypeScript library agrees with the
// Rust core byte for byte on JCS, Ed25519, signing inputs, frames and the error catalogue.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

import * as ab from "../dist/index.js";

const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const DATA = join(REPO, "tests", "data");
const read = (...p) => readFileSync(join(DATA, ...p));
const list = (dir, ext) => readdirSync(join(DATA, dir)).filter((f) => f.endsWith(ext)).sort();
const hex = (h) => Buffer.from(h, "hex");

test("WP-3.1-2 JCS reference vectors canonicalise byte for byte", () => {
  const names = list("vectors/jcs/input", ".json");
  assert.equal(names.length, 6);
  for (const name of names) {
    const value = JSON.parse(read("vectors/jcs/input", name).toString());
    assert.equal(ab.canonicalize(value).toString(), read("vectors/jcs/output", name).toString(), name);
  }
});

test("WP-3.1-3 RFC 8032 and cryptography vectors sign and verify", () => {
  let n = 0;
  for (const line of read("vectors/ed25519/rfc8032-and-more-sign.input").toString().split("\n")) {
    if (!line) continue;
    const f = line.split(":");
    const key = new ab.SigningKey(hex(f[0].slice(0, 64)));
    assert.equal(ab.b64urlDecode(key.publicKey).toString("hex"), f[1]);
    const msg = hex(f[2]);
    assert.equal(key.sign(msg).toString("hex"), f[3].slice(0, 128));
    assert.ok(ab.verifyRaw(hex(f[1]), msg, hex(f[3].slice(0, 128))));
    n++;
  }
  assert.equal(n, 1024);
});

test("WP-3.1-3 Wycheproof: all 151 cases agree", () => {
  const doc = JSON.parse(read("vectors/ed25519/wycheproof-ed25519_test.json").toString());
  let n = 0;
  for (const group of doc.testGroups) {
    for (const c of group.tests) {
      const got = ab.verifyRaw(hex(group.publicKey.pk), hex(c.msg), hex(c.sig));
      assert.equal(got, c.result === "valid", `tcId ${c.tcId} (${c.comment})`);
      n++;
    }
  }
  assert.equal(n, 151);
});

test("WP-3.1-3 speccheck: the Rust core's strict policy (only case 3 verifies)", () => {
  const cases = JSON.parse(read("vectors/ed25519/speccheck-cases.json").toString());
  const got = cases.map((c) => ab.verifyRaw(hex(c.pub_key), hex(c.message), hex(c.signature)));
  assert.deepEqual(got, cases.map((_, i) => i === 3));
});

test("WP-3.1 signing inputs, signatures and public keys match the shared files", () => {
  const names = list("signing", ".json");
  assert.ok(names.length >= 4);
  for (const name of names) {
    const stem = name.slice(0, -5);
    const c = JSON.parse(read("signing", name).toString());
    const key = new ab.SigningKey(ab.b64urlDecode(c.seed));
    assert.deepEqual(ab.signingBytes(c.envelope), read("signing", `${stem}.input`), stem);
    const env = structuredClone(c.envelope);
    ab.sign(env, key, c.key_id);
    assert.equal(env.sig + "\n", read("signing", `${stem}.sig`).toString(), stem);
    assert.equal(key.publicKey + "\n", read("signing", `${stem}.pub`).toString(), stem);
    assert.ok(ab.verify(env, key.publicKey));
    assert.ok(ab.verify({ ...env, sequence: 7, received_at: "2026-10-10T14:00:02Z" }, key.publicKey));
    const tampered = structuredClone(env);
    tampered.data.x = 1;
    assert.ok(!ab.verify(tampered, key.publicKey));
  }
});

test("WP-13.1 frames render byte for byte", () => {
  const names = list("frames", ".json");
  assert.ok(names.length >= 19);
  for (const name of names) {
    const c = JSON.parse(read("frames", name).toString());
    const got = ab.render({
      id: c.id, localId: c.local_id, from: c.from, type: c.type, verified: c.verified,
      conversation: c.conversation, transport: c.transport, subject: c.subject, task: c.task,
      late: c.late, attachments: c.attachments, replyCommand: c.reply_command,
      restCommand: c.rest_command, body: c.body,
    });
    assert.equal(got, read("frames", name.replace(/\.json$/, ".frame")).toString(), name);
  }
});

test("WP-13.1 delivered envelopes frame as the hook does", () => {
  for (const name of list("envelope-frames", ".json")) {
    const c = JSON.parse(read("envelope-frames", name).toString());
    const got = ab.frame(c.envelope, {
      requestTask: c.request_task ?? undefined, profile: c.profile ?? undefined, late: c.late,
      localId: c.local_id ?? undefined,
    });
    assert.equal(got, read("envelope-frames", name.replace(/\.json$/, ".frame")).toString(), name);
  }
});

test("the packaged catalogue is the shared one, and errors carry code, cause, fix and doc URL", () => {
  const packaged = readFileSync(join(REPO, "sdk", "typescript", "catalogue.json")).toString();
  assert.equal(packaged, read("errors", "catalogue.json").toString());
  const e = ab.errorFor("AB-1011", "the signature does not verify", { gateway: "http://127.0.0.1:7700" });
  assert.ok(e instanceof ab.RefusedError);
  assert.equal(e.code, "AB-1011");
  assert.ok(e.reason && e.fix);
  assert.equal(e.docUrl, "http://127.0.0.1:7700/errors/AB-1011");
  const old = ab.errorFor("AB-6002", "sidecar 0.0.1 is older than the minimum 9.0");
  assert.ok(old instanceof ab.SidecarTooOldError);
  assert.match(old.upgradeHint, /min_sidecar_version/);
});

test("built envelopes carry what the Rust core writes", () => {
  const key = new ab.SigningKey(Buffer.alloc(32));
  const env = ab.build({ kind: "agentbus.message.v1", source: "agent://a/b/c", to: "agent://a/b/d", data: { text: "hi" }, priority: "normal" });
  assert.deepEqual(Object.keys(env), ["specversion", "id", "source", "type", "time", "datacontenttype", "to", "conversation_id", "traceparent", "schema", "data"]);
  assert.equal(env.schema, "https://komsary.agentbus.exchange/schemas/agentbus.message/v1.json");
  assert.match(env.id, /^msg_[0-9A-HJKMNP-TV-Z]{26}$/);
  ab.sign(env, key, "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V");
  assert.ok(ab.verify(env, key.publicKey));
});

// ---- §2 validation: every shared case, with its codes and paths ---------------------------------

// Cases whose outcome a client library cannot reproduce, by name with the reason. Empty: every
// case under tests/data/envelopes applies to a library that checks what it sends and receives.
const NOT_APPLICABLE = {};

/** The violations of one envelope as sorted, deduplicated `code path` lines, as the Rust test. */
function violations(bytes, opts) {
  const got = ab.validateEnvelope(bytes, opts).map((v) => `${v.code} ${v.path}`.trimEnd());
  return [...new Set(got)].sort();
}

function envelopeCases(dir) {
  return list(join("envelopes", dir), ".case").map((name) => {
    const text = read("envelopes", dir, name).toString();
    const at = text.indexOf("---\n");
    assert.ok(at >= 0, `${name}: a --- line separates header and body`);
    const header = text.slice(0, at);
    const expected = header.split("\n").filter((l) => l.startsWith("# expect: ")).map((l) => l.slice(10).trimEnd()).sort();
    return { name: `${dir}/${name}`, title: header.split("\n")[0], expected, body: Buffer.from(text.slice(at + 4), "utf8") };
  });
}

for (const [dir, minimum] of [["ok", 10], ["err", 50]]) {
  test(`WP-2 envelope validation: every ${dir}/ case gives the Rust core's codes and paths`, () => {
    const cases = envelopeCases(dir);
    assert.ok(cases.length >= minimum, `${cases.length} cases`);
    let ran = 0;
    for (const c of cases) {
      if (c.name in NOT_APPLICABLE) continue;
      assert.deepEqual(violations(c.body), c.expected, `${c.name}: ${c.title}`);
      ran++;
    }
    assert.equal(ran + Object.keys(NOT_APPLICABLE).filter((n) => n.startsWith(`${dir}/`)).length, cases.length);
  });
}

test("WP-2.2-1 the spec's examples validate, signatures aside; with the check only `sig` is at fault", () => {
  const names = list(join("envelopes", "spec"), ".json");
  assert.ok(names.length >= 4);
  for (const name of names) {
    const bytes = read("envelopes", "spec", name);
    assert.deepEqual(violations(bytes, { checkSigForm: false }), [], name);
    assert.deepEqual(violations(bytes), ["AB-1010 /sig"], name);
  }
});

test("WP-2.3-1 the size limit is exactly one mebibyte", () => {
  const codes = (o) => ab.validateEnvelope({}, o).map((v) => v.code);
  assert.ok(!codes({ receivedBytes: 1_048_576 }).includes("AB-3007"));
  assert.ok(codes({ receivedBytes: 1_048_577 }).includes("AB-3007"));
  assert.deepEqual(violations(Buffer.alloc(1_048_577, 0x20)), ["AB-3007"]);
});

test("WP-5.1-1 text is at most 500000 characters", () => {
  const [c] = envelopeCases("ok").filter((c) => c.name === "ok/wp-12-1-request-signed-shape.case");
  for (const [n, ok] of [[500_000, true], [500_001, false]]) {
    const env = ab.parseEnvelope(c.body);
    env.data.text = "é".repeat(n);
    const v = ab.validateEnvelope(env);
    assert.equal(v.length === 0, ok, `${n}: ${JSON.stringify(v)}`);
    if (!ok) assert.equal(v[0].path, "/data/text");
  }
});

test("the packaged protocol schemas are the Rust core's, byte for byte", () => {
  for (const path of ab.SCHEMA_FILES) {
    const packaged = readFileSync(join(REPO, "sdk", "typescript", "schemas", path)).toString();
    assert.equal(packaged, readFileSync(join(REPO, "crates", "agentbus-protocol", "schemas", path)).toString(), path);
  }
  const crate = readdirSync(join(REPO, "crates", "agentbus-protocol", "schemas"), { recursive: true }).filter((p) => String(p).endsWith(".json"));
  assert.equal(crate.length, ab.SCHEMA_FILES.length);
});

test("a sent envelope is validated first: an invalid one throws its code before any request", async () => {
  const agent = new ab.Agent({
    gateway: "http://127.0.0.1:9", credential: "aba_x", key: new ab.SigningKey(Buffer.alloc(32)),
    keyId: "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V", address: "agent://default/default/alpha", maxRetries: 0,
  });
  await assert.rejects(agent.send("agent://default/default/beta", "hi", { subject: "x".repeat(201) }), (e) => {
    assert.ok(e instanceof ab.InputError || e instanceof ab.AgentBusError);
    assert.equal(e.code, "AB-3008");
    assert.deepEqual(e.details.violations.map((v) => v.path), ["/subject"]);
    return true;
  });
  await assert.rejects(agent.send("mailto:someone@example.com", "hi"), (e) => e.code === "AB-3015");
});
