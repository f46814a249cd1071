"""The per-harness delivery tables of docs/local.md (the hook route), docs/mcp.md (the MCP route)
and docs/delivery.md (both): route × moment → outcome, each row proven by the suite's cases.

A case names the rows it proves with `@row(route, moment, outcome, harnesses)`; `test_tables.py`
checks that the rows the passing cases prove are exactly the rows the documents state, and that the
three documents agree. Outcomes: `shown` (a model request held it, once, framed, and it is recorded
shown), `not claimed` (no request held it and nothing records it shown: it waits), `pushed`.
"""

import pathlib
import re

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
HARNESS_NAMES = {"claude": "Claude Code", "codex": "Codex", "opencode": "OpenCode"}
OUTCOMES = {"shown", "not claimed", "pushed"}

# test function name -> [(harnesses or None for the case's own parameter, route, moment, outcome)]
ROWS = {}


def row(route, moment, outcome, harnesses=None):
    assert outcome in OUTCOMES, outcome

    def mark(fn):
        ROWS.setdefault(fn.__name__, []).append(
            (tuple(harnesses) if harnesses else None, route, moment, outcome))
        return fn

    return mark


MARKER = re.compile(r"<!-- delivery-table (?P<harness>\w+) -->")


def documented(page):
    """{harness: {(route, moment): outcome}} from the tables of docs/<page> that follow a
    `<!-- delivery-table <harness> -->` marker. Cells are read without their backticks."""
    tables = {}
    lines = (DOCS / page).read_text().splitlines()
    for i, line in enumerate(lines):
        m = MARKER.fullmatch(line.strip())
        if not m:
            continue
        rows = {}
        body = [x for x in lines[i + 1:] if x.strip()]
        for cells in _table(body)[2:]:
            route, moment, outcome = (c.replace("`", "").strip() for c in cells[:3])
            assert outcome in OUTCOMES, f"{page}: {route} / {moment}: outcome {outcome!r}"
            assert (route, moment) not in rows, f"{page}: {route} / {moment} twice"
            rows[(route, moment)] = outcome
        assert m["harness"] not in tables, f"{page}: two tables for {m['harness']}"
        tables[m["harness"]] = rows
    return tables


def _table(lines):
    out = []
    for line in lines:
        if not line.startswith("|"):
            break
        out.append([c for c in line.strip().strip("|").split("|")])
    return out
