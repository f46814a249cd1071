/**
 * A strict I-JSON (RFC 7493) parser, as the Rust core's `json` module: `JSON.parse` keeps the last
 * of two duplicate member names, rounds integers above 2^53 and accepts lone surrogate escapes,
 * so a signature checked after it could cover a value the sender never wrote. This one refuses
 * those, nesting deeper than {@link MAX_DEPTH}, invalid UTF-8 and anything RFC 8259 refuses.
 */

/** The deepest nesting of arrays and objects accepted. */
export const MAX_DEPTH = 64;

/** Why a text is not I-JSON (AB-3001). */
export class JsonError extends Error {}

const pointer = (path: string[]): string => path.map((s) => "/" + s.replace(/~/g, "~0").replace(/\//g, "~1")).join("");
const place = (path: string[]): string => (path.length ? pointer(path) : "the top-level value");

const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Parses one I-JSON value from bytes or text; throws {@link JsonError}. */
export function parseStrict(input: Uint8Array | string): unknown {
  let text: string;
  if (typeof input === "string") text = input;
  else {
    try {
      text = UTF8.decode(input);
    } catch {
      throw new JsonError("invalid UTF-8");
    }
  }
  const p = new Parser(text);
  p.ws();
  const value = p.value(0);
  p.ws();
  if (p.pos !== text.length) throw p.syntax("trailing characters after the value");
  return value;
}

class Parser {
  pos = 0;
  private path: string[] = [];
  constructor(private readonly s: string) {}

  syntax(reason: string): JsonError {
    return new JsonError(`invalid JSON at offset ${this.pos}: ${reason}`);
  }

  ws(): void {
    for (;;) {
      const c = this.s.charCodeAt(this.pos);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) this.pos++;
      else return;
    }
  }

  value(depth: number): unknown {
    const c = this.s[this.pos];
    if (c === undefined) throw this.syntax("unexpected end of input");
    if (c === "{") return this.object(depth + 1);
    if (c === "[") return this.array(depth + 1);
    if (c === '"') return this.string();
    if (c === "t") return this.literal("true", true);
    if (c === "f") return this.literal("false", false);
    if (c === "n") return this.literal("null", null);
    if (c === "-" || (c >= "0" && c <= "9")) return this.number();
    throw this.syntax("expected a value");
  }

  private literal(lit: string, v: unknown): unknown {
    if (!this.s.startsWith(lit, this.pos)) throw this.syntax("unknown literal");
    this.pos += lit.length;
    return v;
  }

  private object(depth: number): Record<string, unknown> {
    if (depth > MAX_DEPTH) throw new JsonError(`nesting deeper than ${MAX_DEPTH} levels at offset ${this.pos}`);
    this.pos++;
    const out: Record<string, unknown> = {};
    const names = new Set<string>();
    this.ws();
    if (this.s[this.pos] === "}") {
      this.pos++;
      return out;
    }
    for (;;) {
      this.ws();
      if (this.s[this.pos] !== '"') throw this.syntax("expected a member name");
      const key = this.string();
      this.ws();
      if (this.s[this.pos] !== ":") throw this.syntax("expected ':' after a member name");
      this.pos++;
      this.ws();
      this.path.push(key);
      const v = this.value(depth);
      this.path.pop();
      if (names.has(key)) throw new JsonError(`duplicate member name ${JSON.stringify(key)} in ${place(this.path)} (RFC 7493 §2.3)`);
      names.add(key);
      // A member named __proto__ stays a plain member, as JSON.parse keeps it.
      Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true });
      this.ws();
      const c = this.s[this.pos];
      if (c === ",") this.pos++;
      else if (c === "}") {
        this.pos++;
        return out;
      } else throw this.syntax("expected ',' or '}' in an object");
    }
  }

  private array(depth: number): unknown[] {
    if (depth > MAX_DEPTH) throw new JsonError(`nesting deeper than ${MAX_DEPTH} levels at offset ${this.pos}`);
    this.pos++;
    const out: unknown[] = [];
    this.ws();
    if (this.s[this.pos] === "]") {
      this.pos++;
      return out;
    }
    for (;;) {
      this.ws();
      this.path.push(String(out.length));
      out.push(this.value(depth));
      this.path.pop();
      this.ws();
      const c = this.s[this.pos];
      if (c === ",") this.pos++;
      else if (c === "]") {
        this.pos++;
        return out;
      } else throw this.syntax("expected ',' or ']' in an array");
    }
  }

  private hex4(): number {
    const digits = this.s.slice(this.pos, this.pos + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(digits)) throw this.syntax("invalid \\u escape");
    this.pos += 4;
    return parseInt(digits, 16);
  }

  private string(): string {
    this.pos++;
    let out = "";
    for (;;) {
      const start = this.pos;
      for (;;) {
        const c = this.s.charCodeAt(this.pos);
        if (Number.isNaN(c) || c === 0x22 || c === 0x5c || c < 0x20) break;
        this.pos++;
      }
      out += this.s.slice(start, this.pos);
      const c = this.s[this.pos];
      if (c === undefined) throw this.syntax("unterminated string");
      if (c === '"') {
        this.pos++;
        return out;
      }
      if (c !== "\\") throw this.syntax("raw control character in a string");
      const escapeAt = this.pos;
      this.pos++;
      const e = this.s[this.pos++];
      const simple: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
      if (e !== undefined && e in simple) out += simple[e];
      else if (e === "u") {
        const lone = new JsonError(`lone surrogate escape at offset ${escapeAt} (RFC 7493 §2.1)`);
        const hi = this.hex4();
        if (hi >= 0xd800 && hi < 0xdc00) {
          if (!this.s.startsWith("\\u", this.pos)) throw lone;
          this.pos += 2;
          const lo = this.hex4();
          if (lo < 0xdc00 || lo >= 0xe000) throw lone;
          out += String.fromCharCode(hi, lo);
        } else if (hi >= 0xdc00 && hi < 0xe000) throw lone;
        else out += String.fromCharCode(hi);
      } else {
        this.pos = escapeAt;
        throw this.syntax("invalid escape");
      }
    }
  }

  private number(): number {
    const start = this.pos;
    const digit = () => this.s[this.pos] >= "0" && this.s[this.pos] <= "9";
    if (this.s[this.pos] === "-") this.pos++;
    if (this.s[this.pos] === "0") {
      this.pos++;
      if (digit()) throw this.syntax("leading zero in a number");
    } else if (digit()) while (digit()) this.pos++;
    else throw this.syntax("expected a digit");
    let integer = true;
    if (this.s[this.pos] === ".") {
      integer = false;
      this.pos++;
      if (!digit()) throw this.syntax("expected a digit after '.'");
      while (digit()) this.pos++;
    }
    if (this.s[this.pos] === "e" || this.s[this.pos] === "E") {
      integer = false;
      this.pos++;
      if (this.s[this.pos] === "+" || this.s[this.pos] === "-") this.pos++;
      if (!digit()) throw this.syntax("expected a digit in the exponent");
      while (digit()) this.pos++;
    }
    const literal = this.s.slice(start, this.pos);
    if (integer) {
      const big = BigInt(literal);
      if (big > 9007199254740991n || big < -9007199254740991n) {
        throw new JsonError(`integer ${literal} at ${place(this.path)} is beyond ±(2^53−1) (RFC 7493 §2.2); send it as a string`);
      }
      // "-0" is the double negative zero; JCS writes it as 0, like every zero.
      return Number(big);
    }
    const n = Number(literal);
    if (!Number.isFinite(n)) throw new JsonError(`number ${literal} at ${place(this.path)} overflows a double (RFC 7493 §2.2)`);
    return n;
  }
}
