// End to end against a real gateway (SQLite) started by the test.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { join } from "node:path";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";

import { Agent, SidecarTooOldError, frame } from "../dist/index.js";
import { Gateway, s3Bucket, s3Server, take, withoutWebSocket } from "./gateway.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Every agent a test makes, closed with its gateway so no socket keeps the process alive.
const agents = [];
const track = (a) => (agents.push(a), a);
async function stopAll(gw) {
  for (const a of agents.splice(0)) a.close();
  await gw.stop();
}

async function pair(gw) {
  const a = await track(await Agent.connect({ gateway: gw.url, token: gw.admin, name: "alpha", saveProfile: true, home: join(gw.dir, "ha") }));
  const b = await track(await Agent.connect({ gateway: gw.url, token: gw.admin, name: "beta" }));
  return [a, b];
}

test("send and receive, verified, over the WebSocket and the long poll", async () => {
  const gw = await Gateway.start();
  try {
    const [a, b] = await pair(gw);
    const sent = await a.send(b.address, "hello beta", { subject: "Greeting", expectsReply: true, priority: "high", idempotencyKey: "greet-1" });
    assert.equal(sent.receipt.state, "persisted");
    const again = await a.send(b.address, "hello beta", { idempotencyKey: "greet-1" });
    assert.ok(again.replay);
    assert.equal(again.id, sent.id);
    const [m] = await take(b, 1);
    assert.ok(m.verified);
    assert.equal(m.text, "hello beta");
    assert.ok(frame(m).startsWith(`<agentbus-message id="${sent.id}" from="${a.address}"`));
    await b.reply(m, "hi alpha");
    const [r] = await take(a, 1, { websocket: false });
    assert.equal(r.envelope.correlation_id, sent.id);
    assert.ok(r.verified);
    // The profile saved like `agentbus connect` loads again.
    const again2 = track(Agent.fromProfile("alpha", join(gw.dir, "ha")));
    assert.equal((await again2.card()).address, a.address);
  } finally {
    await stopAll(gw);
  }
});

test("a message the CLI sends is received; one sent here reaches the CLI's inbox", async () => {
  const gw = await Gateway.start();
  try {
    const home = join(gw.dir, "cli");
    gw.cli(home, "connect", "--gateway", gw.url, "--token", gw.admin, "--name", "erin");
    const frank = await track(await Agent.connect({ gateway: gw.url, token: gw.admin, name: "frank" }));
    gw.cli(home, "send", frank.address, "sent by the CLI");
    const [m] = await take(frank, 1);
    assert.ok(m.verified);
    assert.equal(m.text, "sent by the CLI");
    await frank.reply(m, "answered from TypeScript");
    gw.cli(home, "sidecar", "--once");
    const inbox = gw.cli(home, "inbox", "--all");
    assert.match(JSON.stringify(inbox), /answered from TypeScript/);
  } finally {
    await stopAll(gw);
  }
});

test("delegate to a worker: progress, a question, the output schema, a cancel", async () => {
  const gw = await Gateway.start();
  try {
    const [req, wrk] = await pair(gw);
    const worker = wrk.worker();
    let started;
    const slowStarted = new Promise((r) => (started = r));
    worker.capability("code.review", "1", async (job) => {
      await job.progress({ percent: 50, note: "halfway" });
      const branch = await job.ask("Which branch?", ["main", "dev"]);
      return { output: { verdict: "approve", branch }, summary: "looks good" };
    }, { outputSchema: { type: "object", required: ["verdict"], properties: { verdict: { enum: ["approve", "reject"] } } } });
    worker.capability("bad.output", "1", () => ({ nothing: true }), { outputSchema: { type: "object", required: ["verdict"] } });
    worker.capability("slow.job", "1", async (job) => { started(); await job.whenCancelled(); return "never"; });
    const stop = new AbortController();
    const running = worker.run({ signal: stop.signal }).catch(() => undefined);
    await sleep(500);
    const task = await req.delegate(wrk.address, "code.review", "1", { input: { diff: "+1" }, instructions: "Review this change." });
    for await (const m of req.messages()) {
      if (m.type === "agentbus.task.needs_input.v1") {
        assert.ok(m.verified);
        await task.answer("dev");
        await m.ack();
        break;
      }
    }
    const result = await task.wait(30_000);
    assert.equal(result.state, "succeeded");
    const events = [];
    for await (const e of task.progress()) events.push(e.type); // the timeline, ending with the task
    assert.ok(events.includes("agentbus.task.progress.v1") && events.includes("agentbus.task.needs_input.v1"));
    assert.equal(events.at(-1), "agentbus.task.result.v1");
    assert.deepEqual(result.output, { verdict: "approve", branch: "dev" });
    const bad = await (await req.delegate(wrk.address, "bad.output", "1", { instructions: "x" })).wait(30_000);
    assert.equal(bad.state, "failed");
    assert.equal(bad.failure.code, "output_invalid");
    const slow = await req.delegate(wrk.address, "slow.job", "1", { instructions: "wait" });
    await slowStarted;
    await slow.cancel("changed my mind");
    const end = await slow.wait(30_000);
    assert.equal(end.state, "cancelled");
    assert.ok(worker.finished.some(([id, o]) => id === slow.id && o === "cancelled"));
    stop.abort();
    await running;
    req.close();
    wrk.close();
  } finally {
    await stopAll(gw);
  }
});

test("a gateway restart mid-stream loses and duplicates nothing", async () => {
  const gw = await Gateway.start();
  try {
    const [a, b] = await pair(gw);
    for (let i = 0; i < 5; i++) await a.send(b.address, `before ${i}`);
    const got = [];
    const receiving = (async () => {
      for await (const m of b.messages()) {
        got.push(m.text);
        if (got.length === 10) { await m.ack(); return; }
      }
    })();
    while (got.length < 5) await sleep(50);
    await gw.stop();
    await gw.start();
    for (let i = 0; i < 5; i++) await a.send(b.address, `after ${i}`);
    await receiving;
    const want = [0, 1, 2, 3, 4].flatMap((i) => [`before ${i}`, `after ${i}`]);
    assert.deepEqual([...got].sort(), want.sort());
  } finally {
    await stopAll(gw);
  }
});

test("a tampered copy is unverified, and never handed over under require_verified_inbound", async () => {
  const gw = await Gateway.start();
  try {
    const [a, b] = await pair(gw);
    await a.send(b.address, "pay invoice 12", { subject: "honest" });
    assert.equal(gw.tamper("honest"), 1);
    const open = track(new Agent({ gateway: gw.url, credential: b.credential, key: b.key, keyId: b.keyId, address: b.address, agentId: b.agentId, requireVerified: false }));
    const [m] = await take(open, 1);
    assert.equal(m.subject, "tampered");
    assert.equal(m.verified, false);
    assert.match(m.frame(), / verified="false"/);
    await a.send(b.address, "pay invoice 13", { subject: "honest" });
    assert.equal(gw.tamper("honest"), 1);
    await a.send(b.address, "a clean one");
    const strict = track(new Agent({ gateway: gw.url, credential: b.credential, key: b.key, keyId: b.keyId, address: b.address, agentId: b.agentId, requireVerified: true }));
    const [m2] = await take(strict, 1);
    assert.equal(m2.text, "a clean one");
    assert.ok(m2.verified);
  } finally {
    await stopAll(gw);
  }
});

test("AB-6002 surfaces with its upgrade hint", async () => {
  const gw = await Gateway.start("--min-sidecar-version", "99.0.0");
  try {
    await assert.rejects(Agent.connect({ gateway: gw.url, token: gw.admin, name: "old" }), (e) => {
      assert.ok(e instanceof SidecarTooOldError);
      assert.equal(e.code, "AB-6002");
      assert.match(e.docUrl, /\/errors\/AB-6002$/);
      assert.match(e.upgradeHint, /upgrade/);
      return true;
    });
  } finally {
    await stopAll(gw);
  }
});

test("attachments from paths", async () => {
  const gw = await Gateway.start();
  try {
    const [a, b] = await pair(gw);
    const f = join(gw.dir, "notes.txt");
    writeFileSync(f, "attached notes\n");
    await a.send(b.address, "see attached", { attachments: [f] });
    const [m] = await take(b, 1);
    const [att] = m.data.attachments;
    assert.equal(att.name, "notes.txt");
    assert.match(att.ref, /^blob:\/\//);
    assert.equal((await b.download(att)).toString(), "attached notes\n");
    // Bytes that do not match the signed entry are refused, not handed over.
    await assert.rejects(b.download({ ...att, sha256: "0".repeat(64) }), (e) => e.code === "AB-3020");
  } finally {
    await stopAll(gw);
  }
});

test("a redelivery of a handled message is acked, not handed over again", async () => {
  // A short lease, so the gateway redelivers a copy whose ack was lost within the test.
  const gw = await Gateway.start("--visibility-timeout", "1s");
  try {
    const [a, b] = await pair(gw);
    await a.send(b.address, "once only");
    await a.send(b.address, "second");
    const realAck = b.ack.bind(b);
    let lost = false;
    b.ack = async (m) => {
      if (!lost) { lost = true; return; } // the first ack never reaches the gateway
      return realAck(m);
    };
    const handled = [];
    for await (const m of b.messages()) {
      handled.push(m.text);
      if (handled.length === 2) {
        await sleep(3000); // the first copy's lease runs out meanwhile
        await m.ack();
        break;
      }
    }
    await a.send(b.address, "third");
    const [m3] = await take(b, 1);
    assert.equal(m3.text, "third");
    assert.deepEqual(handled, ["once only", "second"]);
    assert.ok(lost);
  } finally {
    await stopAll(gw);
  }
});

test("without the WebSocket route the inbox falls back to the long poll: receives, acks and resumes without loss or duplicate", { timeout: 120_000 }, async () => {
  const gw = await Gateway.start();
  const proxy = await withoutWebSocket(gw.url);
  try {
    const [a, b] = await pair(gw);
    // The same agent, reaching the gateway through the proxy that refuses the socket.
    const viaPoll = track(new Agent({ gateway: proxy.url, credential: b.credential, key: b.key, keyId: b.keyId, address: b.address, agentId: b.agentId }));
    for (let i = 0; i < 3; i++) await a.send(b.address, `first ${i}`);
    const first = await take(viaPoll, 3);
    assert.deepEqual(first.map((m) => m.text), ["first 0", "first 1", "first 2"]);
    assert.ok(first.every((m) => m.verified));
    assert.ok(proxy.stats.upgrades >= 1, "the socket was tried first");
    assert.ok(proxy.stats.polls >= 1, "then the long poll was used");
    // Acked: another client of the same agent, straight to the gateway, finds nothing left.
    const direct = await b.call("GET", "/v1/inbox?after=0&wait=0&limit=100");
    assert.deepEqual(direct.deliveries ?? [], []);
    // Resumed: a gateway restart while the long poll waits; what follows arrives exactly once.
    const got = [];
    const receiving = (async () => {
      for await (const m of viaPoll.messages()) {
        got.push(m.text);
        if (got.length === 4) { await m.ack(); return; }
      }
    })();
    await a.send(b.address, "second 0");
    while (got.length < 1) await sleep(50);
    await gw.stop();
    await gw.start();
    for (let i = 1; i < 4; i++) await a.send(b.address, `second ${i}`);
    await receiving;
    assert.deepEqual(got, ["second 0", "second 1", "second 2", "second 3"]);
    const ids = new Set([...first.map((m) => m.id)]);
    assert.equal(ids.size, 3);
    const after = await b.call("GET", "/v1/inbox?after=0&wait=0&limit=100");
    assert.deepEqual(after.deliveries ?? [], []);
  } finally {
    await proxy.close();
    await stopAll(gw);
  }
});

test("an attachment too large to go inline travels through the S3 store and arrives byte for byte", { timeout: 120_000 }, async (t) => {
  const server = await s3Server();
  if (server.missing !== undefined) {
    // Never a silent skip: where the whole suite is meant to run, a missing store is a failure.
    if (process.env.CI === "true" || process.env.AGENTBUS_SDK_CROSS === "1") assert.fail(server.missing);
    t.skip(server.missing);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), "agentbus-ts-s3-"));
  const bucket = await s3Bucket(server.url, dir);
  // The inline cap is far below the file: only the pre-signed PUT of the sealed content can carry it.
  const gw = await Gateway.start(...bucket.flags, "--blob-inline-max", "65536");
  try {
    const [a, b] = await pair(gw);
    const content = randomBytes(2 * 1024 * 1024 + 512 * 1024 + 17); // three sealed pieces
    const f = join(dir, "build.tar");
    writeFileSync(f, content);
    await a.send(b.address, "the build, attached", { attachments: [f] });
    const [m] = await take(b, 1);
    assert.ok(m.verified);
    const [att] = m.data.attachments;
    assert.equal(att.name, "build.tar");
    assert.equal(att.size, content.length);
    assert.equal(att.sha256, createHash("sha256").update(content).digest("hex"));
    // In the bucket, sealed: three pieces, each with its 16-byte tag (the gateway's `complete`
    // opened every piece under the blob's key before it let the message through).
    const id = att.ref.slice(att.ref.lastIndexOf("/") + 1);
    const objects = await bucket.objects();
    assert.deepEqual(objects.filter(([k]) => k.endsWith(id)), [[`agentbus/blobs/${id}`, content.length + 3 * 16]], JSON.stringify(objects));
    // Downloaded by the receiver through the pre-signed GET, opened piece by piece.
    const dest = join(dir, "received.tar");
    const got = await b.download(att, dest);
    assert.ok(got.equals(content));
    assert.ok(readFileSync(dest).equals(content));
  } finally {
    await stopAll(gw);
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
