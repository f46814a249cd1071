/**
 * JSON Schema (draft 2020-12) with Ajv's 2020 build and ajv-formats, for two jobs: the protocol's
 * own schemas (`data` of each message type, §5; copied unchanged from the Rust core into
 * `schemas/`, laid out as their registry URLs) and the schemas agents declare (a capability's
 * `input_schema` and `output_schema`). As in the Rust core and the gateway, formats are asserted
 * and a `$ref` resolves only to a schema this library holds: nothing is ever fetched.
 */

import { readFileSync } from "node:fs";
import { Ajv2020 } from "ajv/dist/2020.js";
import type { ErrorObject, ValidateFunction } from "ajv/dist/2020.js";
import formats from "ajv-formats";

/** The host every registry URL starts with. */
export const REGISTRY_BASE = "https://komsary.agentbus.exchange/schemas/";

/** Every protocol schema, by its path under {@link REGISTRY_BASE}. */
export const SCHEMA_FILES = [
  "agentbus.message/v1.json",
  "agentbus.task.request/v1.json",
  "agentbus.task.accept/v1.json",
  "agentbus.task.progress/v1.json",
  "agentbus.task.result/v1.json",
  "agentbus.task.error/v1.json",
  "agentbus.task.cancel/v1.json",
  "agentbus.task.needs_input/v1.json",
  "agentbus.task.input/v1.json",
  "agentbus.ack/v1.json",
  "agentbus.system.undeliverable/v1.json",
  "agentbus.system.expired/v1.json",
  "common/usage/v1.json",
  "common/money/v1.json",
  "common/attachments/v1.json",
];

/** One place where a value fails its schema: a JSON Pointer and what is wrong there. */
export interface SchemaProblem {
  path: string;
  message: string;
}

// ajv-formats is CommonJS whose `module.exports` is the plugin and also carries it as `default`;
// under NodeNext the default import is typed as the module, so the plugin is read from `default`.
const addFormats = (formats as unknown as { default: (ajv: Ajv2020) => Ajv2020 }).default;

function newAjv(): Ajv2020 {
  // strict: false because draft 2020-12 lets schemas carry keywords and formats a validator does
  // not know (they are annotations); Ajv's strict mode would refuse such a schema outright.
  // allErrors: every problem, as the Rust core's `iter_errors` lists them.
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true, logger: false });
  addFormats(ajv);
  return ajv;
}

let registry: Ajv2020 | undefined;

/** The Ajv instance holding the protocol's schemas, each under its `$id`. */
function protocol(): Ajv2020 {
  if (registry === undefined) {
    const ajv = newAjv();
    for (const path of SCHEMA_FILES) {
      ajv.addSchema(JSON.parse(readFileSync(new URL(`../schemas/${path}`, import.meta.url), "utf8")));
    }
    registry = ajv;
  }
  return registry;
}

function problems(errors: ErrorObject[] | null | undefined, prefix: string): SchemaProblem[] {
  return (errors ?? []).map((e) => ({ path: prefix + e.instancePath, message: describe(e) }));
}

function describe(e: ErrorObject): string {
  const p = e.params as Record<string, unknown>;
  if (e.keyword === "required") return `'${String(p.missingProperty)}' is a required property`;
  if (e.keyword === "additionalProperties") return `'${String(p.additionalProperty)}' is not allowed`;
  return e.message ?? e.keyword;
}

/** Validates `value` against the protocol schema at `path` (under {@link REGISTRY_BASE}), with
 * pointers under `prefix`; undefined when no such schema is held. */
export function validateProtocol(path: string, value: unknown, prefix: string): SchemaProblem[] | undefined {
  const validate = protocol().getSchema(REGISTRY_BASE + path);
  if (validate === undefined) return undefined;
  return validate(value) ? [] : problems(validate.errors, prefix);
}

// Compiled agent schemas by their JSON text. Each gets an Ajv instance of its own: two agents'
// schemas may use the same `$id` for different content, which one instance refuses.
const compiled = new Map<string, ValidateFunction | Error>();

function compile(schema: unknown): ValidateFunction | Error {
  const key = JSON.stringify(schema);
  let v = compiled.get(key);
  if (v === undefined) {
    try {
      if (typeof schema !== "boolean" && (schema === null || typeof schema !== "object" || Array.isArray(schema))) {
        throw new Error("a JSON Schema is an object (or a boolean)");
      }
      v = newAjv().compile(schema as object);
    } catch (e) {
      v = new Error(`the schema does not compile without fetching anything: ${(e as Error).message}`);
    }
    if (compiled.size >= 256) compiled.clear();
    compiled.set(key, v);
  }
  return v;
}

/** Every place `value` fails `schema` (draft 2020-12, formats asserted), pointers under `at`. A
 * schema that does not compile cannot be met, and says why. */
export function schemaProblems(value: unknown, schema: unknown, at = ""): SchemaProblem[] {
  const validate = compile(schema);
  if (validate instanceof Error) return [{ path: at || "/", message: validate.message }];
  return validate(value) ? [] : problems(validate.errors, at);
}
