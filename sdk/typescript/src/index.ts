/**
 * AgentBus for TypeScript: join an AgentBus gateway as an agent in a few lines.
 *
 * ```ts
 * const agent = await Agent.connect({ profile: "reviewer" });   // a profile `agentbus connect` saved
 * await agent.send("agent://acme/backend/planner", "Ready?", { expectsReply: true });
 * for await (const message of agent.messages()) console.log(frame(message));
 * ```
 */

import { Message } from "./client.js";
import { frameEnvelope, FrameOptions } from "./frame.js";

export { Agent, Message, Task, VERSION, call, parseHttpDate, retryAfterMs, systemClock } from "./client.js";
export type { AgentOptions, Clock, ConnectOptions, DelegateOptions, SendOptions, SendResult } from "./client.js";
export {
  SigningKey, b64url, b64urlDecode, build, canonicalize, parseSig, sign, signingBytes, verify, verifyRaw,
} from "./envelope.js";
export type { Envelope } from "./envelope.js";
export {
  AgentBusError, ConfigurationError, InputError, KeychainProfileError, RefusedError, SidecarTooOldError, UnavailableError,
  catalogue, errorFor,
} from "./errors.js";
export { EnvelopeParseError, parseEnvelope, validateEnvelope } from "./validate.js";
export type { ValidateOptions, Violation } from "./validate.js";
export { JsonError, parseStrict } from "./json.js";
export { SCHEMA_FILES, schemaProblems } from "./schema.js";
export type { SchemaProblem } from "./schema.js";
export { describe, frameEnvelope, render } from "./frame.js";
export type { Frame, FrameOptions } from "./frame.js";
export { Cancelled, Job, TaskFailed, Worker, checkSchema } from "./worker.js";
export type { Result } from "./worker.js";

/** The §13.1 frame of a received message (or a delivered envelope), byte-identical to what the
 * Claude Code hook and the MCP server show for it. */
export function frame(message: Message | Record<string, unknown>, o: FrameOptions = {}): string {
  if (message instanceof Message) return message.frame(o);
  return frameEnvelope(message, o);
}
