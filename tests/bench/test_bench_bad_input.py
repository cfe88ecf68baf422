"""``python -m benchmarks``'s bad input (the rows ``bench-*`` of docs/errors.md's table): every row exits
2 with exactly one line on stderr naming the option, no traceback and no output directory. The
processes are forked from one that imported the CLI once (cli_forks.py)."""

from pathlib import Path

import pytest

from cli_forks import checkout_env, shared_forks  # tests/: the CLI forked from one imported copy

CASES = [
    ("bench-ks-empty", ["atlas", "--ks="], "--ks: expected a non-empty comma-separated list"),
    ("bench-ks-not-int", ["atlas", "--ks=1,x"], "--ks: expected comma-separated integers"),
    ("bench-ks-negative", ["atlas", "--ks=-1", "--list"], "--ks: K must be >= 0"),
    ("bench-ks-wrong-suite", ["peer-trl", "--ks=1"], "--ks: suite peer-trl does not take it (suites that do: a3po, atlas, control, agent)"),
    ("bench-rows-wrong-suite", ["a3po", "--rows=lag"], "--rows: suite a3po does not take it (suites that do: atlas)"),
    ("bench-rows-unknown", ["atlas", "--rows=lag,nope", "--list"], "--rows: unknown nope"),
    ("bench-a3po-ks-zero", ["a3po", "--ks=0", "--list"], "--ks: the a3po suite's async runs need K >= 1"),
    ("bench-jobs-zero", ["atlas", "--jobs=0", "--list"], "--jobs: must be >= 1"),
    ("bench-methods-empty", ["a3po", "--methods="], "--methods: expected a non-empty"),
    ("bench-methods-unknown", ["a3po", "--methods=nope"], "--methods: unknown nope"),
    ("bench-seeds-zero", ["a3po", "--seeds=0"], "--seeds: must be >= 1"),
    ("bench-unknown-suite", ["nope"], "argument suite: invalid choice"),
    ("bench-bad-cell-config", ["a3po", "trainer.lr=.nan"], "trainer.lr: expected a finite number"),
]


@pytest.mark.parametrize("argv, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_bench_input_is_one_line(tmp_path, argv, expected):
    env = checkout_env({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                        "ASYNCRL_CACHE": str(tmp_path / "warm-start-cache")})
    proc = shared_forks().run(argv, tmp_path, env, main="benchmarks.bench.cli")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a refused suite left files behind"


def test_table_is_documented():
    """docs/errors.md lists every row (by its id), with the command that runs it."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()
    missing = [case[0] for case in CASES if f"| `{case[0]}` | `python -m benchmarks {' '.join(case[1])}` |" not in doc]
    assert not missing, missing
