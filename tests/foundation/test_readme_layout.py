"""The README's "## Layout" block names every package of src/asyncrl (and of the benchmark apparatus,
benchmarks/), each with a description, and names nothing that is gone.

A package is a directory directly under src/asyncrl that holds Python modules (an ``__init__.py``, or
plain modules as in the namespace package ``policy/``); a subpackage (``runtime/channels/``) is
described by its parent's line. Top-level modules (``buffer.py``) may be named but need not be, so a
new small module does not break this test; one that is named must exist.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "asyncrl"
# an indented entry under `src/asyncrl/`: `  name/   description` or `  name.py   description`
ENTRY = re.compile(r"^ {2}(?P<name>[\w.]+/?)\s+(?P<description>\S.*)$")


def layout_block(readme: str) -> str:
    """The first fenced code block after the "## Layout" heading."""
    section = readme.split("\n## Layout\n", 1)[1]
    return section.split("```", 2)[1]


def layout_entries(block: str, top: str = "src/asyncrl/") -> dict[str, str]:
    """Entry name (``runtime/``, ``buffer.py``) → its description, for the lines under ``top``."""
    entries, inside = {}, False
    for line in block.splitlines():
        if line.strip() == top or line.startswith(top + " "):
            inside = True
        elif inside and (match := ENTRY.match(line)):
            entries[match["name"]] = match["description"]
        elif inside and line and not line.startswith(" "):  # the next top-level entry (tests/)
            inside = False
    return entries


def packages(root: Path) -> set[str]:
    return {f"{d.name}/" for d in root.iterdir()
            if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))}


def missing_and_stale(block: str, root: Path, top: str = "src/asyncrl/") -> tuple[set[str], set[str]]:
    named = layout_entries(block, top)
    stale = {name for name in named if not (root / name.rstrip("/")).exists()}
    return packages(root) - set(named), stale


def test_layout_names_every_package_and_nothing_gone():
    block = layout_block((ROOT / "README.md").read_text())
    missing, stale = missing_and_stale(block, PACKAGE)
    assert not missing, f"README's Layout does not name: {', '.join(sorted(missing))}"
    assert not stale, f"README's Layout names what src/asyncrl no longer has: {', '.join(sorted(stale))}"
    assert {"stability/", "rewards/", "tracking/", "policy/"} <= set(layout_entries(block))
    missing, stale = missing_and_stale(block, ROOT / "benchmarks", top="benchmarks/")
    assert not missing and not stale, (missing, stale)
    assert {"bench/", "control/"} <= set(layout_entries(block, "benchmarks/"))


def test_every_package_line_has_a_description():
    entries = layout_entries(layout_block((ROOT / "README.md").read_text()))
    short = [name for name, description in entries.items() if len(description.split()) < 3]
    assert not short, f"README's Layout: describe {', '.join(short)} in a few words"


def test_checker_sees_a_missing_package_a_stale_entry_and_ignores_modules(tmp_path):
    for package in ("alpha", "beta", "namespace"):
        (tmp_path / package).mkdir()
    (tmp_path / "alpha" / "__init__.py").write_text("")
    (tmp_path / "beta" / "__init__.py").write_text("")
    (tmp_path / "namespace" / "mod.py").write_text("")
    (tmp_path / "data").mkdir()  # no Python inside: not a package
    (tmp_path / "plotting.py").write_text("")  # a new top-level module: optional
    block = ("\nsrc/asyncrl/\n  alpha/    the first package\n  gone/     a package since removed\n"
             "  namespace/  modules without an __init__\ntests/    the tests\n  beta/  not under src\n")
    assert layout_entries(block) == {"alpha/": "the first package", "gone/": "a package since removed",
                                     "namespace/": "modules without an __init__"}
    assert missing_and_stale(block, tmp_path) == ({"beta/"}, {"gone/"})
    readme = "# x\n\n## Layout\n\n```" + block + "```\n\n## Next\n\n```\nother\n```\n"
    assert layout_block(readme) == block
