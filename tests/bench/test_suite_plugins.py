"""A plugin module named in run.plugins registers a bench suite at import: ``python -m benchmarks``
offers it, lists its cells, and every cell imports the plugin too (the library's registries:
tests/foundation/test_registries_plugins.py)."""

import sys
import textwrap

import pytest

from benchmarks.bench.cli import main
from benchmarks.bench.suites import SUITES
from asyncrl.core import registries

PLUGIN = "asyncrl_test_suite_plugin"
PLUGIN_SOURCE = textwrap.dedent('''
    from benchmarks.bench.cells import Cell, overrides
    from benchmarks.bench.suites import SUITES, Suite


    def tiny_cells(suite, request, seed):
        return [Cell(f"{method}-s{seed}", method, seed, "train",
                     overrides(suite.base(request), {"loss.name": method, "run.seed": seed}) + request.extra)
                for method in (request.methods or ["ppo", "decoupled"])]


    TINY_SUITE = Suite(name="tiny_plugin", help="two losses, one short run each", cells=tiny_cells,
                       quick={"trainer.steps": 1}, full={"trainer.steps": 2}, seeds=1)
    SUITES["tiny_plugin"] = f"{__name__}:TINY_SUITE"
''')


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """The plugin's directory on sys.path; afterwards SUITES and sys.modules as before."""
    (tmp_path / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = dict(SUITES)
    yield tmp_path
    SUITES.clear()
    SUITES.update(before)
    sys.modules.pop(PLUGIN, None)


def test_the_bench_offers_runs_and_lists_a_plugins_suite(plugin_dir, capsys):
    with pytest.raises(SystemExit) as err:  # without the plugin: not a suite
        main(["tiny_plugin", "--list"])
    assert err.value.code == 2 and "invalid choice: 'tiny_plugin'" in capsys.readouterr().err
    assert main(["tiny_plugin", "--list", f"run.plugins=[{PLUGIN}]"]) == 0
    assert registries.resolve(SUITES["tiny_plugin"]) is sys.modules[PLUGIN].TINY_SUITE
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["ppo-s0", "decoupled-s0"]
    # every cell imports the plugin too
    assert all(f"run.plugins=[{PLUGIN}]" in line and "trainer.steps=2" in line for line in lines)
    assert "loss.name=decoupled" in lines[1]
