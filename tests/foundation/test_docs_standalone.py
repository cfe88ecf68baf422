"""The package and its docs stand alone: nothing a user reads points at design files outside the
repository."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = ("ALGORITHMS.md", "ARCHITECTURE.md", "STYLE.md", "../shared")


@pytest.mark.parametrize("folder", ["src", "docs", "configs"])
def test_no_reference_to_design_files_outside_the_repository(folder):
    offenders = [f"{path.relative_to(ROOT)}: {name}"
                 for path in sorted((ROOT / folder).rglob("*")) if path.suffix in {".py", ".md", ".yaml"}
                 for name in OUTSIDE if name in path.read_text(encoding="utf-8")]
    assert not offenders, offenders
