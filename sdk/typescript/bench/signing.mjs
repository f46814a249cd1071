// Times canonicalise + sign and canonicalise + verify of the 1 KiB envelope in
// tests/data/signing/one-kibibyte.json (docs/benchmarks.md, beside the Rust figure).
//
//   node sdk/typescript/bench/signing.mjs
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

import { SigningKey, b64urlDecode, sign, verify } from "../dist/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const c = JSON.parse(readFileSync(join(here, "..", "..", "..", "tests", "data", "signing", "one-kibibyte.json"), "utf8"));
const key = new SigningKey(b64urlDecode(c.seed));
const env = sign(structuredClone(c.envelope), key, c.key_id);
const size = Buffer.byteLength(JSON.stringify(env));

function perCallUs(fn, n) {
  const runs = [];
  for (let r = 0; r < 5; r++) {
    const t = process.hrtime.bigint();
    for (let i = 0; i < n; i++) fn();
    runs.push(Number(process.hrtime.bigint() - t) / n / 1000);
  }
  return runs.sort((a, b) => a - b)[2];
}

const signUs = perCallUs(() => sign(structuredClone(c.envelope), key, c.key_id), 2000);
const verifyUs = perCallUs(() => verify(env, key.publicKey), 2000);
console.log(`envelope ${size} bytes: canonicalise + sign ${signUs.toFixed(1)} µs, canonicalise + verify ${verifyUs.toFixed(1)} µs`);
