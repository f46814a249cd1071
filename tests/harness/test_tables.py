"""The delivery tables in docs/ are what the suite proves: every documented row is proven by a
passing case of this run, and every row a passing case proves is documented (tables.py)."""

import pathlib

import pytest

from tables import HARNESS_NAMES, ROWS, documented


def proven(session):
    """{harness: {(route, moment): outcome}} from this run's passing cases, and whether every case
    that proves a row ran (a partial run, `-k` or one file, checks only what ran)."""
    out = {h: {} for h in HARNESS_NAMES}
    # A run that left out a module whose cases prove rows, or some of those cases (`-k`), is
    # partial: it checks only that what ran is documented.
    here = pathlib.Path(__file__).parent
    collected = {pathlib.Path(str(item.fspath)).name for item in session.items}
    proving = {f.name for f in here.glob("test_*.py") if "@row(" in f.read_text()}
    ran = {getattr(item, "originalname", item.name) for item in session.items}
    complete = proving <= collected and set(ROWS) <= ran
    for item in session.items:
        rows = ROWS.get(getattr(item, "originalname", item.name))
        if not rows:
            continue
        passed = item.nodeid in session.config._harness_passed
        param = getattr(item, "callspec", None)
        param = param.params.get("harness") if param else None
        for harnesses, route, moment, outcome in rows:
            for h in harnesses or ((param,) if param else ()):
                if harnesses and param and h != param:
                    continue
                if not passed:
                    complete = False
                    continue
                seen = out[h].setdefault((route, moment), outcome)
                assert seen == outcome, f"{h}: {route} / {moment}: cases prove {seen} and {outcome}"
    return out, complete


def test_the_three_documents_agree():
    both = documented("delivery.md")
    hook = documented("local.md")
    mcp = documented("mcp.md")
    assert set(both) == set(HARNESS_NAMES), f"delivery.md has tables for {sorted(both)}"
    for h in HARNESS_NAMES:
        assert {k: v for k, v in both[h].items() if k[0] == "hook"} == hook.get(h, {}), h
        assert {k: v for k, v in both[h].items() if k[0] == "MCP"} == mcp.get(h, {}), h
        assert all(k[0] in ("hook", "MCP") for k in both[h]), both[h]


@pytest.mark.tables
def test_every_documented_row_is_proven_and_every_proven_row_documented(request):
    got, complete = proven(request.session)
    docs = documented("delivery.md")
    for h in HARNESS_NAMES:
        missing = {k: v for k, v in docs[h].items() if got[h].get(k) != v}
        extra = {k: v for k, v in got[h].items() if k not in docs[h]}
        assert not extra, f"{HARNESS_NAMES[h]}: proven but not in docs/delivery.md: {extra}"
        if complete:
            assert not missing, f"{HARNESS_NAMES[h]}: documented but not proven: {missing}"
