/**
 * A worker: answers `task.request` messages for the capabilities on this agent's card (§6). For
 * each request of a served capability it sends `task.accept`, runs the handler, heartbeats
 * `task.progress`, lets it ask the requester (`task.needs_input`, answered by `task.input`), and
 * ends with a `task.result`: `succeeded` with the output (checked against the capability's
 * `output_schema` and the request's `constraints.output_schema`), `failed` when the handler throws
 * or its output does not fit, and `failed` with `failure.code: "cancelled"` when it saw a cancel.
 */

import { Agent, Message } from "./client.js";
import { schemaProblems } from "./schema.js";

type Json = Record<string, any>;

export class Cancelled extends Error {}

/** Throw from a handler to fail the task with a code. */
export class TaskFailed extends Error {
  constructor(message: string, readonly code = "failed", readonly retryable = false) {
    super(message);
  }
}

export interface Result {
  output?: Json;
  summary?: string;
}

export type Handler = (job: Job) => unknown | Promise<unknown>;

export interface CapabilityOptions {
  inputSchema?: Json;
  outputSchema?: Json;
  description?: string;
}

interface Capability extends CapabilityOptions {
  name: string;
  version: string;
  handler: Handler;
}

/** One task being worked: its request, and the verbs a handler uses. */
export class Job {
  cancelled = false;
  private answers: string[] = [];
  private waiting: ((a: string) => void) | undefined;
  private onCancel: Array<() => void> = [];

  constructor(readonly agent: Agent, readonly request: Message, readonly taskId: string) {}

  get input(): Json {
    const v = this.request.data.input;
    return v !== null && typeof v === "object" && !Array.isArray(v) ? v : {};
  }

  get instructions(): string {
    return typeof this.request.data.instructions === "string" ? this.request.data.instructions : "";
  }

  async send(kind: string, data: Json): Promise<void> {
    await this.agent.sendKind(kind, this.request.source, { task_id: this.taskId, ...data }, this.request.envelope);
  }

  progress(o: { percent?: number; note?: string; stage?: string } = {}): Promise<void> {
    return this.send("agentbus.task.progress.v1", { ...o });
  }

  /** Asks the requester (`task.needs_input`) and resolves to its answer (`task.input`). */
  async ask(question: string, options: string[] = []): Promise<string> {
    await this.send("agentbus.task.needs_input.v1", options.length ? { question, options } : { question });
    const ready = this.answers.shift();
    if (ready !== undefined) return ready;
    return new Promise<string>((resolve) => (this.waiting = resolve));
  }

  /** Reports a non-final error (`task.error`). */
  error(code: string, message: string, recoverable = true): Promise<void> {
    return this.send("agentbus.task.error.v1", { code, message, recoverable });
  }

  checkCancelled(): void {
    if (this.cancelled) throw new Cancelled(this.taskId);
  }

  /** Resolves when the requester cancels. */
  whenCancelled(): Promise<void> {
    return this.cancelled ? Promise.resolve() : new Promise((r) => this.onCancel.push(r));
  }

  deliverAnswer(answer: string): void {
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = undefined;
      w(answer);
    } else this.answers.push(answer);
  }

  cancel(): void {
    this.cancelled = true;
    for (const r of this.onCancel.splice(0)) r();
  }
}

/** Serves capabilities: `worker.capability("code.review", "1", fn)` then `await worker.run()`. */
export class Worker {
  readonly capabilities = new Map<string, Capability>();
  readonly jobs = new Map<string, Job>();
  readonly finished: Array<[string, string]> = [];

  constructor(readonly agent: Agent, readonly heartbeatMs = 60_000) {}

  capability(name: string, version: string, handler: Handler, o: CapabilityOptions = {}): this {
    this.capabilities.set(`${name}@${version.split(".")[0]}`, { name, version, handler, ...o });
    return this;
  }

  /** Declares the capabilities on the agent's card. */
  async publishCard(): Promise<void> {
    const capabilities = [...this.capabilities.values()].map((c) => {
      const e: Json = { name: c.name, version: c.version };
      if (c.description) e.description = c.description;
      if (c.inputSchema) e.input_schema = c.inputSchema;
      if (c.outputSchema) e.output_schema = c.outputSchema;
      return e;
    });
    await this.agent.updateCard({ capabilities });
  }

  async run(o: { signal?: AbortSignal; publishCard?: boolean } = {}): Promise<void> {
    if (o.publishCard ?? true) await this.publishCard();
    for await (const m of this.agent.messages({ signal: o.signal })) {
      await this.dispatch(m);
    }
  }

  private async dispatch(m: Message): Promise<void> {
    if (!m.verified) return; // never act on a request whose sender is not who it claims (§13.1)
    const taskId = m.data.task_id;
    if (m.type === "agentbus.task.cancel.v1" && this.jobs.has(taskId)) return this.jobs.get(taskId)?.cancel();
    if (m.type === "agentbus.task.input.v1" && this.jobs.has(taskId)) {
      return this.jobs.get(taskId)?.deliverAnswer(typeof m.data.answer === "string" ? m.data.answer : "");
    }
    if (m.type !== "agentbus.task.request.v1" || m.taskId === undefined || this.jobs.has(m.taskId)) return;
    const major = String(m.envelope.capability_version ?? "").split(".")[0];
    const cap = this.capabilities.get(`${m.envelope.capability}@${major}`);
    const job = new Job(this.agent, m, m.taskId);
    if (cap === undefined) {
      await job.send("agentbus.task.result.v1", { status: "rejected", rejection_reason: "capability_unsupported" });
      return;
    }
    await job.send("agentbus.task.accept.v1", {});
    this.jobs.set(job.taskId, job);
    void this.work(cap, job);
  }

  private async work(cap: Capability, job: Job): Promise<void> {
    const beat = setInterval(() => void job.progress({ note: "working" }).catch(() => undefined), this.heartbeatMs);
    let outcome = "failed";
    try {
      const value = await Promise.race([
        Promise.resolve().then(() => cap.handler(job)),
        job.whenCancelled().then(() => {
          throw new Cancelled(job.taskId);
        }),
      ]);
      job.checkCancelled();
      const result: Result =
        typeof value === "string" ? { summary: value }
        : value !== null && typeof value === "object" && ("output" in value || "summary" in value) ? (value as Result)
        : { output: value as Json };
      const data: Json = { status: "succeeded" };
      if (result.output !== undefined) {
        const schemas = [cap.outputSchema, job.request.data.constraints?.output_schema];
        const problems = schemas.flatMap((s) => (s !== undefined && s !== null ? checkSchema(result.output, s) : []));
        if (problems.length) {
          await job.send("agentbus.task.result.v1", {
            status: "failed",
            failure: { code: "output_invalid", message: `the output does not fit the output schema: ${problems.join("; ")}`, retryable: false },
          });
          outcome = "output_invalid";
          return;
        }
        data.output = result.output;
      }
      if (result.summary !== undefined) data.summary = result.summary;
      await job.send("agentbus.task.result.v1", data);
      outcome = "succeeded";
    } catch (e) {
      if (e instanceof Cancelled) {
        // The worker's word ends the task now rather than after the cancel grace (§6).
        await job.send("agentbus.task.result.v1", { status: "failed", failure: { code: "cancelled", message: "cancelled by the requester" } });
        outcome = "cancelled";
      } else if (e instanceof TaskFailed) {
        await job.send("agentbus.task.result.v1", { status: "failed", failure: { code: e.code, message: e.message, retryable: e.retryable } });
      } else {
        await job.send("agentbus.task.result.v1", { status: "failed", failure: { code: "handler_error", message: String(e) } });
      }
    } finally {
      clearInterval(beat);
      this.jobs.delete(job.taskId);
      this.finished.push([job.taskId, outcome]);
    }
  }
}

/** Every place `v` fails the JSON Schema `s` (draft 2020-12, all of it: `$ref`/`$defs`,
 * composition, `pattern`, formats and the rest, by Ajv), as `pointer: message` lines under `at`.
 * The gateway checks the output again and records what it finds on the task's timeline. */
export function checkSchema(v: unknown, s: unknown, at = ""): string[] {
  return schemaProblems(v, s, at).map((p) => `${p.path || "/"}: ${p.message}`);
}
