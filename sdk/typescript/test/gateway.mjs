// A real gateway for the end-to-end tests: `agentbus gateway` on a loopback port with its own
// data folder (SQLite), as tests/interop/conftest.py starts it.
import { spawn, execFileSync } from "node:child_process";
import { createServer } from "node:net";
import { mkdtempSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const BINARY = process.env.AGENTBUS_BIN ?? join(REPO, "target", "debug", "agentbus");

function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export class Gateway {
  static async start(...flags) {
    const g = new Gateway();
    g.dir = mkdtempSync(join(tmpdir(), "agentbus-ts-"));
    g.port = await freePort();
    g.url = `http://127.0.0.1:${g.port}`;
    g.flags = flags;
    await g.start();
    return g;
  }

  async start() {
    this.proc = spawn(BINARY, ["--json", "gateway", "--listen", `127.0.0.1:${this.port}`, "--data", join(this.dir, "gw"), ...this.flags], {
      stdio: ["ignore", "pipe", "ignore"],
    });
    const line = await new Promise((resolve, reject) => {
      const rl = createInterface({ input: this.proc.stdout });
      rl.once("line", (l) => { rl.close(); resolve(l); });
      this.proc.once("exit", (c) => reject(new Error(`the gateway exited ${c}`)));
    });
    const doc = JSON.parse(line);
    // The admin token is printed on the first start only.
    this.admin = doc.admin_token ?? this.admin;
  }

  async stop() {
    if (!this.proc) return;
    const p = this.proc;
    this.proc = undefined;
    await new Promise((resolve) => { p.once("exit", resolve); p.kill("SIGTERM"); });
  }

  /** Runs the CLI with its own AGENTBUS_HOME; returns its --json output. */
  cli(home, ...args) {
    mkdirSync(home, { recursive: true });
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("AGENTBUS_")));
    Object.assign(env, { AGENTBUS_HOME: home, AGENTBUS_KEYSTORE: "file", HOME: home });
    const out = execFileSync(BINARY, ["--json", ...args], { env, encoding: "utf8" });
    return out.trim() ? JSON.parse(out) : null;
  }

  /** As someone with the gateway's disk would: the stored envelope whose subject is `subject`
   * gets the subject `tampered`, so its signature no longer verifies. */
  tamper(subject) {
    const script = `import sqlite3,sys
c=sqlite3.connect(sys.argv[1], timeout=5)
n=c.execute("UPDATE messages SET attrs = json_set(attrs, '$.subject', 'tampered') WHERE json_extract(attrs, '$.subject') = ?", (sys.argv[2],)).rowcount
c.commit(); print(n)`;
    return Number(execFileSync("python3", ["-c", script, join(this.dir, "gw", "agentbus.db"), subject], { encoding: "utf8" }).trim());
  }
}

/** The first `n` messages of `agent`'s inbox; the last is acked before the loop is left. */
export async function take(agent, n, o = {}) {
  const got = [];
  for await (const m of agent.messages(o)) {
    got.push(m);
    if (got.length === n) {
      await m.ack();
      break;
    }
  }
  return got;
}

/** A proxy in front of `target` that answers the inbox WebSocket route 404, as a gateway or a
 * proxy without WebSocket support does, and forwards every other request: a client must fall back
 * to the long poll. It counts refused upgrades and long polls. */
export async function withoutWebSocket(target) {
  const { createServer: httpServer, request } = await import("node:http");
  const stats = { upgrades: 0, polls: 0 };
  const to = new URL(target);
  const sockets = new Set();
  const server = httpServer((req, res) => {
    if (req.url.startsWith("/v1/inbox?")) stats.polls++;
    const out = request({ host: to.hostname, port: to.port, method: req.method, path: req.url, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode, up.headers);
      up.pipe(res);
    });
    out.on("error", () => { res.destroy(); });
    req.pipe(out);
  });
  server.on("connection", (s) => { sockets.add(s); s.on("close", () => sockets.delete(s)); });
  server.on("upgrade", (req, socket) => {
    stats.upgrades++;
    socket.end("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    stats,
    close: () => new Promise((r) => { for (const s of sockets) s.destroy(); server.close(r); }),
  };
}

/** The S3-compatible test server: AGENTBUS_TEST_S3_URL (scripts/test starts one), else moto
 * started from ./.venv-s3 for the caller, as the Rust tests do (tests/s3/moto_server.py serves
 * until its stdin closes; `stop()` ends it). `missing` says why there is none. */
export async function s3Server() {
  const given = process.env.AGENTBUS_TEST_S3_URL;
  if (given) return { url: given, stop: async () => {} };
  const python = join(REPO, ".venv-s3", "bin", "python");
  const how = "install moto with `python3 -m venv .venv-s3 && .venv-s3/bin/pip install -r tests/s3/requirements.txt` (./scripts/test does), or set AGENTBUS_TEST_S3_URL";
  const { existsSync } = await import("node:fs");
  if (!existsSync(python)) return { missing: `AGENTBUS_TEST_S3_URL is unset and ${python} is missing: ${how}` };
  const proc = spawn(python, [join(REPO, "tests", "s3", "moto_server.py")], { stdio: ["pipe", "pipe", "ignore"] });
  const exited = new Promise((r) => proc.once("exit", r));
  const line = await new Promise((resolve) => {
    const rl = createInterface({ input: proc.stdout });
    rl.once("line", (l) => { rl.close(); resolve(l); });
    exited.then(() => resolve(""));
  });
  const stop = async () => { proc.stdin.end(); proc.stdout.destroy(); await exited; };
  if (!line.startsWith("http://")) {
    proc.kill();
    await stop();
    return { missing: `tests/s3/moto_server.py did not start: ${how}` };
  }
  return { url: line.trim(), stop };
}

/** A fresh bucket on the S3 test server (moto takes unsigned requests) and the gateway flags
 * that store blob content in it. */
export async function s3Bucket(url, dir) {
  const { randomBytes } = await import("node:crypto");
  const { writeFileSync } = await import("node:fs");
  const name = `t-${randomBytes(8).toString("hex")}`;
  const r = await fetch(`${url}/${name}`, { method: "PUT" });
  if (!r.ok) throw new Error(`creating bucket ${name}: ${r.status}`);
  mkdirSync(dir, { recursive: true });
  const secret = join(dir, "s3-secret");
  writeFileSync(secret, "test-secret-key\n");
  return {
    name,
    flags: [
      "--s3-endpoint", url, "--s3-bucket", name, "--s3-region", "us-east-1", "--s3-access-key-id", "testing",
      "--s3-secret-access-key-file", secret, "--s3-path-style", "true", "--s3-prefix", "agentbus/blobs/",
    ],
    /** Every object in the bucket as [key, size] (moto answers unsigned listings). */
    async objects() {
      const body = await (await fetch(`${url}/${name}?list-type=2`)).text();
      return [...body.matchAll(/<Contents>([\s\S]*?)<\/Contents>/g)].map((m) => [
        /<Key>([^<]*)<\/Key>/.exec(m[1])?.[1], Number(/<Size>([0-9]+)<\/Size>/.exec(m[1])?.[1]),
      ]);
    },
  };
}
