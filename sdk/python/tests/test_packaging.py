"""What `pip install ./sdk/python` and a wheel build ship: the version the library reports, its
licence and README, and every data file the package reads (the schemas, the catalogue)."""

from __future__ import annotations

import fnmatch
import pathlib

import pytest

import agentbus

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the metadata is the same on 3.10

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_the_packages():
    assert PYPROJECT["project"]["version"] == agentbus.__version__


def test_the_metadata_names_licence_readme_and_python():
    project = PYPROJECT["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    # setuptools puts LICENSE into the wheel's and the sdist's metadata by its default pattern.
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert (ROOT / project["readme"]).read_text().startswith("# agentbus (Python)")
    assert project["requires-python"] == ">=3.10"
    assert all("==" in d for d in project["dependencies"])  # pinned, as the tests ran them


def test_every_data_file_the_package_reads_is_packaged():
    src = ROOT / "src" / "agentbus"
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["agentbus"]
    data = [p.relative_to(src).as_posix() for p in src.rglob("*")
            if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts]
    assert "schemas/agentbus.message/v1.json" in data and "catalogue.json" in data
    missing = [d for d in data if not any(fnmatch.fnmatchcase(d, g) for g in globs)]
    assert missing == []
