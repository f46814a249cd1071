// A capability's output_schema is a whole JSON Schema (draft 2020-12), checked as the gateway and
// the Python library check it: each schema here uses keywords beyond type/required/properties/enum,
// and each bad output below was accepted by a check of those common keywords alone.
import { test } from "node:test";
import assert from "node:assert/strict";

import { checkSchema, schemaProblems } from "../dist/index.js";

const paths = (value, schema) => schemaProblems(value, schema).map((p) => p.path);

test("$ref into $defs is followed", () => {
  const schema = {
    type: "object",
    $defs: { verdict: { enum: ["approve", "reject"] }, finding: { type: "object", required: ["line"], properties: { line: { type: "integer", minimum: 1 } } } },
    properties: { verdict: { $ref: "#/$defs/verdict" }, findings: { type: "array", items: { $ref: "#/$defs/finding" } } },
  };
  assert.deepEqual(paths({ verdict: "approve", findings: [{ line: 3 }] }, schema), []);
  assert.deepEqual(paths({ verdict: "maybe" }, schema), ["/verdict"]);
  assert.deepEqual(paths({ verdict: "reject", findings: [{ line: 0 }, {}] }, schema), ["/findings/0/line", "/findings/1"]);
});

test("oneOf, anyOf, not, if/then", () => {
  assert.deepEqual(paths(7, { oneOf: [{ type: "string" }, { type: "integer" }] }), []);
  assert.ok(paths(true, { oneOf: [{ type: "string" }, { type: "integer" }] }).length > 0);
  assert.ok(paths(5, { oneOf: [{ type: "integer" }, { minimum: 0 }] }).length > 0, "matches both");
  assert.ok(paths("x", { anyOf: [{ type: "integer" }, { type: "null" }] }).length > 0);
  assert.ok(paths("x", { not: { type: "string" } }).length > 0);
  const conditional = { if: { properties: { status: { const: "failed" } } }, then: { required: ["reason"] } };
  assert.deepEqual(paths({ status: "ok" }, conditional), []);
  assert.ok(paths({ status: "failed" }, conditional).length > 0);
});

test("pattern, lengths, numbers and arrays", () => {
  const sha = { type: "string", pattern: "^[a-f0-9]{40}$" };
  assert.deepEqual(paths("a".repeat(40), sha), []);
  assert.deepEqual(paths("not a sha", sha), [""]);
  assert.ok(paths("ab", { type: "string", minLength: 3 }).length > 0);
  assert.ok(paths(10, { type: "integer", exclusiveMaximum: 10 }).length > 0);
  assert.ok(paths(0.3, { type: "number", multipleOf: 0.25 }).length > 0);
  assert.ok(paths([1, 1], { type: "array", uniqueItems: true }).length > 0);
  assert.ok(paths([], { type: "array", minItems: 1 }).length > 0);
  assert.deepEqual(paths(["a", 2], { type: "array", prefixItems: [{ type: "string" }, { type: "string" }] }), ["/1"]);
  assert.ok(paths([1, 2], { type: "array", contains: { type: "string" } }).length > 0);
});

test("formats are asserted; an unknown format is an annotation", () => {
  assert.deepEqual(paths("someone@example.com", { type: "string", format: "email" }), []);
  assert.deepEqual(paths("not an email", { type: "string", format: "email" }), [""]);
  assert.deepEqual(paths("2026-12-07T21:00:00Z", { format: "date-time" }), []);
  assert.deepEqual(paths("yesterday", { format: "date-time" }), [""]);
  assert.deepEqual(paths("2026-12-07T21:00:00", { format: "date-time" }), [""], "a date-time has a zone");
  assert.deepEqual(paths("not-a-uuid", { format: "uuid" }), [""]);
  assert.deepEqual(paths("anything", { type: "string", format: "x-house-style" }), []);
});

test("additionalProperties as a schema, unevaluatedProperties, propertyNames, dependentRequired", () => {
  assert.deepEqual(paths({ a: 1, b: "x" }, { type: "object", additionalProperties: { type: "integer" } }), ["/b"]);
  const closed = { type: "object", allOf: [{ properties: { a: {} } }], unevaluatedProperties: false };
  assert.deepEqual(paths({ a: 1 }, closed), []);
  assert.ok(paths({ a: 1, z: 2 }, closed).length > 0);
  assert.ok(paths({ Bad: 1 }, { type: "object", propertyNames: { pattern: "^[a-z]+$" } }).length > 0);
  assert.ok(paths({ card: "x" }, { type: "object", dependentRequired: { card: ["expiry"] } }).length > 0);
  assert.ok(paths({ a: 1, b: 2, c: 3 }, { type: "object", maxProperties: 2 }).length > 0);
});

test("messages name the pointer; schemas with the same $id do not clash; nothing is fetched", () => {
  assert.deepEqual(checkSchema({}, { type: "object", required: ["verdict"] }), ["/: 'verdict' is a required property"]);
  assert.deepEqual(checkSchema({ verdict: 1 }, { properties: { verdict: { type: "string" } } }, "/data/output"), ["/data/output/verdict: must be string"]);
  const a = { $id: "https://example.com/out.json", type: "string" };
  const b = { $id: "https://example.com/out.json", type: "integer" };
  assert.deepEqual(paths("x", a), []);
  assert.deepEqual(paths(1, b), []);
  assert.ok(paths(1, a).length > 0);
  const remote = checkSchema({}, { $ref: "https://example.com/never-fetched.json" });
  assert.equal(remote.length, 1);
  assert.match(remote[0], /does not compile without fetching anything/);
  assert.deepEqual(paths({ anything: true }, true), []);
  assert.ok(paths({}, false).length > 0);
});
