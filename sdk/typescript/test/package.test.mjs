// Ready to publish: the tarball `npm pack` makes holds exactly the library (dist with its type
// declarations, the data it reads at run time, README, LICENSE, package.json), and a project that
// installs that tarball imports it as ESM and type-checks against its declarations.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const PKG = join(dirname(fileURLToPath(import.meta.url)), "..");
const npm = (args, cwd = PKG) =>
  execFileSync("npm", [...args, "--cache", join(PKG, ".npm-cache"), "--no-audit", "--no-fund", "--loglevel=error"], { cwd, encoding: "utf8" });

function intended() {
  const modules = readdirSync(join(PKG, "src")).filter((f) => f.endsWith(".ts")).map((f) => f.slice(0, -3));
  const schemas = readdirSync(join(PKG, "schemas"), { recursive: true }).map(String).filter((p) => p.endsWith(".json")).map((p) => `schemas/${p}`);
  return [
    "LICENSE", "README.md", "catalogue.json", "package.json", ...schemas,
    ...modules.flatMap((m) => [`dist/${m}.js`, `dist/${m}.d.ts`]),
  ].sort();
}

test("npm pack lists exactly dist (.js and .d.ts), the run-time data, README, LICENSE and package.json", () => {
  const [pack] = JSON.parse(npm(["pack", "--dry-run", "--json", "--ignore-scripts"]));
  assert.deepEqual(pack.files.map((f) => f.path).sort(), intended());
  assert.equal(pack.name, "@agentbus/sdk");
  const meta = JSON.parse(readFileSync(join(PKG, "package.json"), "utf8"));
  assert.equal(meta.license, "Apache-2.0");
  assert.match(readFileSync(join(PKG, "LICENSE"), "utf8"), /Apache License\s+Version 2\.0/);
  assert.equal(meta.type, "module");
  assert.deepEqual(meta.exports["."], { types: "./dist/index.d.ts", import: "./dist/index.js" });
  for (const [name, version] of Object.entries({ ...meta.dependencies, ...meta.devDependencies })) {
    assert.match(version, /^\d+\.\d+\.\d+$/, `${name} is pinned`);
  }
});

test("the packed tarball installs, imports as ESM and type-checks under NodeNext", () => {
  const dir = mkdtempSync(join(tmpdir(), "agentbus-ts-pack-"));
  try {
    const [pack] = JSON.parse(npm(["pack", "--json", "--ignore-scripts", "--pack-destination", dir]));
    writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "consumer", version: "1.0.0", type: "module", private: true }));
    // The tarball unpacked where `npm install` puts it; its dependencies (and @types for the
    // declarations) linked from this package's node_modules, so nothing is fetched.
    const home = join(dir, "node_modules", "@agentbus", "sdk");
    mkdirSync(home, { recursive: true });
    execFileSync("tar", ["-xzf", join(dir, pack.filename), "-C", home, "--strip-components=1"]);
    const meta = JSON.parse(readFileSync(join(PKG, "package.json"), "utf8"));
    for (const dep of [...Object.keys(meta.dependencies), "@types"]) {
      mkdirSync(dirname(join(dir, "node_modules", dep)), { recursive: true });
      symlinkSync(join(PKG, "node_modules", dep), join(dir, "node_modules", dep));
    }
    writeFileSync(join(dir, "use.ts"), [
      'import { Agent, SigningKey, validateEnvelope, checkSchema, type Violation } from "@agentbus/sdk";',
      "const key: SigningKey = SigningKey.generate();",
      'const v: Violation[] = validateEnvelope({ specversion: "1.0" });',
      'const p: string[] = checkSchema({}, { type: "object", required: ["x"] });',
      "export const ok: boolean = typeof Agent === \"function\" && key.publicKey.length === 43 && v.length > 0 && p.length === 1;",
      "",
    ].join("\n"));
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({
      compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, noEmit: true, types: ["node"] },
      files: ["use.ts"],
    }));
    execFileSync(process.execPath, [join(PKG, "node_modules", "typescript", "bin", "tsc"), "-p", dir], { cwd: dir, encoding: "utf8" });
    const out = execFileSync(process.execPath, ["--input-type=module", "-e",
      'import * as ab from "@agentbus/sdk"; const v = ab.validateEnvelope(Buffer.from("{\\"a\\":1,\\"a\\":2}")); console.log(v[0].code, ab.checkSchema("x", { format: "email" }).length)'],
    { cwd: dir, encoding: "utf8" });
    assert.equal(out.trim(), "AB-3001 1");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
