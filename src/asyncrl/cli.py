"""``asyncrl train | pretrain | eval | bench``: parse, call the library, nothing else.

Bad input (config key, file, value) exits 2 with one line on stderr and no traceback.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from asyncrl.config import ConfigError, load_config
from asyncrl.config_loader import guarded


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asyncrl", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in [
        ("train", "RL-train a policy (default: the embedded tiny model on the arithmetic task)"),
        ("pretrain", "supervised warm start of the embedded tiny model (cached; reused by train)"),
        ("eval", "evaluate the policy (policy.model_path or the cached warm start) on the eval split"),
    ]:
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("--config", help="YAML config file")
        cmd.add_argument("overrides", nargs="*", metavar="dotted.key=value")
    bench = sub.add_parser("bench", help="run a benchmark suite (a3po | atlas | peer-trl) and write its report")
    bench.add_argument("suite", choices=("a3po", "atlas", "peer-trl"))
    bench.add_argument("--quick", action="store_true", help="the few-minute variant (smoke test)")
    bench.add_argument("--config", help="YAML config every cell starts from (e.g. configs/gpu-embedded.yaml)")
    bench.add_argument("--seeds", type=int, help="seeds per cell (default: 3; peer-trl 1; --quick 1)")
    bench.add_argument("--out", help="output directory (default: runs/bench/<suite>[-quick])")
    bench.add_argument("--methods", help="comma-separated subset of the suite's methods / losses")
    bench.add_argument("--ks", help="atlas: comma-separated lags K (default 0,1,2,4,8,16; --quick 0,2,8)")
    bench.add_argument("--in-process", action="store_true",
                       help="run asyncrl cells in this process (faster start-up; default for atlas)")
    bench.add_argument("--list", action="store_true", help="print the cells and exit")
    bench.add_argument("overrides", nargs="*", metavar="dotted.key=value", help="applied to every cell")
    return parser


def _train(cfg) -> int:
    from asyncrl.runtime import train

    summary = train(cfg)
    keys = ("mode", "steps", "initial_eval_reward", "final_eval_reward", "wall_time_s", "run_dir")
    print(json.dumps({k: summary[k] for k in keys}))
    return 0


def _pretrain(cfg) -> int:
    from asyncrl.pretrain import pretrain
    from asyncrl.progress import TrainProgress

    with TrainProgress(cfg.pretrain.steps, "pretrain", enabled=cfg.run.progress) as progress:
        path = pretrain(cfg, on_step=lambda step, loss: progress.update(step + 1, reward=loss))
    print((path / "pretrain_summary.json").read_text())
    print(f"saved: {path}")
    return 0


def _eval(cfg) -> int:
    import torch

    from asyncrl.evaluation import eval_engine, evaluate
    from asyncrl.policy.model import check_device, load_policy_for
    from asyncrl.runtime.session import resolve_policy_dir

    torch.set_num_threads(cfg.policy.torch_threads)
    check_device(cfg.policy.device)
    task = cfg.task.build()
    model, tokenizer = load_policy_for(cfg.policy, resolve_policy_dir(cfg))
    problems = task.problems("eval")[: cfg.eval.n_problems]
    engine = eval_engine(model, tokenizer, max_new_tokens=cfg.rollout.max_new_tokens,
                         temperature=cfg.eval.temperature, seed=cfg.run.seed)
    acc = evaluate(engine, tokenizer, task, problems, batch_size=cfg.eval.batch_size, samples=cfg.eval.samples,
                   chat_template=cfg.policy.chat_template)
    print(json.dumps({"eval_reward": acc, "n_problems": len(problems)}))
    return 0


COMMANDS = {"train": _train, "pretrain": _pretrain, "eval": _eval}


def _csv(text: str | None, kind=str) -> list | None:
    return None if text is None else [kind(item) for item in text.split(",") if item.strip()]


def _bench(args) -> int:
    from pathlib import Path

    from asyncrl.bench.runner import BenchError, cell_argv, run_suite
    from asyncrl.bench.suites import build_cells

    try:
        ks = _csv(args.ks, int)
    except ValueError:
        print(f"asyncrl: --ks: expected comma-separated integers, got {args.ks!r}", file=sys.stderr)
        return 2
    try:
        cells = build_cells(args.suite, quick=args.quick, seeds=args.seeds, methods=_csv(args.methods), ks=ks,
                            extra=args.overrides, config=args.config)
        for cell in cells:  # validate every cell's config before running anything
            load_config(cell.config, list(cell.overrides))
    except (ValueError, ConfigError) as err:
        print(f"asyncrl: {err}", file=sys.stderr)
        return 2
    out = Path(args.out or f"runs/bench/{args.suite}{'-quick' if args.quick else ''}")
    if args.list:
        for cell in cells:
            print(cell.name, " ".join(cell_argv(cell, out / "runs")))
        return 0
    command = "asyncrl " + shlex.join(args.argv)
    try:
        summary = run_suite(args.suite, cells, out, quick=args.quick, command=command,
                            in_process=args.in_process or args.suite == "atlas")
    except BenchError as err:
        print(f"asyncrl: {err}", file=sys.stderr)
        return 1
    print(json.dumps({k: v for k, v in summary.items() if not isinstance(v, (dict, list))}))
    print(f"report: {out / 'report.html'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    # overrides may follow options (`bench a3po --quick k=v`): argparse leaves those unparsed
    args, rest = parser.parse_known_args(argv)
    if rest and all("=" in item and not item.startswith("-") for item in rest):
        args.overrides = [*args.overrides, *rest]
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.argv = argv
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress line is the only one
    if args.command == "bench":
        return _bench(args)
    return guarded(lambda: COMMANDS[args.command](load_config(args.config, args.overrides)))


if __name__ == "__main__":
    sys.exit(main())
