/**
 * Errors as typed exceptions, each carrying its `AB-` code with the catalogue's cause and fix.
 * `catalogue.json` at the package root is generated from the Rust catalogue; a Rust test fails
 * when it is not current.
 */

import { readFileSync } from "node:fs";

export interface CatalogueEntry {
  code: string;
  http_status: number;
  kind: string;
  origin: string;
  title: string;
  cause: string;
  fix: string;
  cli_fix: string | null;
  doc_path: string;
}

let cached: Map<string, CatalogueEntry> | undefined;

/** Every catalogue entry by code. */
export function catalogue(): Map<string, CatalogueEntry> {
  if (cached === undefined) {
    const doc = JSON.parse(readFileSync(new URL("../catalogue.json", import.meta.url), "utf8")) as {
      codes: CatalogueEntry[];
    };
    cached = new Map(doc.codes.map((e) => [e.code, e]));
  }
  return cached;
}

export interface ErrorOptions {
  docUrl?: string;
  gateway?: string;
  httpStatus?: number;
  requestId?: string;
  details?: Record<string, unknown>;
  retryAfter?: number;
  /** A fix for this occurrence, more precise than the catalogue's for the code. */
  fix?: string;
}

/** A failure with an `AB-` code: `code`, `message`, `cause`, `fix`, `docUrl`. */
export class AgentBusError extends Error {
  readonly code: string;
  readonly title: string;
  readonly kind: string;
  readonly cause_: string;
  readonly fix: string;
  readonly docUrl: string;
  readonly httpStatus?: number;
  readonly requestId?: string;
  readonly details: Record<string, unknown>;
  readonly retryAfter?: number;

  constructor(code: string, message: string, o: ErrorOptions = {}) {
    const entry = catalogue().get(code);
    super(`${code}: ${message}`);
    this.name = new.target.name;
    this.code = code;
    this.title = entry?.title ?? "";
    this.kind = entry?.kind ?? "internal";
    this.cause_ = entry?.cause ?? "";
    this.fix = o.fix ?? entry?.fix ?? "";
    const path = entry?.doc_path ?? `/errors/${code}`;
    this.docUrl = o.docUrl ?? (o.gateway ? o.gateway.replace(/\/+$/, "") + path : path);
    this.httpStatus = o.httpStatus;
    this.requestId = o.requestId;
    this.details = o.details ?? {};
    this.retryAfter = o.retryAfter;
  }

  /** The catalogue's cause (`cause` is taken by `Error`). */
  get reason(): string {
    return this.cause_;
  }

  get retryable(): boolean {
    return this.kind === "unavailable" || ["AB-5001", "AB-5002", "AB-4040"].includes(this.code);
  }
}

export class RefusedError extends AgentBusError {}
export class UnavailableError extends AgentBusError {}
export class InputError extends AgentBusError {}
export class ConfigurationError extends AgentBusError {}

/** AB-6002: this library is older than the gateway's `min_sidecar_version` (§11.4). */
export class SidecarTooOldError extends RefusedError {
  get upgradeHint(): string {
    return "upgrade @agentbus/sdk (npm install @agentbus/sdk@latest) to at least the min_sidecar_version in the gateway's /.well-known/agentbus.json";
  }
}

/** AB-1031: a CLI profile keeps its key in the OS keychain (or another store than a file), which
 * this library does not read: it signs with key files only. */
export class KeychainProfileError extends InputError {
  constructor(readonly profile: string, readonly keyStore: string, gateway = "<url>", agentId = "agt_…") {
    super("AB-1031", `profile ${profile} keeps its key in the ${keyStore === "keychain" ? "OS keychain" : `${keyStore} key store`}; this library reads only key files`, {
      // The same agent gets a second key, kept in a 0600 file under a profile of its own (the
      // Python library gives the same command; its test runs it with the real CLI).
      fix: `give the agent a key file under a second profile: AGENTBUS_KEYSTORE=file agentbus connect --gateway ${gateway} --token <agent credential> --agent ${agentId} --name ${profile} --profile ${profile}-file, then Agent.connect({ profile: "${profile}-file" }); or pass gateway, credential, key, keyId and address to Agent.connect`,
    });
  }
}

const BY_KIND: Record<string, typeof AgentBusError> = {
  refused: RefusedError,
  unavailable: UnavailableError,
  input: InputError,
  usage: InputError,
  configuration: ConfigurationError,
};

/** The exception class of `code`'s kind, built with its catalogue entry. */
export function errorFor(code: string, message: string, o: ErrorOptions = {}): AgentBusError {
  if (code === "AB-6002") return new SidecarTooOldError(code, message, o);
  const kind = catalogue().get(code)?.kind ?? "internal";
  const Cls = BY_KIND[kind] ?? AgentBusError;
  return new Cls(code, message, o);
}
