// Retries: a 429/503 answer is tried again after Retry-After with the same signed envelope (the
// same id, so the gateway answers a replay, never a second message); a refusal throws at once.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";

import { Agent, AgentBusError, RefusedError, SigningKey, VERSION, retryAfterMs } from "../dist/index.js";

async function serve(answer, o = {}) {
  const seen = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      seen.push({ at: Date.now(), body: body ? JSON.parse(body) : null, version: req.headers["agentbus-sidecar-version"] });
      const [status, headers, doc] = answer(seen.length);
      res.writeHead(status, { "content-type": "application/json", ...headers });
      res.end(JSON.stringify(doc));
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const agent = new Agent({
    gateway: `http://127.0.0.1:${server.address().port}`, credential: "aba_x", key: new SigningKey(Buffer.alloc(32)),
    keyId: "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V", address: "agent://default/default/alpha", clock: o.clock,
  });
  return { seen, agent, close: () => new Promise((r) => server.close(r)) };
}

test("a 503 is retried after Retry-After with the same envelope", async () => {
  const s = await serve((n) => n === 1
    ? [503, { "retry-after": "0.3" }, { error: { code: "AB-9002", message: "busy" } }]
    : [202, {}, { receipt: "rcp_1", id: "msg_x", state: "persisted" }]);
  try {
    const sent = await s.agent.send("agent://default/default/beta", "hi");
    assert.equal(sent.receipt.state, "persisted");
    assert.equal(s.seen.length, 2);
    assert.deepEqual(s.seen[0].body, s.seen[1].body);
    assert.ok(s.seen[1].at - s.seen[0].at >= 290);
    assert.equal(s.seen[0].version, VERSION);
  } finally {
    await s.close();
  }
});

test("a refusal throws its typed error at once", async () => {
  const s = await serve(() => [403, {}, { error: { code: "AB-2001", message: "policy denies", request_id: "req_1" } }]);
  try {
    await assert.rejects(s.agent.send("agent://default/default/beta", "hi"), (e) => {
      assert.ok(e instanceof RefusedError);
      assert.equal(e.code, "AB-2001");
      assert.equal(e.requestId, "req_1");
      assert.ok(e.fix);
      return true;
    });
    assert.equal(s.seen.length, 1);
  } finally {
    await s.close();
  }
});

test("rate limits give up after the retries with the last error", async () => {
  const s = await serve(() => [429, { "retry-after": "0" }, { error: { code: "AB-5001", message: "slow down" } }]);
  try {
    s.agent.maxRetries = 2;
    await assert.rejects(s.agent.send("agent://default/default/beta", "hi"), (e) => {
      assert.ok(e instanceof AgentBusError);
      assert.equal(e.code, "AB-5001");
      assert.equal(e.retryAfter, 0);
      assert.ok(e.retryable);
      return true;
    });
    assert.equal(s.seen.length, 3);
  } finally {
    await s.close();
  }
});

// A clock the test owns: `now` stands still and `sleep` records the wait and returns at once.
function stillClock(now) {
  const waits = [];
  return { waits, now: () => now, sleep: async (ms) => { waits.push(ms); } };
}

test("a Retry-After HTTP-date is waited out, then the same envelope is sent again", async () => {
  const now = Date.UTC(2026, 11, 7, 21, 0, 0);
  const clock = stillClock(now);
  const date = new Date(now + 90_000).toUTCString(); // IMF-fixdate: "Mon, 07 Dec 2026 21:01:30 GMT"
  assert.equal(date, "Mon, 07 Dec 2026 21:01:30 GMT");
  const s = await serve((n) => n === 1
    ? [503, { "retry-after": date }, { error: { code: "AB-9002", message: "busy" } }]
    : [202, {}, { receipt: "rcp_1", id: "msg_x", state: "persisted" }], { clock });
  try {
    const sent = await s.agent.send("agent://default/default/beta", "hi");
    assert.equal(sent.receipt.state, "persisted");
    assert.deepEqual(clock.waits, [90_000]);
    assert.equal(s.seen.length, 2);
    assert.equal(s.seen[1].body.id, s.seen[0].body.id);
    assert.deepEqual(s.seen[1].body, s.seen[0].body);
  } finally {
    await s.close();
  }
});

test("a 429 whose Retry-After date has passed is retried at once; the error keeps the wait", async () => {
  const now = Date.UTC(2026, 11, 7, 21, 0, 0);
  const clock = stillClock(now);
  const s = await serve((n) => [429, { "retry-after": n === 1 ? "Mon, 07 Dec 2026 20:59:00 GMT" : "Mon, 07 Dec 2026 21:00:05 GMT" }, { error: { code: "AB-5001", message: "slow down" } }], { clock });
  try {
    s.agent.maxRetries = 1;
    await assert.rejects(s.agent.send("agent://default/default/beta", "hi"), (e) => {
      assert.equal(e.code, "AB-5001");
      assert.equal(e.retryAfter, 5);
      return true;
    });
    assert.deepEqual(clock.waits, [0]);
    assert.equal(s.seen.length, 2);
    assert.equal(s.seen[1].body.id, s.seen[0].body.id);
  } finally {
    await s.close();
  }
});

test("RFC 9110 §10.2.3: delay-seconds and the three HTTP-date forms", () => {
  const now = Date.UTC(2026, 11, 7, 21, 0, 0);
  assert.equal(retryAfterMs("120", now), 120_000);
  assert.equal(retryAfterMs("Mon, 07 Dec 2026 21:02:00 GMT", now), 120_000);
  assert.equal(retryAfterMs("Monday, 07-Dec-26 21:02:00 GMT", now), 120_000); // RFC 850
  assert.equal(retryAfterMs("Mon Dec  7 21:02:00 2026", now), 120_000); // asctime, in UTC
  assert.equal(retryAfterMs("Sun, 06 Nov 1994 08:49:37 GMT", now), 0);
  for (const bad of ["soon", "-5", "Mon, 31 Feb 2026 21:02:00 GMT", "Mon, 07 Dec 2026 21:02:00 CET", ""]) {
    assert.equal(retryAfterMs(bad, now), undefined, bad);
  }
  assert.equal(retryAfterMs(null, now), undefined);
});
