"""Every dependency floor in pyproject.toml (the dependencies and every optional group) excludes the
versions known_bad_versions.toml lists, so no install that pip may choose has a known way for a
checkpoint, model folder, dataset or the policy's text to run code."""

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
TABLE = Path(__file__).with_name("known_bad_versions.toml")


def _requirements() -> list[tuple[str, Requirement]]:
    """(where in pyproject.toml, requirement) for every dependency, optional groups included."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [("dependencies", Requirement(text)) for text in project.get("dependencies", [])]
    for group, texts in project.get("optional-dependencies", {}).items():
        found += [(f"optional-dependencies.{group}", Requirement(text)) for text in texts]
    return found


def _advisories() -> list[dict]:
    return tomllib.loads(TABLE.read_text())["advisory"]


def _floor(requirement: Requirement) -> Version | None:
    """The lowest version the requirement admits (None: no lower bound, so every old version)."""
    bounds = [Version(spec.version) for spec in requirement.specifier
              if spec.operator in (">=", ">", "==", "~=", "===") and "*" not in spec.version]
    return max(bounds) if bounds else None


def _admits_a_bad_version(requirement: Requirement, fixed: Version) -> bool:
    floor = _floor(requirement)  # an exclusion (!=) between the floor and the fix still admits the rest
    return floor is None or floor < fixed


def test_the_table_names_real_versions():
    for row in _advisories():
        assert set(row) == {"package", "fixed", "id", "why"}, row
        Version(row["fixed"])
        assert row["id"] and row["why"] and "\n" not in row["why"], row


@pytest.mark.parametrize("row", _advisories(), ids=lambda row: f"{row['package']}<{row['fixed']}")
def test_no_floor_admits_a_known_bad_version(row):
    fixed = Version(row["fixed"])
    named = [(where, req) for where, req in _requirements()
             if canonicalize_name(req.name) == canonicalize_name(row["package"])]
    for where, requirement in named:
        assert not _admits_a_bad_version(requirement, fixed), (
            f"pyproject.toml {where}: {requirement} admits {row['package']} below {fixed} ({row['id']}: {row['why']})")


def test_the_check_itself_catches_a_low_floor():
    fixed = Version("2.6.0")
    assert _admits_a_bad_version(Requirement("torch>=2.4"), fixed)
    assert _admits_a_bad_version(Requirement("torch"), fixed)
    assert _admits_a_bad_version(Requirement("torch<3"), fixed)
    assert not _admits_a_bad_version(Requirement("torch>=2.6"), fixed)
    assert not _admits_a_bad_version(Requirement("torch==2.13.0"), fixed)
