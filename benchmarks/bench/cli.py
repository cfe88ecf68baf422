"""``python -m benchmarks SUITE [options] [dotted.key=value ...]``: run a benchmark suite (one of
:data:`benchmarks.bench.suites.SUITES`) and write its report. The options and arguments are those
``asyncrl bench`` took before the apparatus left the library. Bad input exits 2 with one line."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from asyncrl.config import ConfigError
from asyncrl.core.loader import guarded
from asyncrl.cli import parse_with_overrides

PROG = "python -m benchmarks"


def _import_named_plugins(argv: list[str]) -> int:
    """Import the modules of a ``run.plugins=[...]`` argument before the parser is built, so that the
    suites they register are offered like the built-in ones (ConfigError naming ``run.plugins[i]``)."""
    from asyncrl.config import Config
    from asyncrl.core.loader import parse_override
    from asyncrl.runtime.validate import import_plugins

    for item in argv:
        if item.startswith("run.plugins="):
            import_plugins(parse_override(item, Config)[1])
    return 0


def _quiet_hub() -> None:
    """Our own progress line is the only one (transformers' download bars off)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), like every other bad input."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    from benchmarks.bench.suites import suite_names

    bench = _Parser(prog=PROG, description=f"run a benchmark suite ({' | '.join(suite_names())}) and write its report")
    bench.add_argument("suite", choices=suite_names())
    bench.add_argument("--quick", action="store_true", help="the few-minute variant (smoke test)")
    bench.add_argument("--config", help="YAML config or preset every cell starts from (e.g. gpu-embedded)")
    bench.add_argument("--seeds", type=int, help="seeds per cell (default: 3; peer-trl 1; --quick 1)")
    bench.add_argument("--out", help="output directory (default: runs/bench/<suite>[-quick])")
    bench.add_argument("--methods", help="comma-separated subset of the suite's methods / losses")
    bench.add_argument("--ks", help="atlas: comma-separated lags K (default 0,1,2,4,8,16; --quick 0,2,8); "
                                    "a3po: run the async methods at W = K for each K (default: W = 1); "
                                    "control: policy buffer capacities (default 1,4,8,16; --quick 1,4)")
    bench.add_argument("--rows", help="atlas: comma-separated rows: lag (every loss × K), buffer (policy buffer "
                                      "of N past versions), forward (M minibatch updates per batch); "
                                      "default all three, --quick lag")
    bench.add_argument("--envs", help="control: comma-separated gymnasium env ids (default: the MuJoCo set; "
                                      "--quick CartPole-v1)")
    bench.add_argument("--plan", metavar="FILE",
                       help="study: the plan file (arms, seeds, primary endpoint, one Holm family), frozen "
                            "into --out before the first run (default: OUT/plan.yaml)")
    bench.add_argument("--repeats", type=int, metavar="N",
                       help="a3po, peer-trl: run every cell N times with the same seed, arms interleaved "
                            "(repeat 1 in order, 2 reversed, ...; one at a time), and report each speed "
                            "ratio over the paired repeats (docs/speed-protocol.md)")
    bench.add_argument("--jobs", type=int, default=1,
                       help="cells run at once on this machine, each its own process (default 1)")
    bench.add_argument("--ray", action="store_true",
                       help="run each cell as a Ray task (RAY_ADDRESS, else a local cluster); --out must "
                            "be on storage every node sees")
    bench.add_argument("--in-process", action="store_true",
                       help="run asyncrl cells in this process (faster start-up; default for atlas)")
    bench.add_argument("--only", metavar="GLOBS",
                       help="comma-separated globs over cell names without seed and repeat (e.g. 'ppo-k0,*-k16'): run "
                            "and report only the cells they match")
    bench.add_argument("--only-seeds", metavar="SEEDS",
                       help="comma-separated seeds: run and report only their cells (every arm of each), "
                            "e.g. one part of a study too long for one sitting; join the parts with --merge")
    bench.add_argument("--merge", nargs="+", metavar="DIR",
                       help="run nothing: join the study folders of parts of one study (the same suite, "
                            "options and plan, disjoint cells, one processor model) into --out and write "
                            "its report; each part's host, commit and date are kept")
    bench.add_argument("--list", action="store_true", help="print the cells and exit")
    bench.add_argument("--runs-dir", metavar="DIR",
                       help="where each cell's run directory goes (default: OUT/runs); the study in --out "
                            "keeps only summaries and one per-step table")
    bench.add_argument("--report-only", action="store_true",
                       help="run no cell: write the report from the cells already finished in the runs "
                            "directory (a partial report says how many), else re-render the study stored "
                            "in --out (results.json + steps.csv.xz, e.g. a committed folder)")
    bench.add_argument("--steps-digits", type=int, metavar="N",
                       help="store the per-step diagnostics' floats to N significant digits in steps.csv.xz "
                            "(eval metrics and steps exact; results.json records N): a committed study's size")
    bench.add_argument("--compare", nargs="+", metavar="DIR",
                       help="study: run nothing; compare the study folders of plans that differ only in "
                            "learning rate, one table per comparison of their family, into OUT/compare.md and "
                            "compare.json (a folder not run yet, or in part, is reported as not run)")
    bench.add_argument("overrides", nargs="*", metavar="dotted.key=value",
                       help="applied to every cell; run.plugins=[pkg.module] also adds the suites a plugin registers")
    return bench


def _csv(text: str | None, kind=str, option: str = "") -> list | None:
    """Items of a comma-separated option; None when not given. An empty list is an error: `--ks=`
    once ran nothing and exited 0, `--methods=` ran every method."""
    if text is None:
        return None
    items = [kind(item) for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError(f"{option + ': ' if option else ''}expected a non-empty comma-separated list, got {text!r}")
    return items


def _ints(text: str | None, option: str) -> list[int] | None:
    """A comma-separated option of integers (ValueError naming the option otherwise)."""
    try:
        return _csv(text, int, option)
    except ValueError as err:
        if str(err).startswith(option):
            raise
        raise ValueError(f"{option}: expected comma-separated integers, got {text!r}") from None


def _ks(args) -> list[int] | None:
    return _ints(args.ks, "--ks")


def _check_repeats(args) -> None:
    """Repeats exist to time the arms against each other, so they run one at a time: cells run side
    by side share the cores and would time each other."""
    if args.repeats is None:
        return
    if args.repeats < 1:
        raise ValueError(f"--repeats: must be >= 1, got {args.repeats}")
    if args.jobs > 1 or args.ray:
        how = "--ray" if args.ray else f"--jobs {args.jobs}"
        raise ValueError(f"--repeats: runs cells one at a time (concurrent runs would time each other); "
                         f"drop {how}")


def _run_reported(run, out) -> int:
    """Run a suite; print its scalar summary and the report's path (exit 0), or its error (exit 1)."""
    from benchmarks.bench.runner import BenchError

    try:
        summary = run()
    except BenchError as err:
        print(f"benchmarks: {err}", file=sys.stderr)
        return 1
    print(json.dumps({k: v for k, v in summary.items() if not isinstance(v, (dict, list))}))
    print(f"report: {out / 'report.html'}")
    return 0


def _bench(args) -> int:
    from pathlib import Path

    from benchmarks.bench.runner import cell_command, run_suite
    from benchmarks.bench.suites import CellRequest, build_cells, get_suite

    suite = get_suite(args.suite)
    if args.compare is not None:
        return _compare(args)
    if args.merge is not None:
        return _merge(args)
    try:
        if args.jobs < 1:
            raise ValueError(f"--jobs: must be >= 1, got {args.jobs}")
        _check_repeats(args)
        out = Path(args.out or f"runs/bench/{suite.name}{'-quick' if args.quick else ''}")
        request = CellRequest(quick=args.quick, seeds=args.seeds, methods=_csv(args.methods, str, "--methods"),
                              ks=_ks(args), rows=_csv(args.rows, str, "--rows"), envs=_csv(args.envs, str, "--envs"),
                              extra=tuple(args.overrides), config=args.config,
                              only=_csv(args.only, str, "--only"), plan=args.plan, out=str(out),
                              repeats=args.repeats, only_seeds=_ints(args.only_seeds, "--only-seeds"))
        cells = build_cells(suite.name, request)
        if suite.validate is not None:  # every cell's config, before running anything
            suite.validate(cells)
        header = suite.header(request) if suite.header is not None else None
        if args.steps_digits is not None:
            if args.steps_digits < 1:
                raise ValueError(f"--steps-digits: must be >= 1, got {args.steps_digits}")
            header = {**(header or {}), "steps_digits": args.steps_digits}
        if suite.prepare is not None and not (args.list or args.report_only):
            suite.prepare(request, out)
    except (ValueError, ConfigError) as err:
        print(f"benchmarks: {err}", file=sys.stderr)
        return 2
    runs_dir = Path(args.runs_dir) if args.runs_dir else out / "runs"
    if args.list:
        try:
            for cell in cells:
                print(cell.name, shlex.join(cell_command(cell, runs_dir)), flush=True)
        except BrokenPipeError:  # `| head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit's flush
        return 0
    serial = args.jobs == 1 and not args.ray  # only a serial suite can run cells in this process
    in_process = serial and (args.in_process or suite.in_process)
    return _run_reported(lambda: run_suite(suite, cells, out, runs_dir=runs_dir, quick=args.quick, command=_redo(args),
                                           in_process=in_process, jobs=args.jobs, ray=args.ray,
                                           report_only=args.report_only, header=header), out)


def _compare(args) -> int:
    """``study --compare DIR ...``: the report across learning rates (benchmarks.bench.study_compare)."""
    from pathlib import Path

    from benchmarks.bench.study import StudyError
    from benchmarks.bench.study_compare import write_compare

    try:
        if args.suite != "study":
            raise ValueError(f"--compare: compares planned studies (the study suite), not {args.suite}")
        out = Path(args.out or "runs/bench/study-compare")
        summary = write_compare(args.compare, out)
    except (ValueError, StudyError) as err:
        print(f"benchmarks: {err}", file=sys.stderr)
        return 2
    print(summary["headline"])
    print(f"report: {out / 'compare.md'}")
    return 0


def _merge(args) -> int:
    """``SUITE --merge DIR ...``: one study from its parts (benchmarks.bench.merge)."""
    from pathlib import Path

    from benchmarks.bench.merge import merge_studies

    from benchmarks.bench.runner import BenchError

    try:
        if args.out is None:
            raise BenchError("--merge: name the merged study's folder with --out")
        out = Path(args.out)
        summary = merge_studies(args.suite, [Path(d) for d in args.merge], out, command=_redo(args))
    except BenchError as err:  # bad input: the parts are not one study's
        print(f"benchmarks: {err}", file=sys.stderr)
        return 2
    print("\n".join(summary.get("headline") or []))
    print(f"report: {out / 'report.html'}")
    return 0


def _redo(args) -> str:
    """The command a report records: the one that runs the suite (a --report-only rebuild records the run)."""
    return f"{PROG} " + shlex.join(a for a in args.argv if a != "--report-only")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    code = guarded(lambda: _import_named_plugins(argv))  # before the parser, which lists the suites they register
    if code:
        return code
    args = parse_with_overrides(_parser(), argv)  # overrides may follow options (`a3po --quick k=v`)
    _quiet_hub()
    return _bench(args)
