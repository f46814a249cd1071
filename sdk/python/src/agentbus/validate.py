"""§2 envelope validation, the Rust core's rules and codes (``agentbus_protocol::envelope``).

:func:`parse` reads bytes as the core does (at most 1 MiB, I-JSON, an object: AB-3007, AB-3001);
:func:`validate` lists every broken §2 rule as a :class:`Violation` with its ``AB-`` code and the
JSON Pointer of the attribute, in the core's order. Both run the shared cases under
``tests/data/envelopes`` and must give the same ``(code, path)`` pairs. The data schemas beside
this module are the core's files, copied unchanged; their URLs are identifiers, never fetched.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping, Optional, Union

import jsonschema
import referencing
import referencing.jsonschema

from .envelope import GATEWAY_SET, REGISTRY_BASE, b64url_decode

__all__ = ["Violation", "parse", "validate", "check", "MAX_ENVELOPE_BYTES"]

MAX_ENVELOPE_BYTES = 1024 * 1024
MAX_SUBJECT_CHARS = 200
MAX_IDEMPOTENCY_KEY_CHARS = 128
MAX_EXTENSIONS = 16
MAX_CAPABILITY_CHARS = 100
MAX_DEPTH = 64
MAX_SAFE_INTEGER = 2**53 - 1

SENDER_SET = (
    "specversion", "id", "source", "type", "time", "datacontenttype", "dataschema", "subject",
    "data", "to", "conversation_id", "traceparent", "schema", "sig", "correlation_id", "reply_to",
    "idempotency_key", "expires_at", "capability", "capability_version", "priority", "budget",
    "usage",
)
REQUIRED = (
    "specversion", "id", "source", "type", "time", "datacontenttype", "to", "conversation_id",
    "traceparent", "schema", "sig", "data",
)
KNOWN_TYPES = (
    "agentbus.message.v1", "agentbus.task.request.v1", "agentbus.task.accept.v1",
    "agentbus.task.progress.v1", "agentbus.task.result.v1", "agentbus.task.error.v1",
    "agentbus.task.cancel.v1", "agentbus.task.needs_input.v1", "agentbus.task.input.v1",
    "agentbus.ack.v1", "agentbus.system.undeliverable.v1", "agentbus.system.expired.v1",
)
_FOLLOWUPS = (
    "agentbus.task.accept.v1", "agentbus.task.progress.v1", "agentbus.task.result.v1",
    "agentbus.task.error.v1", "agentbus.task.cancel.v1", "agentbus.task.needs_input.v1",
    "agentbus.task.input.v1",
)
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ID_PREFIXES = ("msg_", "cnv_", "tsk_", "rcp_", "agt_", "key_", "ten_", "ws_", "usr_", "blb_")


@dataclass(frozen=True)
class Violation:
    """One broken rule: its catalogue code, the JSON Pointer of the attribute, and what is wrong."""

    code: str
    path: str
    message: str


class _NotIJson(ValueError):
    pass


# ---- parsing (I-JSON, RFC 7493) -----------------------------------------------------------------


class _Object(dict):  # type: ignore[type-arg]
    """A parsed JSON object that remembers a repeated member name (which a dict would hide)."""

    duplicate: Optional[str] = None


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = _Object()
    for k, v in pairs:
        if k in out and out.duplicate is None:
            out.duplicate = k
        out[k] = v
    return out


def _constant(name: str) -> Any:
    raise _NotIJson(f"{name} is not JSON")


def loads_marked(raw: Union[bytes, str]) -> Any:
    """A JSON value, parsed as ``json.loads`` does but keeping what I-JSON refuses visible to
    :func:`i_json_problem`: a page of deliveries with one bad envelope is still read, and only that
    envelope is marked. ValueError for text that is not JSON at all."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except _NotIJson:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _NotIJson(f"invalid JSON: {e}") from None
    except RecursionError:
        raise _NotIJson(f"nesting deeper than {MAX_DEPTH} levels") from None


def i_json_problem(value: Any, depth: int = 0) -> Optional[str]:
    """What in a value from :func:`loads_marked` breaks RFC 7493 (the core's AB-3001), or None."""
    if isinstance(value, dict):
        if depth >= MAX_DEPTH:
            return f"nesting deeper than {MAX_DEPTH} levels"
        dup = getattr(value, "duplicate", None)
        if dup is not None:
            return f"duplicate member name {dup!r} (RFC 7493 §2.3)"
        for k, v in value.items():
            problem = _str_problem(k) or i_json_problem(v, depth + 1)
            if problem:
                return problem
    elif isinstance(value, list):
        if depth >= MAX_DEPTH:
            return f"nesting deeper than {MAX_DEPTH} levels"
        for v in value:
            problem = i_json_problem(v, depth + 1)
            if problem:
                return problem
    elif isinstance(value, str):
        return _str_problem(value)
    elif isinstance(value, bool):
        return None
    elif isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            return f"integer {value} is beyond ±(2^53−1) (RFC 7493 §2.2); send it as a string"
    elif isinstance(value, float):
        if value in (float("inf"), float("-inf")):
            return "a number overflows a double (RFC 7493 §2.2)"
    return None


def _str_problem(s: str) -> Optional[str]:
    if any("\ud800" <= c <= "\udfff" for c in s):
        return "lone surrogate escape (RFC 7493 §2.1)"
    return None


def loads(raw: Union[bytes, str]) -> Any:
    """One I-JSON value; ValueError for anything the core's strict parser refuses (AB-3001)."""
    value = loads_marked(raw)
    problem = i_json_problem(value)
    if problem:
        raise _NotIJson(problem)
    return value


def parse(raw: Union[bytes, str]) -> dict[str, Any]:
    """The envelope in ``raw``, as the core's ``Envelope::parse``: AB-3007 beyond 1 MiB, AB-3001
    for anything not an I-JSON object. It does not check the attributes; see :func:`validate`."""
    from .errors import error_for

    data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
    if len(data) > MAX_ENVELOPE_BYTES:
        raise error_for("AB-3007", f"the envelope is {len(data)} bytes; the limit is 1 MiB (1,048,576 bytes)")
    try:
        value = loads(data)
    except ValueError as e:
        raise error_for("AB-3001", str(e)) from None
    if not isinstance(value, dict):
        raise error_for("AB-3001", "an envelope is a JSON object")
    return value


# ---- attribute forms ----------------------------------------------------------------------------


def _pointer(parts: Any) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def is_id(s: str, prefix: str) -> bool:
    """A prefixed id: the prefix, then 26 upper-case Crockford base32 characters of ≤ 128 bits."""
    kind = next((p for p in _ID_PREFIXES if s.startswith(p)), None)
    if kind != prefix:
        return False
    body = s[len(prefix):]
    return len(body) == 26 and all(c in _CROCKFORD for c in body) and _CROCKFORD.index(body[0]) <= 7


def _slug_ok(s: str, dots: bool) -> bool:
    inner = set("abcdefghijklmnopqrstuvwxyz0123456789-" + ("." if dots else ""))
    ends = set("abcdefghijklmnopqrstuvwxyz0123456789")
    return 3 <= len(s) <= 40 and all(c in inner for c in s) and s[0] in ends and s[-1] in ends


def address_kind(s: str) -> Optional[str]:
    """``agent``, ``topic`` or ``agent_id`` for a §4.1 address, None for anything else."""
    for scheme, dots in (("agent://", False), ("topic://", True)):
        if s.startswith(scheme):
            parts = s[len(scheme):].split("/")
            if len(parts) != 3 or not (_slug_ok(parts[0], False) and _slug_ok(parts[1], False)
                                       and _slug_ok(parts[2], dots)):
                return None
            return scheme[:-3]
    if s.startswith("agt_"):
        return "agent_id" if is_id(s, "agt_") else None
    return None


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))\Z"
)


def is_timestamp(s: str) -> bool:
    """An RFC 3339 date-time with a zone, as the core's ``Timestamp`` parses it."""
    m = _RFC3339.match(s)
    if not m:
        return False
    y, mo, d, h, mi, sec = (int(m.group(i)) for i in range(1, 7))
    try:
        _dt.datetime(y, mo, d, h, mi, sec)
    except ValueError:
        return False
    if m.group(9) is not None and (int(m.group(9)) > 23 or int(m.group(10)) > 59):
        return False
    return True


def is_traceparent(s: str) -> bool:
    parts = s.split("-")
    if len(parts) != 4:
        return False

    def hex_(p: str, n: int) -> bool:
        return len(p) == n and all(c in "0123456789abcdef" for c in p)

    version, trace, parent, flags = parts
    return (hex_(version, 2) and version != "ff" and hex_(trace, 32) and trace.strip("0") != ""
            and hex_(parent, 16) and parent.strip("0") != "" and hex_(flags, 2))


def is_capability(s: str) -> bool:
    return len(s) <= MAX_CAPABILITY_CHARS and all(
        seg and "a" <= seg[0] <= "z" and all(c.isascii() and (c.islower() or c.isdigit() or c == "-") for c in seg)
        for seg in s.split(".")
    )


def is_major(s: str) -> bool:
    return 0 < len(s) <= 9 and s.isascii() and s.isdigit() and (s == "0" or not s.startswith("0"))


def _is_decimal_amount(s: str) -> bool:
    body = s[1:] if s.startswith("-") else s
    integer, dot, frac = body.partition(".")
    return (integer != "" and integer.isascii() and integer.isdigit()
            and (not dot or (1 <= len(frac) <= 6 and frac.isascii() and frac.isdigit())))


def _is_control(c: str) -> bool:
    return unicodedata.category(c) == "Cc"


def _sig_problem(s: str) -> Optional[str]:
    parts = s.split(":", 2)
    if len(parts) != 3:
        return "three ':'-separated parts are needed"
    alg, key_id, text = parts
    if alg != "ed25519":
        return "the algorithm must be ed25519"
    if not is_id(key_id, "key_"):
        return "the key id must be a key_ id"
    try:
        raw = b64url_decode(text)
    except ValueError:
        return "the signature is not unpadded base64url"
    if len(raw) != 64:
        return "an Ed25519 signature is 64 bytes"
    return None


def _message_type(t: str) -> Optional[tuple[str, int]]:
    """``(name, major)`` of a ``type`` string, None when it breaks the grammar (G-WP-4)."""
    name, sep, major = t.rpartition(".v")
    if not sep or not major or len(major) > 9 or not (major.isascii() and major.isdigit()) or major.startswith("0"):
        return None
    segments = name.split(".")
    if segments[0] != "agentbus" or len(segments) < 2:
        return None
    for seg in segments[1:]:
        if not seg or not ("a" <= seg[0] <= "z") or not all(
            c.isascii() and (c.islower() or c.isdigit() or c == "_") for c in seg
        ):
            return None
    return name, int(major)


def schema_major(url: str) -> Optional[int]:
    last = url.rsplit("/", 1)[-1]
    if not (last.startswith("v") and last.endswith(".json")):
        return None
    digits = last[1:-5]
    return int(digits) if digits and digits.isascii() and digits.isdigit() else None


def _attachment_name_problem(name: str) -> Optional[str]:
    if name in ("", ".", ".."):
        return f"attachment name {name!r} is not a file name"
    if len(name) > 255:
        return "attachment names are at most 255 characters"
    if "/" in name or "\\" in name:
        return f"attachment name {name!r} contains a path separator"
    if any(_is_control(c) for c in name):
        return f"attachment name {name!r} contains a control character"
    return None


# ---- data schemas -------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _registry() -> referencing.Registry:
    root = resources.files(__package__).joinpath("schemas")
    resources_: list[tuple[str, referencing.Resource]] = []
    for family in root.iterdir():
        if not family.is_dir():
            continue
        dirs = [family] if family.name != "common" else [d for d in family.iterdir() if d.is_dir()]
        for d in dirs:
            for f in d.iterdir():
                if f.name.endswith(".json"):
                    doc = json.loads(f.read_text(encoding="utf-8"))
                    resources_.append((doc["$id"], referencing.jsonschema.DRAFT202012.create_resource(doc)))
    return referencing.Registry().with_resources(resources_)


_FORMATS = jsonschema.FormatChecker(formats=())
_FORMATS.checks("date-time")(lambda v: not isinstance(v, str) or is_timestamp(v))


@lru_cache(maxsize=None)
def _validator(path: str) -> jsonschema.Draft202012Validator:
    schema = _registry().contents(REGISTRY_BASE + path)
    return jsonschema.Draft202012Validator(schema, registry=_registry(), format_checker=_FORMATS)


def _schema_errors(path: str, instance: Any, prefix: str) -> list[tuple[str, str]]:
    v = _validator(path)
    return [(prefix + _pointer(e.absolute_path), e.message) for e in v.iter_errors(instance)]


# ---- validation ---------------------------------------------------------------------------------


def validate(
    envelope: Mapping[str, Any],
    *,
    received_bytes: Optional[int] = None,
    check_data: bool = True,
    check_sig_form: bool = True,
) -> list[Violation]:
    """Every §2 rule ``envelope`` breaks, in the core's order: names, required attributes,
    attribute forms, size, type and schema agreement, type-specific rules, then ``data`` against
    its schema. ``check_sig_form=False`` only for the spec's examples (placeholder signatures)."""
    v: list[Violation] = []
    _check_names(envelope, v)
    for name in REQUIRED:
        if name not in envelope:
            v.append(Violation("AB-3002", f"/{name}", f"`{name}` is required (§2.1)"))
    _check_forms(envelope, check_sig_form, v)
    size = received_bytes if received_bytes is not None else len(
        json.dumps(envelope, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    )
    if size > MAX_ENVELOPE_BYTES:
        v.append(Violation("AB-3007", "", f"the envelope is {size} bytes; at most {MAX_ENVELOPE_BYTES} (§2.3)"))
    kind = _check_type_and_schema(envelope, v)
    if kind is not None:
        _check_type_rules(envelope, kind, v)
    if check_data:
        _check_data(envelope, kind, v)
    return v


def check(envelope: Mapping[str, Any], **kw: Any) -> None:
    """Raises the typed error of the first violation (every one in ``details["violations"]``)."""
    from .errors import error_for

    found = validate(envelope, **kw)
    if found:
        first = found[0]
        where = f" at {first.path}" if first.path else ""
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise error_for(
            first.code, f"{first.message}{where}{more}",
            details={"violations": [{"code": x.code, "path": x.path, "message": x.message} for x in found]},
        )


def _check_names(env: Mapping[str, Any], v: list[Violation]) -> None:
    extensions = 0
    for name in env:
        if not name or not all(c.isascii() and (c.islower() or c.isdigit() or c == "_") for c in name):
            v.append(Violation("AB-3009", "/" + name.replace("~", "~0").replace("/", "~1"),
                               f"attribute name {name!r} is not lowercase [a-z0-9_] (§2.1)"))
            continue
        if name not in SENDER_SET and name not in GATEWAY_SET:
            extensions += 1
    if extensions > MAX_EXTENSIONS:
        v.append(Violation("AB-3010", "", f"{extensions} extension attributes; at most {MAX_EXTENSIONS} (§2.3)"))


def _check_forms(env: Mapping[str, Any], check_sig_form: bool, v: list[Violation]) -> None:
    nested: list[Violation] = []

    def bad(name: str, code: str, msg: str) -> None:
        v.append(Violation(code, f"/{name}", msg))

    for name, value in env.items():
        string_attr = name not in ("data", "budget", "usage", "sequence", "hops") and (
            name in SENDER_SET or name in GATEWAY_SET
        )
        if string_attr and not isinstance(value, str):
            bad(name, "AB-3003", f"`{name}` must be a string")
            continue
        s = value if isinstance(value, str) else ""
        if name == "specversion" and s != "1.0":
            bad(name, "AB-3003", f'`specversion` must be "1.0", not {s!r}')
        elif name in ("id", "correlation_id") and not is_id(s, "msg_"):
            bad(name, "AB-3003", f"`{name}`: {s!r} is not a msg_ id")
        elif name == "conversation_id" and not is_id(s, "cnv_"):
            bad(name, "AB-3003", f"`{name}`: {s!r} is not a cnv_ id")
        elif name == "source" and address_kind(s) != "agent":
            bad(name, "AB-3015", f"`source`: {s!r} is not agent://<tenant>/<workspace>/<name>")
        elif name == "to" and address_kind(s) is None:
            bad(name, "AB-3015", f"`to`: {s!r} is not an address")
        elif name == "reply_to":
            kind = address_kind(s)
            if kind == "topic":
                bad(name, "AB-3015", "`reply_to` must name an agent, not a topic")
            elif kind is None:
                bad(name, "AB-3015", f"`reply_to`: {s!r} is not an address")
        elif name in ("time", "expires_at", "received_at") and not is_timestamp(s):
            bad(name, "AB-3003", f"`{name}`: {s!r} is not an RFC 3339 date-time with a zone")
        elif name == "datacontenttype" and s != "application/json":
            bad(name, "AB-3003",
                "`datacontenttype: application/jose` (encrypted data) is post-MVP; send application/json"
                if s == "application/jose" else f"`datacontenttype` must be application/json, not {s!r}")
        elif name == "traceparent" and not is_traceparent(s):
            bad(name, "AB-3003", f"`traceparent` {s!r} is not a W3C Trace Context value")
        elif name == "subject":
            if len(s) > MAX_SUBJECT_CHARS:
                bad(name, "AB-3008", f"`subject` has {len(s)} characters; at most {MAX_SUBJECT_CHARS} (§2.3)")
            elif any(_is_control(c) for c in s):
                bad(name, "AB-3003", "`subject` is one line: no control characters or line breaks")
        elif name == "idempotency_key":
            if len(s) > MAX_IDEMPOTENCY_KEY_CHARS:
                bad(name, "AB-3008",
                    f"`idempotency_key` has {len(s)} characters; at most {MAX_IDEMPOTENCY_KEY_CHARS} (§2.3)")
            elif not s or any(_is_control(c) for c in s):
                bad(name, "AB-3003", "`idempotency_key` must be non-empty, without control characters")
        elif name == "capability" and not is_capability(s):
            bad(name, "AB-3014", f"`capability` {s!r} must be dot-separated lowercase identifiers such as code.review")
        elif name == "capability_version" and not is_major(s):
            bad(name, "AB-3014", f'`capability_version` {s!r} must be a major version such as "1"')
        elif name == "priority" and s not in ("low", "normal", "high"):
            bad(name, "AB-3003", f"`priority` must be low, normal or high, not {s!r}")
        elif name == "data" and not isinstance(value, dict):
            bad(name, "AB-3003", "`data` must be a JSON object")
        elif name == "budget":
            problem = _budget_problem(value)
            if problem:
                bad(name, "AB-3003", problem)
        elif name == "usage":
            for path, msg in _schema_errors("common/usage/v1.json", value, "/usage"):
                nested.append(Violation("AB-3003", path, f"`usage`: {msg}"))
        elif name in ("tenant", "workspace", "to_id", "receipt"):
            prefix = {"tenant": "ten_", "workspace": "ws_", "to_id": "agt_", "receipt": "rcp_"}[name]
            if not is_id(s, prefix):
                bad(name, "AB-3003", f"`{name}`: {s!r} is not a {prefix} id")
        elif name == "sequence" and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            bad(name, "AB-3003", "`sequence` must be a non-negative integer")
        elif name == "hops" and not isinstance(value, list):
            bad(name, "AB-3003", "`hops` must be an array")
        elif name == "sig" and check_sig_form:
            problem = _sig_problem(s)
            if problem:
                bad(name, "AB-1010", f"sig must be ed25519:<key_id>:<base64url signature without padding>: {problem}")
    v.extend(nested)
    if "capability_version" in env and "capability" not in env:
        v.append(Violation("AB-3014", "/capability", "`capability_version` is set without `capability`"))
    if "capability" in env and "capability_version" not in env:
        v.append(Violation("AB-3014", "/capability_version",
                           "`capability_version` is required when `capability` is set (§2.1)"))


def _budget_problem(value: Any) -> Optional[str]:
    if not isinstance(value, dict):
        return "`budget` must be an object {currency, max}"
    c = value.get("currency")
    if not (isinstance(c, str) and len(c) == 3 and all("A" <= x <= "Z" for x in c)):
        return "`budget.currency` must be three upper-case letters such as USD"
    m = value.get("max")
    if not (isinstance(m, str) and _is_decimal_amount(m) and not m.startswith("-")):
        return '`budget.max` must be a decimal string such as "2.00"'
    return None


def _check_type_and_schema(env: Mapping[str, Any], v: list[Violation]) -> Optional[str]:
    t = env.get("type")
    if not isinstance(t, str):
        return None
    parsed = _message_type(t)
    if parsed is None:
        v.append(Violation("AB-3003", "/type",
                           f"{t!r} is not a message type: agentbus.<family>[.<name>].v<major>, lowercase segments"))
        return None
    name, major = parsed
    schema = env.get("schema")
    if isinstance(schema, str):
        m = schema_major(schema)
        if m is None:
            v.append(Violation("AB-3004", "/schema",
                               f"`schema` {schema!r} does not end in /v<major>.json, so its major cannot agree with `type`"))
        elif m != major:
            v.append(Violation("AB-3004", "/schema", f"`type` is major {major} but `schema` is major {m} (§13.5)"))
        ds = env.get("dataschema")
        if isinstance(ds, str) and ds != schema:
            v.append(Violation("AB-3004", "/dataschema", "`dataschema` mirrors `schema` and must equal it"))
    known = f"{name}.v{major}"
    return known if known in KNOWN_TYPES else None


def _check_type_rules(env: Mapping[str, Any], kind: str, v: list[Violation]) -> None:
    if (kind in _FOLLOWUPS or kind == "agentbus.ack.v1") and "correlation_id" not in env:
        v.append(Violation("AB-3013", "/correlation_id", f"`correlation_id` is required on {kind} (§2.1, §7)"))
    if kind == "agentbus.task.request.v1":
        if "capability" not in env:
            v.append(Violation("AB-3014", "/capability", "`capability` is required on task.request (§5.2)"))
        to = env.get("to")
        if isinstance(to, str) and to.startswith("topic://"):
            v.append(Violation("AB-3018", "/to", "a task.request has one recipient; topics are refused"))
    data = env.get("data")
    attachments = data.get("attachments") if isinstance(data, dict) else None
    if isinstance(attachments, list):
        for i, a in enumerate(attachments):
            name = a.get("name") if isinstance(a, dict) else None
            if isinstance(name, str):
                problem = _attachment_name_problem(name)
                if problem:
                    v.append(Violation("AB-3022", f"/data/attachments/{i}/name", problem))


def _check_data(env: Mapping[str, Any], kind: Optional[str], v: list[Violation]) -> None:
    data = env.get("data")
    if not isinstance(data, dict):
        return
    if kind is None:
        t = env.get("type")
        if isinstance(t, str) and _message_type(t) is not None:
            v.append(Violation("AB-3012", "/type", f"no schema is registered for {t}"))
        return
    path = f"{kind[: -len('.v1')]}/v1.json"
    schema = env.get("schema")
    if isinstance(schema, str) and schema_major(schema) == 1 and schema != REGISTRY_BASE + path:
        v.append(Violation("AB-3012", "/schema",
                           f"`schema` must be the registry URL {REGISTRY_BASE + path} (the URL is an identifier)"))
    for p, msg in _schema_errors(path, data, "/data"):
        v.append(Violation("AB-3011", p, msg))
