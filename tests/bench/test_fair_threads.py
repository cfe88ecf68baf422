"""A benchmark suite refuses a sync baseline given fewer cores than an async arm (policy.torch_threads:
tests/foundation/test_threads.py), on the command line in one line."""

import subprocess
import sys

import pytest

from benchmarks.bench.cells import Cell
from benchmarks.bench.suites import check_fair_threads
from asyncrl.config import load_config
from asyncrl.config.threads import available_cores
from cli_forks import checkout_env  # tests/: the checkout on PYTHONPATH


def _cfg(*overrides):
    return load_config(None, list(overrides))


def _cells(*specs):
    cells = [Cell(name, name, 0, "train", tuple(o)) for name, o in specs]
    return cells, {c.name: _cfg(*c.overrides) for c in cells}


def test_a_sync_baseline_with_half_the_machine_is_refused():
    cells, configs = _cells(("sync", ["run.mode=sync", "policy.torch_threads=1"]), ("a3po", ["run.mode=async"]))
    with pytest.raises(ValueError, match=r"sync baseline sync uses 1 of 2 cores .* a3po uses 2"):
        check_fair_threads(cells, configs, cores=2)


def test_fair_allocations_pass():
    check_fair_threads(*_cells(("sync", ["run.mode=sync"]), ("a3po", ["run.mode=async"])), cores=2)
    # a one-thread sync arm beside one with the whole machine (the scale suite): the best sync counts
    check_fair_threads(*_cells(("t1", ["run.mode=sync", "policy.torch_threads=1"]), ("t2", ["run.mode=sync"]),
                               ("a3po", ["run.mode=async"])), cores=2)
    # more threads than cores buy nothing: async's 1 + 3 workers on 2 cores count as 2
    check_fair_threads(*_cells(("sync", ["run.mode=sync"]), ("a", ["run.mode=async", "async.n_workers=3"])), cores=2)


def test_the_bench_cli_refuses_it_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "a3po", "--quick", "--list",
                           "--methods", "sync,async-loglinear", "policy.torch_threads=1"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=checkout_env())
    if available_cores(honour_env=False) < 2:
        pytest.skip("one core: every allocation is the whole machine")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("benchmarks: policy.torch_threads: the sync baseline")
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("preset", ["gpu-embedded", "gpu-gsm8k", "a3po", "sync", "recompute"])
def test_every_packaged_preset_passes_the_bench_check_on_a_large_machine(preset, tmp_path):
    # the GPU presets once pinned 4 threads, so `bench a3po --config gpu-embedded` (the command the
    # preset documents) was refused on a 16-core GPU machine before it ran anything
    cells = [Cell("sync", "sync", 0, "train", ("run.mode=sync",)),
             Cell("a3po", "a3po", 0, "train", ("run.mode=async",))]
    (tmp_path / "data.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    extra = [f"task.path={tmp_path / 'data.jsonl'}"] if preset == "gpu-gsm8k" else []  # the user's file
    configs = {c.name: load_config(preset, [*c.overrides, *extra]) for c in cells}
    check_fair_threads(cells, configs, cores=16)
