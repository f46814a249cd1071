/**
 * The client: connect, send and reply, delegate, receive (§8), with retries. Every request carries
 * the bearer credential and `agentbus-sidecar-version` (§11.4), so a gateway that needs a newer
 * client answers AB-6002 ({@link SidecarTooOldError}). 429 and 5xx answers and lost connections
 * are retried with exponential backoff honouring `Retry-After`; a publish is retried with the same
 * signed envelope, hence the same id, which the gateway answers as an idempotent replay.
 */

import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { basename, join } from "node:path";
import WebSocket from "ws";

import { open, SCHEME as SEAL_SCHEME, seal } from "./blobseal.js";
import { b64urlDecode, build, BuildOptions, childTraceparent, Envelope, parseSig, sign, SigningKey, verify } from "./envelope.js";
import { AgentBusError, KeychainProfileError, errorFor } from "./errors.js";
import { frameEnvelope } from "./frame.js";
import { validateEnvelope } from "./validate.js";

export const VERSION = "0.1.0";
export const SIDECAR_VERSION_HEADER = "agentbus-sidecar-version";
export const TERMINAL_STATES = ["succeeded", "failed", "rejected", "expired", "cancelled"];

type Json = Record<string, any>;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Where the retries read the time and wait: the system's, or a test's. */
export interface Clock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

export const systemClock: Clock = { now: () => Date.now(), sleep };

function agentbusHome(home?: string): string {
  return home ?? process.env.AGENTBUS_HOME ?? join(homedir(), ".agentbus");
}

/** What a publish answered: the receipt, and the envelope as sent. */
export interface SendResult {
  id: string;
  receipt: Json;
  envelope: Envelope;
  replay: boolean;
  taskId?: string;
  reply?: Message;
}

/** One delivered copy (§8): the envelope, whether its signature verified, and its lease. */
export class Message {
  acked = false;
  constructor(
    readonly envelope: Json,
    readonly sequence: number,
    readonly delivery: string,
    readonly attempt: number,
    readonly verified: boolean,
    readonly whyUnverified: string | undefined,
    readonly taskId: string | undefined,
    private readonly agent: Agent,
  ) {}

  get id(): string { return String(this.envelope.id ?? ""); }
  get type(): string { return String(this.envelope.type ?? ""); }
  get source(): string { return String(this.envelope.source ?? ""); }
  get subject(): string | undefined { return typeof this.envelope.subject === "string" ? this.envelope.subject : undefined; }
  get data(): Json {
    const d = this.envelope.data;
    return d !== null && typeof d === "object" && !Array.isArray(d) ? d : {};
  }
  get text(): string { return typeof this.data.text === "string" ? this.data.text : ""; }

  /** The §13.1 frame of this message, for a model's context. */
  frame(o: { profile?: string; late?: boolean } = {}): string {
    return frameEnvelope(this.envelope, {
      verified: this.verified ? "true" : "false",
      requestTask: this.taskId,
      profile: o.profile,
      late: o.late,
    });
  }

  async ack(): Promise<void> {
    if (!this.acked) {
      await this.agent.ack(this);
      this.acked = true;
    }
  }
}

/** A delegated task: wait for its end, follow its progress, answer its questions, cancel it. */
export class Task {
  readonly id: string;
  constructor(readonly agent: Agent, readonly request: SendResult, readonly worker: string) {
    if (request.taskId === undefined) throw errorFor("AB-4015", "the gateway's receipt named no task");
    this.id = request.taskId;
  }

  state(): Promise<Json> {
    return this.agent.call("GET", `/v1/tasks/${this.id}`);
  }

  /** Each timeline entry as it is recorded, until the task ends. */
  async *progress(pollMs = 500): AsyncGenerator<Json> {
    let seen = 0;
    for (;;) {
      const view = await this.state();
      const timeline: Json[] = view.timeline ?? [];
      for (const e of timeline.slice(seen)) yield e;
      seen = timeline.length;
      if (TERMINAL_STATES.includes(view.state)) return;
      await sleep(pollMs);
    }
  }

  /** Waits for the task to end; resolves to the final `task.result` data (or the last state). */
  async wait(timeoutMs = 300_000, pollMs = 300): Promise<Json> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const view = await this.state();
      if (TERMINAL_STATES.includes(view.state)) return this.final(view);
      if (Date.now() > deadline) throw errorFor("AB-4077", `task ${this.id} did not end in ${timeoutMs} ms`);
      await sleep(pollMs);
    }
  }

  private async final(view: Json): Promise<Json> {
    const doc = await this.agent.call("GET", `/v1/conversations/${this.request.envelope.conversation_id}`);
    const list: Json[] = doc.envelopes ?? doc.messages ?? [];
    for (const e of [...list].reverse()) {
      const env = e.envelope ?? e;
      if (
        env?.data?.task_id === this.id &&
        (env.type === "agentbus.task.result.v1" || env.type === "agentbus.task.error.v1")
      ) {
        return { state: view.state, ...env.data };
      }
    }
    return { state: view.state, task_id: this.id };
  }

  answer(text: string): Promise<SendResult> {
    return this.agent.sendKind("agentbus.task.input.v1", this.worker, { task_id: this.id, answer: text }, this.request.envelope);
  }

  cancel(reason?: string): Promise<SendResult> {
    const data: Json = { task_id: this.id };
    if (reason !== undefined) data.reason = reason;
    return this.agent.sendKind("agentbus.task.cancel.v1", this.worker, data, this.request.envelope);
  }
}

export interface AgentOptions {
  gateway: string;
  credential: string;
  key: SigningKey;
  keyId: string;
  address: string;
  agentId?: string;
  profile?: string;
  /** Overrides the workspace's `require_verified_inbound`. */
  requireVerified?: boolean;
  maxRetries?: number;
  version?: string;
  /** The clock retries wait on (tests inject one). */
  clock?: Clock;
}

export interface ConnectOptions {
  gateway?: string;
  /** A user integration token (`abu_…`): registers a new agent named `name` with a fresh key. */
  token?: string;
  name?: string;
  card?: Json;
  saveProfile?: boolean;
  /** A profile the CLI saved under `$AGENTBUS_HOME` (file key store). */
  profile?: string;
  home?: string;
  /** Explicit: the agent credential (`aba_…`), key, key id and address. */
  credential?: string;
  key?: SigningKey;
  keyId?: string;
  address?: string;
  agentId?: string;
  requireVerified?: boolean;
  maxRetries?: number;
  version?: string;
  clock?: Clock;
}

export interface SendOptions {
  subject?: string;
  expectsReply?: boolean;
  priority?: "low" | "normal" | "high";
  idempotencyKey?: string;
  attachments?: string[];
  conversationId?: string;
  replyTo?: Message | Json;
  /** Waits this many milliseconds for the answer, returned as `result.reply`. */
  waitReplyMs?: number;
  format?: string;
}

export interface DelegateOptions {
  input?: Json;
  instructions?: string;
  constraints?: Json;
  budget?: Json;
  attachments?: string[];
  subject?: string;
  priority?: "low" | "normal" | "high";
  idempotencyKey?: string;
}

/** An agent connected to a gateway. */
export class Agent {
  readonly gateway: string;
  readonly credential: string;
  readonly key: SigningKey;
  readonly keyId: string;
  readonly address: string;
  readonly agentId?: string;
  readonly profile?: string;
  maxRetries: number;
  readonly version: string;
  readonly clock: Clock;
  private requireVerifiedFlag?: boolean;
  private keys = new Map<string, [string, string]>();
  private cursor = 0;
  private seen = new Set<string>();
  private stash: Message[] = [];
  private readonly closing = new AbortController();

  constructor(o: AgentOptions) {
    this.gateway = o.gateway.replace(/\/+$/, "");
    this.credential = o.credential;
    this.key = o.key;
    this.keyId = o.keyId;
    this.address = o.address;
    this.agentId = o.agentId;
    this.profile = o.profile;
    this.maxRetries = o.maxRetries ?? 5;
    this.version = o.version ?? VERSION;
    this.clock = o.clock ?? systemClock;
    this.requireVerifiedFlag = o.requireVerified;
  }

  /** One entry point for the three ways in (see {@link ConnectOptions}). */
  static async connect(o: ConnectOptions = {}): Promise<Agent> {
    const common = { requireVerified: o.requireVerified, maxRetries: o.maxRetries, version: o.version, clock: o.clock };
    if (o.token !== undefined && o.name !== undefined) {
      if (o.gateway === undefined) throw errorFor("AB-3060", "registering needs the gateway's URL");
      const key = SigningKey.generate();
      const doc = await call(o.gateway.replace(/\/+$/, ""), "POST", "/v1/agents", {
        token: o.token,
        body: { name: o.name, public_key: key.publicKey, ...(o.card ?? {}) },
        version: o.version ?? VERSION,
        retries: o.maxRetries ?? 5,
        clock: o.clock,
      });
      const agent = new Agent({
        gateway: o.gateway, credential: doc.token, key, keyId: doc.key.id, address: doc.agent.address,
        agentId: doc.agent.id, profile: o.saveProfile ? o.name : undefined, ...common,
      });
      if (o.saveProfile) agent.saveProfile(o.name, o.home);
      return agent;
    }
    if (o.credential !== undefined) {
      if (o.gateway === undefined || o.key === undefined || o.keyId === undefined || o.address === undefined) {
        throw errorFor("AB-3062", "an explicit connection needs gateway, credential, key, keyId and address");
      }
      return new Agent({
        gateway: o.gateway, credential: o.credential, key: o.key, keyId: o.keyId, address: o.address,
        agentId: o.agentId, ...common,
      });
    }
    const agent = Agent.fromProfile(o.profile, o.home, common);
    if (o.card) await agent.updateCard(o.card);
    return agent;
  }

  /** Loads a profile the CLI saved under `$AGENTBUS_HOME` (file key store). */
  static fromProfile(name?: string, home?: string, extra: Partial<AgentOptions> = {}): Agent {
    const root = agentbusHome(home);
    const dir = join(root, "profiles");
    if (name === undefined) {
      let names: string[] = [];
      try {
        names = readdirSync(dir).filter((f) => f.endsWith(".json")).map((f) => f.slice(0, -5)).sort();
      } catch {
        names = [];
      }
      if (names.length !== 1) {
        throw errorFor(names.length === 0 ? "AB-1040" : "AB-1041", `name a profile: ${names.join(", ") || "none saved"} under ${dir}`);
      }
      name = names[0];
    }
    let p: Json;
    try {
      p = JSON.parse(readFileSync(join(dir, `${name}.json`), "utf8"));
    } catch {
      throw errorFor("AB-1040", `no profile ${name} under ${dir}`);
    }
    if ((p.key_store ?? "file") !== "file") throw new KeychainProfileError(name, String(p.key_store), String(p.gateway ?? "<url>"), String(p.agent_id ?? "agt_…"));
    const keyPath = join(root, "keys", `${p.agent_id}.key`);
    let key: SigningKey;
    try {
      key = SigningKey.fromKeyFile(readFileSync(keyPath, "utf8"));
    } catch (e) {
      throw errorFor("AB-1030", `profile ${name}: the key file ${keyPath} cannot be used: ${(e as Error).message}`);
    }
    return new Agent({
      gateway: p.gateway, credential: p.token, key, keyId: p.key_id, address: p.address, agentId: p.agent_id,
      profile: name, ...extra,
    });
  }

  /** Writes the profile and key file in the CLI's layout. */
  saveProfile(name: string, home?: string): string {
    const root = agentbusHome(home);
    for (const d of [root, join(root, "profiles"), join(root, "keys")]) mkdirSync(d, { recursive: true, mode: 0o700 });
    writeFileSync(join(root, "keys", `${this.agentId}.key`), this.key.toKeyFile(), { mode: 0o600 });
    const path = join(root, "profiles", `${name}.json`);
    const doc = {
      name, gateway: this.gateway, agent_id: this.agentId, address: this.address, token: this.credential,
      key_id: this.keyId, key_store: "file",
    };
    writeFileSync(path, JSON.stringify(doc, null, 2) + "\n", { mode: 0o600 });
    return path;
  }

  /** Stops every receive loop and open socket of this agent. */
  close(): void {
    this.closing.abort();
  }

  // ---- HTTP ---------------------------------------------------------------------------------

  /** One API call with this agent's credential and retries. */
  call(method: string, path: string, body?: unknown, extra: { raw?: Buffer; binary?: boolean } = {}): Promise<Json> {
    return call(this.gateway, method, path, {
      token: this.credential, body, raw: extra.raw, binary: extra.binary, version: this.version, retries: this.maxRetries,
      signal: this.closing.signal, clock: this.clock,
    });
  }

  card(): Promise<Json> { return this.call("GET", `/v1/agents/${this.agentId}`); }
  updateCard(patch: Json): Promise<Json> { return this.call("PATCH", `/v1/agents/${this.agentId}`, patch); }
  async directory(): Promise<Json[]> { return (await this.call("GET", "/v1/agents")).agents ?? []; }
  /** Each recipient's delivery state of a sent message (persisted … shown … answered). */
  delivery(messageId: string): Promise<Json> { return this.call("GET", `/v1/messages/${messageId}/delivery`); }
  trace(conversationId: string): Promise<Json> { return this.call("GET", `/v1/conversations/${conversationId}`); }
  wellKnown(): Promise<Json> { return this.call("GET", "/.well-known/agentbus.json"); }

  // ---- sending ------------------------------------------------------------------------------

  /** Publishes a signed envelope; retries reuse it as it is, so its id stays the same. */
  async publish(envelope: Envelope): Promise<SendResult> {
    // §2 first: an envelope the gateway would refuse fails here, with the same code and path.
    const violations = validateEnvelope(envelope);
    if (violations.length > 0) {
      const [first] = violations;
      throw errorFor(first.code, `${first.path || "the envelope"}: ${first.message}`, { gateway: this.gateway, details: { violations } });
    }
    const doc = await call(this.gateway, "POST", "/v1/messages", {
      token: this.credential, body: envelope, version: this.version, retries: this.maxRetries, withReplay: true, clock: this.clock,
    });
    const replay = doc.__replay === true;
    delete doc.__replay;
    return {
      id: doc.id, receipt: doc, envelope, replay,
      taskId: typeof doc.task_id === "string" ? doc.task_id : undefined,
    };
  }

  seal(o: Omit<BuildOptions, "source">): Envelope {
    return sign(build({ ...o, source: this.address }), this.key, this.keyId);
  }

  async sendKind(kind: string, to: string, data: Json, answering?: Json, attrs: Partial<BuildOptions> = {}): Promise<SendResult> {
    const a: Partial<BuildOptions> = { ...attrs };
    if (answering !== undefined) {
      a.conversationId ??= answering.conversation_id;
      a.correlationId ??= answering.id;
      a.traceparent ??= childTraceparent(answering.traceparent);
    }
    return this.publish(this.seal({ kind, to, data, ...a }));
  }

  /** Uploads a file as a blob, to whichever target the gateway answers (§9, docs/api.md "Blob
   * targets"): its own `PUT /v1/blobs/{id}/content`, or a pre-signed PUT to an S3-compatible store
   * of the content sealed under the key it handed out, then `complete`. Returns the attachment
   * object `data.attachments` lists. */
  async upload(path: string): Promise<Json> {
    let content: Buffer;
    try {
      content = readFileSync(path);
    } catch (e) {
      throw errorFor("AB-4078", `cannot read the attachment ${path}: ${(e as Error).message}`, { gateway: this.gateway });
    }
    const sha256 = createHash("sha256").update(content).digest("hex");
    const name = basename(path);
    const media_type = "application/octet-stream";
    const blob = await this.call("POST", "/v1/blobs", { name, media_type, size: content.length, sha256 });
    const target: Json = blob.upload ?? { method: "PUT", url: `/v1/blobs/${blob.id}/content` };
    const url = String(target.url);
    if (url.startsWith("/")) {
      await this.call(String(target.method ?? "PUT"), url, undefined, { raw: content });
    } else {
      // A pre-signed PUT carries no bearer token, and the store holds only sealed bytes;
      // `complete` then has the gateway check what arrived.
      const [key, pieceBytes] = sealingOf(target.sealing, this.gateway);
      const sealed = seal(key, content, pieceBytes);
      const bound: Record<string, string> = { ...(target.headers ?? {}) };
      if (bound["content-length"] !== undefined && bound["content-length"] !== String(sealed.length)) {
        throw errorFor("AB-3057", `the upload URL of ${name} is signed for ${bound["content-length"]} bytes; the sealed content is ${sealed.length}`, { gateway: this.gateway });
      }
      delete bound["content-length"]; // fetch sets it from the body, which has exactly that length
      await this.objectStore(String(target.method ?? "PUT"), url, { headers: bound, body: sealed });
      await this.call(String(target.complete?.method ?? "POST"), String(target.complete?.url ?? `/v1/blobs/${blob.id}/complete`), {});
    }
    return { ref: blob.ref, name, media_type, size: content.length, sha256 };
  }

  /** Downloads an attachment (its `data.attachments` entry, a `blob://` ref or a `blb_` id) from
   * whichever target the gateway answers, opening a pre-signed download's sealed pieces; checks
   * size and sha256 (AB-3020) and, with `dest`, writes the file. Resolves to the bytes. */
  async download(attachment: Json | string, dest?: string): Promise<Buffer> {
    const ref = typeof attachment === "string" ? attachment : String(attachment.ref ?? "");
    const id = ref.slice(ref.lastIndexOf("/") + 1);
    const meta = await this.call("GET", `/v1/blobs/${id}`);
    const blob: Json = meta.blob ?? meta;
    // The sender's signed attachment entry is what the bytes must match; the gateway's record
    // stands in when only a ref or id is given.
    const signed: Json = typeof attachment === "string" ? {} : attachment;
    const size = Number(signed.size ?? blob.size);
    const sha256 = String(signed.sha256 ?? blob.sha256 ?? "");
    const target: Json = meta.download ?? { method: "GET", url: `/v1/blobs/${id}/content` };
    const url = String(target.url);
    let content: Buffer;
    if (url.startsWith("/")) content = await this.call("GET", url, undefined, { binary: true }) as unknown as Buffer;
    else {
      const [key, pieceBytes] = sealingOf(target.sealing, this.gateway);
      const sealed = await this.objectStore(String(target.method ?? "GET"), url, { headers: target.headers ?? {} });
      try {
        content = open(key, sealed, size, pieceBytes);
      } catch (e) {
        throw errorFor("AB-3020", `blob ${id} from the object store: ${(e as Error).message}`, { gateway: this.gateway });
      }
    }
    const got = createHash("sha256").update(content).digest("hex");
    if (content.length !== size || (sha256 !== "" && got !== sha256)) {
      throw errorFor("AB-3020", `blob ${id} arrived as ${content.length} bytes with sha256 ${got}; it was registered as ${size} bytes with ${sha256}`, { gateway: this.gateway });
    }
    if (dest !== undefined) writeFileSync(dest, content);
    return content;
  }

  /** A request to a pre-signed object-store URL (no bearer token), retried as gateway calls are. */
  private async objectStore(method: string, url: string, o: { headers: Record<string, string>; body?: Buffer }): Promise<Buffer> {
    // The query of a pre-signed URL is a credential: errors name the URL without it.
    const shown = url.split("?")[0];
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      try {
        res = await fetch(url, { method, headers: o.headers, body: o.body === undefined ? undefined : new Uint8Array(o.body), signal: this.closing.signal });
      } catch (e) {
        if (attempt >= this.maxRetries) throw errorFor("AB-4077", `cannot reach the object store at ${shown}: ${(e as Error).message}`, { gateway: this.gateway });
        await this.clock.sleep(backoffMs(attempt));
        continue;
      }
      const body = Buffer.from(await res.arrayBuffer());
      if (res.status < 300) return body;
      if ((res.status === 429 || res.status >= 500) && attempt < this.maxRetries) {
        await this.clock.sleep(backoffMs(attempt, retryAfterMs(res.headers.get("retry-after"), this.clock.now())));
        continue;
      }
      throw errorFor(method === "PUT" ? "AB-3056" : "AB-4077", `the object store answered ${res.status} to the ${method} of ${shown}`, { gateway: this.gateway, httpStatus: res.status });
    }
  }

  /** Sends an `agentbus.message.v1`; with `waitReplyMs`, waits for the answer (`result.reply`). */
  async send(to: string, text: string, o: SendOptions = {}): Promise<SendResult> {
    const data: Json = { text };
    if (o.expectsReply !== undefined || o.waitReplyMs !== undefined) data.expects_reply = o.expectsReply ?? true;
    if (o.format !== undefined) data.format = o.format;
    if (o.attachments?.length) data.attachments = await Promise.all(o.attachments.map((p) => this.upload(p)));
    const original = o.replyTo instanceof Message ? o.replyTo.envelope : o.replyTo;
    const result = await this.sendKind("agentbus.message.v1", to, data, original, {
      subject: o.subject, priority: o.priority, idempotencyKey: o.idempotencyKey, conversationId: o.conversationId,
    });
    if (o.waitReplyMs !== undefined) result.reply = await this.waitReply(result.id, o.waitReplyMs);
    return result;
  }

  /** Answers a message: same conversation and trace, `correlation_id` its id (§7). */
  reply(message: Message | Json, text: string, o: SendOptions = {}): Promise<SendResult> {
    const original = message instanceof Message ? message.envelope : message;
    return this.send(String(original.source), text, { ...o, replyTo: original });
  }

  /** Receives until the answer to `messageId` arrives; other messages wait, unacked, for the
   * next {@link messages} loop. */
  async waitReply(messageId: string, timeoutMs = 60_000): Promise<Message> {
    const stop = new AbortController();
    const it = this.stream({ handStash: false, signal: stop.signal });
    let timeout: NodeJS.Timeout | undefined;
    const timer = new Promise<never>((_, reject) => {
      timeout = setTimeout(() => reject(errorFor("AB-4077", `no reply to ${messageId} in ${timeoutMs} ms`)), timeoutMs);
    });
    const run = (async () => {
      for await (const m of it) {
        if (m.envelope.correlation_id === messageId) {
          await m.ack();
          return m;
        }
        this.stash.push(m);
      }
      throw errorFor("AB-4077", "the inbox stream ended");
    })();
    try {
      return await Promise.race([run, timer]);
    } finally {
      clearTimeout(timeout);
      stop.abort();
    }
  }

  /** Sends a `task.request` and returns its {@link Task}. */
  async delegate(to: string, capability: string, version = "1", o: DelegateOptions = {}): Promise<Task> {
    const data: Json = { instructions: o.instructions ?? "" };
    if (o.input !== undefined) data.input = o.input;
    if (o.constraints !== undefined) data.constraints = o.constraints;
    if (o.attachments?.length) data.attachments = await Promise.all(o.attachments.map((p) => this.upload(p)));
    const result = await this.sendKind("agentbus.task.request.v1", to, data, undefined, {
      capability: [capability, version], subject: o.subject, priority: o.priority,
      idempotencyKey: o.idempotencyKey, budget: o.budget,
    });
    return new Task(this, result, to);
  }

  // ---- receiving ----------------------------------------------------------------------------

  /** The workspace's `require_verified_inbound` (§13.1), unless set on this client. */
  async requireVerified(): Promise<boolean> {
    if (this.requireVerifiedFlag === undefined) {
      try {
        this.requireVerifiedFlag = Boolean((await this.call("GET", "/v1/inbox/policy")).require_verified_inbound);
      } catch {
        return true; // unknown policy: hold unverified messages back, the safe side of §13.1
      }
    }
    return this.requireVerifiedFlag;
  }

  private async refreshKeys(): Promise<void> {
    for (const card of await this.directory()) {
      for (const k of card.keys ?? []) this.keys.set(k.id, [card.address, k.public_key]);
    }
    for (const k of (await this.wellKnown()).gateway_keys ?? []) this.keys.set(k.id, ["agent://system/gateway/*", k.public_key]);
  }

  /** Re-verifies a delivered envelope against its sender's registered keys (§3.2); undefined
   * when it verifies, else why not. */
  async verify(envelope: Json): Promise<string | undefined> {
    let keyId: string;
    try {
      [keyId] = parseSig(envelope.sig);
    } catch (e) {
      return `the signature cannot be read: ${(e as Error).message}`;
    }
    if (!this.keys.has(keyId)) await this.refreshKeys();
    const known = this.keys.get(keyId);
    if (known === undefined) return `key ${keyId} is not registered to any agent`;
    const [owner, pk] = known;
    const source = String(envelope.source ?? "");
    const matches = owner.endsWith("*") ? source.startsWith(owner.slice(0, -1)) : owner === source;
    if (!matches) return `key ${keyId} belongs to ${owner}, not to the source ${source}`;
    return verify(envelope, pk) ? undefined : "the signature does not verify";
  }

  private async taskOfRequest(envelope: Json): Promise<string | undefined> {
    if (envelope.type !== "agentbus.task.request.v1") return undefined;
    const doc = await this.call("GET", `/v1/tasks?recipient=${this.agentId}&limit=1000`);
    return (doc.tasks ?? []).find((t: Json) => t.request_id === envelope.id)?.id;
  }

  private async message(d: Json): Promise<Message> {
    const env = d.envelope as Json;
    const why = await this.verify(env);
    return new Message(env, Number(d.sequence), String(d.delivery), Number(d.attempt ?? 1), why === undefined, why, await this.taskOfRequest(env), this);
  }

  private remember(id: string): void {
    this.seen.add(id);
    // The ids handled lately are enough: a redelivery comes within a lease or two.
    if (this.seen.size > 10_000) this.seen.delete(this.seen.values().next().value as string);
  }

  /** Acks a delivered copy: its id counts as handled, so a redelivery is skipped (§8). */
  async ack(m: Message): Promise<void> {
    this.remember(m.id);
    try {
      await this.call("POST", "/v1/inbox/acks", { acks: [{ sequence: m.sequence, delivery: m.delivery }] });
    } catch (e) {
      // AB-4010: the lease ran out and the copy was delivered again under a new token; that copy
      // arrives with the same id and is acked as a duplicate of this handled one (§8).
      if (!(e instanceof AgentBusError && e.code === "AB-4010")) throw e;
    }
  }

  /** Deliveries pushed over the inbox WebSocket, resuming after the last sequence seen. */
  private async *deliveriesWs(signal: AbortSignal): AsyncGenerator<Json> {
    const url = this.gateway.replace(/^http/, "ws") + `/v1/inbox/ws?after=${this.cursor}`;
    const ws = new WebSocket(url, {
      headers: { authorization: `Bearer ${this.credential}`, [SIDECAR_VERSION_HEADER]: this.version },
    });
    const queue: Array<Json | Error | null> = [];
    let wake: (() => void) | undefined;
    const push = (x: Json | Error | null) => {
      queue.push(x);
      wake?.();
    };
    ws.on("message", (raw) => {
      try {
        const frame = JSON.parse(raw.toString());
        if (frame.type === "delivery") push(frame.delivery);
        else if (frame.type === "error") push(errorFor(frame.error?.code ?? "AB-9003", frame.error?.message ?? "", { gateway: this.gateway }));
      } catch (e) {
        push(e as Error);
      }
    });
    ws.on("unexpected-response", (_req, res) => push(Object.assign(new Error(`HTTP ${res.statusCode}`), { status: res.statusCode })));
    ws.on("error", (e) => push(e));
    ws.on("close", () => push(null));
    const onAbort = () => ws.terminate();
    signal.addEventListener("abort", onAbort);
    try {
      for (;;) {
        while (queue.length === 0) await new Promise<void>((r) => (wake = r));
        const x = queue.shift();
        if (x === null || x === undefined) return;
        if (x instanceof Error) throw x;
        yield x;
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      ws.terminate();
    }
  }

  private async *deliveriesPoll(signal: AbortSignal, waitS = 20): AsyncGenerator<Json> {
    const doc = await call(this.gateway, "GET", `/v1/inbox?after=${this.cursor}&wait=${waitS}&limit=100`, {
      token: this.credential, version: this.version, retries: this.maxRetries, signal, clock: this.clock,
    });
    for (const d of doc.deliveries ?? []) yield d;
  }

  /** Deliveries as verified messages over the WebSocket, falling back to the long poll;
   * reconnects resume after the last sequence; redeliveries of a handled id are acked and skipped. */
  async *stream(o: { handStash?: boolean; websocket?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<Message> {
    let useWs = o.websocket ?? true;
    let backoff = 200;
    const signal = o.signal ? AbortSignal.any([o.signal, this.closing.signal]) : this.closing.signal;
    for (;;) {
      if (signal.aborted) return;
      while ((o.handStash ?? true) && this.stash.length > 0) yield this.stash.shift() as Message;
      try {
        for await (const d of useWs ? this.deliveriesWs(signal) : this.deliveriesPoll(signal)) {
          backoff = 200;
          const m = await this.message(d);
          this.cursor = Math.max(this.cursor, m.sequence);
          if (this.seen.has(m.id)) {
            await m.ack(); // handled already: its earlier ack was lost
            continue;
          }
          const held = this.stash.findIndex((s) => s.id === m.id);
          if (held >= 0) {
            this.stash[held] = m;
            continue;
          }
          yield m;
        }
        if (!useWs) continue;
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof AgentBusError && !e.retryable) throw e;
        if ((e as { status?: number }).status === 404) useWs = false;
      }
      await sleep(backoff + Math.random() * backoff);
      backoff = Math.min(backoff * 2, 5000);
    }
  }

  /** Received messages, verified (`message.verified`), each acked once the loop body that took it
   * is done (when the next is asked for): a throw in the body leaves it unacked, to be redelivered.
   * A loop left with `break` leaves its last message unacked too; `await message.ack()` first
   * keeps it. Under `require_verified_inbound` an unverified copy is never yielded. */
  async *messages(o: { websocket?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<Message> {
    for await (const m of this.stream({ websocket: o.websocket, signal: o.signal })) {
      if (!m.verified && (await this.requireVerified())) {
        await m.ack();
        continue;
      }
      yield m;
      this.remember(m.id);
      await m.ack();
    }
  }

  /** Calls `handler` for each message, acking only after it returns. */
  async listen(handler: (m: Message) => unknown | Promise<unknown>, o: { signal?: AbortSignal; websocket?: boolean } = {}): Promise<void> {
    for await (const m of this.messages(o)) {
      await handler(m);
    }
  }
}

interface CallOptions {
  token: string;
  body?: unknown;
  raw?: Buffer;
  version: string;
  retries: number;
  withReplay?: boolean;
  signal?: AbortSignal;
  clock?: Clock;
  /** The answer's bytes (a Buffer) rather than its JSON. */
  binary?: boolean;
}

/** The key and piece size of a `sealing` object the gateway answered (agentbus-chunked-v1). */
function sealingOf(sealing: Json | undefined, gateway: string): [Buffer, number] {
  if (sealing?.scheme !== SEAL_SCHEME) {
    throw errorFor("AB-3057", `the gateway offered a sealing this library does not know: ${JSON.stringify(sealing?.scheme ?? null)}`, { gateway });
  }
  let key: Buffer;
  try {
    key = b64urlDecode(String(sealing.key));
  } catch {
    key = Buffer.alloc(0);
  }
  const pieceBytes = Number(sealing.piece_bytes ?? 1 << 20);
  if (key.length !== 32 || !Number.isSafeInteger(pieceBytes) || pieceBytes <= 0) {
    throw errorFor("AB-3057", "the blob's content key is not 32 bytes of base64url, or its piece size is not a positive integer", { gateway });
  }
  return [key, pieceBytes];
}

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const M = MONTHS.join("|");
const IMF_FIXDATE = new RegExp(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\\d{2}) (${M}) (\\d{4}) (\\d{2}):(\\d{2}):(\\d{2}) GMT$`);
const RFC850 = new RegExp(`^(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\\d{2})-(${M})-(\\d{2}) (\\d{2}):(\\d{2}):(\\d{2}) GMT$`);
const ASCTIME = new RegExp(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (${M}) ([ \\d]\\d) (\\d{2}):(\\d{2}):(\\d{2}) (\\d{4})$`);

/** An HTTP-date (RFC 9110 §5.6.7: IMF-fixdate, or the obsolete RFC 850 and asctime forms) in
 * Unix milliseconds; undefined when `text` is none. */
export function parseHttpDate(text: string, nowMs: number = Date.now()): number | undefined {
  let y: number, mo: string, d: string, h: string, mi: string, sec: string;
  let m = IMF_FIXDATE.exec(text);
  if (m !== null) [d, mo, y, h, mi, sec] = [m[1], m[2], Number(m[3]), m[4], m[5], m[6]];
  else if ((m = RFC850.exec(text)) !== null) {
    [d, mo, h, mi, sec] = [m[1], m[2], m[4], m[5], m[6]];
    // A two-digit year more than 50 years ahead is the most recent past year with those digits.
    const thisYear = new Date(nowMs).getUTCFullYear();
    y = Math.floor(thisYear / 100) * 100 + Number(m[3]);
    if (y > thisYear + 50) y -= 100;
  } else if ((m = ASCTIME.exec(text)) !== null) [mo, d, h, mi, sec, y] = [m[1], m[2].trim(), m[3], m[4], m[5], Number(m[6])];
  else return undefined;
  const ms = Date.UTC(y, MONTHS.indexOf(mo), Number(d), Number(h), Number(mi), Number(sec));
  const back = new Date(ms);
  // Date.UTC rolls 31 Feb over into March; such a date is not a date.
  if (back.getUTCDate() !== Number(d) || Number(h) > 23 || Number(mi) > 59 || Number(sec) > 60) return undefined;
  return ms;
}

/** How long `Retry-After` asks to wait (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date,
 * measured from `nowMs` (a date already past means at once). */
export function retryAfterMs(value: string | null, nowMs: number = Date.now()): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  // delay-seconds is 1*DIGIT; a fraction is honoured as well.
  if (/^[0-9]+(\.[0-9]+)?$/.test(text)) return Number(text) * 1000;
  const at = parseHttpDate(text, nowMs);
  return at === undefined ? undefined : Math.max(0, at - nowMs);
}

function backoffMs(attempt: number, retryAfter?: number): number {
  if (retryAfter !== undefined) return retryAfter;
  const base = Math.min(200 * 2 ** attempt, 10_000);
  return base / 2 + (Math.random() * base) / 2;
}

/** One API call with retries: 429 and 5xx answers and lost connections are tried again after
 * `Retry-After` (or an exponential backoff with jitter); other refusals throw at once. */
export async function call(gateway: string, method: string, path: string, o: CallOptions): Promise<Json> {
  const headers: Record<string, string> = {
    authorization: `Bearer ${o.token}`,
    [SIDECAR_VERSION_HEADER]: o.version,
    "user-agent": `agentbus-typescript/${VERSION}`,
  };
  let payload: Blob | string | undefined;
  if (o.raw !== undefined) payload = new Blob([new Uint8Array(o.raw)]);
  else if (o.body !== undefined) {
    payload = JSON.stringify(o.body);
    headers["content-type"] = "application/json";
  }
  const clock = o.clock ?? systemClock;
  for (let attempt = 0; ; attempt++) {
    let res: Response;
    try {
      res = await fetch(gateway + path, { method, headers, body: payload, signal: o.signal });
    } catch (e) {
      if (o.signal?.aborted) throw errorFor("AB-4077", "the agent was closed", { gateway });
      if (attempt >= o.retries) throw errorFor("AB-4077", `cannot reach the gateway: ${(e as Error).message}`, { gateway });
      await clock.sleep(backoffMs(attempt));
      continue;
    }
    if (res.status < 400 && o.binary) return Buffer.from(await res.arrayBuffer()) as unknown as Json;
    const text = await res.text();
    if (res.status < 400) {
      const doc: Json = text ? JSON.parse(text) : {};
      if (o.withReplay) doc.__replay = res.headers.get("agentbus-idempotent-replay") === "true";
      return doc;
    }
    const retryAfter = retryAfterMs(res.headers.get("retry-after"), clock.now());
    let err: Json = {};
    try {
      err = JSON.parse(text).error ?? {};
    } catch {
      err = {};
    }
    const error = errorFor(err.code ?? (res.status >= 500 ? "AB-9001" : "AB-4004"), err.message ?? res.statusText, {
      docUrl: err.doc_url, gateway, httpStatus: res.status, requestId: err.request_id, details: err.details,
      retryAfter: retryAfter === undefined ? undefined : retryAfter / 1000,
    });
    if ((res.status === 429 || res.status >= 500) && attempt < o.retries) {
      await clock.sleep(backoffMs(attempt, retryAfter));
      continue;
    }
    throw error;
  }
}

// The worker helper lives in its own module; this keeps `agent.worker()` as in the Python library.
import { Worker } from "./worker.js";
export interface Agent {
  worker(heartbeatMs?: number): Worker;
}
Agent.prototype.worker = function (this: Agent, heartbeatMs?: number): Worker {
  return new Worker(this, heartbeatMs);
};
