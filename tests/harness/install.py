"""Installs the pinned harnesses (pins.txt, AGENTBUS_HARNESS_PINS) into tests/harness/.npm.

Only the npm packages are fetched; their install scripts are not run: each carries its native
linux-x64 binary in an optional platform package, which the suite runs directly. Nothing is done
when every exact pinned version is already there.
"""

import json
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
PREFIX = HERE / ".npm"


def split_spec(spec):
    """'@scope/name@1.2.3' -> ('@scope/name', '1.2.3')."""
    at = spec.rfind("@")
    if at <= 0:
        return spec, ""
    return spec[:at], spec[at + 1:]


def pins():
    """{harness: npm spec} from pins.txt, then AGENTBUS_HARNESS_PINS ("name=spec ...")."""
    out = {}
    for line in (HERE / "pins.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, spec = line.split()
            out[name] = spec
    for item in os.environ.get("AGENTBUS_HARNESS_PINS", "").split():
        name, _, spec = item.partition("=")
        if name not in out or not spec:
            sys.exit(f"AGENTBUS_HARNESS_PINS: '{item}' is not <claude|codex|opencode>=<npm spec>")
        out[name] = spec
    return out


def installed_version(package):
    try:
        return json.loads((PREFIX / "node_modules" / package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def main():
    wanted = pins()
    missing = [
        spec for spec in wanted.values()
        if installed_version(split_spec(spec)[0]) != split_spec(spec)[1]
    ]
    if not missing:
        print("harnesses already installed:", " ".join(wanted.values()))
        return
    PREFIX.mkdir(exist_ok=True)
    # Every pin in one install: a later `npm install --prefix` prunes packages it was not asked for.
    subprocess.run(
        ["npm", "install", "--prefix", str(PREFIX), "--no-package-lock", "--no-save",
         "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error", *wanted.values()],
        check=True,
    )
    for spec in wanted.values():
        print(f"{spec}: {installed_version(split_spec(spec)[0])}")


if __name__ == "__main__":
    main()
