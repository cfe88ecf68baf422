"""``asyncrl train | pretrain | eval | config | export | plan``: parse, call the library, nothing else.

Bad input (config key, file, value) exits 2 with one line on stderr and no traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from asyncrl.config import ConfigError
from asyncrl.runtime.validate import load_run_config
from asyncrl.config.help import config_yaml, describe_keys, keys_epilog
from asyncrl.core.loader import guarded
from asyncrl.config.presets import PRESETS_DIR, preset_names


BENCH_MOVED = ("the benchmark suites are no longer part of the installed package: from a checkout of the "
               "repository run `python -m benchmarks SUITE ...` (docs/benchmarks.md)")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), like every other bad input."""

    def __init__(self, *args, epilog_of=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.epilog_of = epilog_of  # builds the epilog when help is shown: the keys' table takes a second

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def format_help(self) -> str:
        if self.epilog_of is not None and self.epilog is None:
            self.epilog = self.epilog_of()
        return super().format_help()


def _parser() -> argparse.ArgumentParser:
    from asyncrl import __version__

    parser = _Parser(prog="asyncrl", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"asyncrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in [
        ("train", "RL-train a policy (default: the embedded tiny model on the arithmetic task)"),
        ("pretrain", "supervised warm start of the embedded tiny model (cached; reused by train)"),
        ("eval", "evaluate the policy (policy.model_path or the cached warm start) on the eval split"),
        ("config", "print the resolved config as YAML (every key, defaults included); runs nothing"),
    ]:
        cmd = sub.add_parser(name, help=help_text, epilog_of=keys_epilog,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        cmd.add_argument("--config", metavar="FILE|PRESET",
                         help=f"YAML config file, or a packaged preset: {', '.join(preset_names())}")
        cmd.add_argument("--help-keys", metavar="PATTERN", nargs="?", const="",
                         help="list the config keys matching PATTERN (a glob such as 'trainer.*', or "
                              "a word of the key or its description) and exit")
        if name == "config":
            cmd.add_argument("--list-presets", action="store_true", help="list the packaged presets and exit")
        if name == "train":
            cmd.add_argument("--resume", metavar="RUN_DIR",
                             help="continue RUN_DIR from its newest checkpoint, with its saved config "
                                  "(overrides: only those docs/resume.md lists, e.g. trainer.steps)")
            cmd.add_argument("--nproc-per-node", metavar="N", type=int,
                             help="start N trainer ranks on this machine, as torchrun does, and end with the "
                                  "failing rank's line and exit status instead of torchrun's report (docs/scaling.md)")
        if name == "eval":
            cmd.add_argument("--out", metavar="DIR", help="write DIR/eval.json and DIR/problems.jsonl "
                                                          "(per-problem completions); same as eval.outputs=DIR")
        cmd.add_argument("overrides", nargs="*", metavar="dotted.key=value")

    export = sub.add_parser("export", help="write a run's newest checkpoint as a plain Hugging Face model folder")
    export.add_argument("run_dir", metavar="RUN_DIR")
    export.add_argument("--out", metavar="DIR", help="the folder to write (default: RUN_DIR/hf); must not exist")
    _plan_parser(sub)
    # the benchmark suites are not part of the installed library: a checkout runs them as `python -m benchmarks`
    sub.add_parser("bench", help="moved: a checkout of the repository runs the suites as `python -m benchmarks SUITE`")
    return parser


def _plan_parser(sub) -> None:
    from asyncrl.plan.estimate import PRESETS, Rates

    plan = sub.add_parser("plan", help="per-GPU memory and step time of a run, on paper (docs/scaling.md)")
    plan.add_argument("--model", metavar="PRESET|PATH|HUB_ID",
                      help=f"a Qwen2.5 shape ({', '.join(PRESETS)}), a Hugging Face config.json / model folder, "
                           "or a hub id in the local Hugging Face cache "
                           "(default: the config's policy.model_path, else its embedded model)")
    plan.add_argument("--config", metavar="FILE|PRESET", default="gpu-gsm8k",
                      help="the run config the batch shape and precision come from (default: gpu-gsm8k); "
                           "its task and reward sections are ignored")
    plan.add_argument("--gpus", type=int, default=1,
                      help="GPUs of the job (default 1): plan chooses how many train (FSDP2 ranks) and where the "
                           "rollout engines go, beside rank 0 or on GPUs of their own")
    plan.add_argument("--trainer-gpus", type=int, metavar="T",
                      help="plan only the layout with T trainer ranks: the engines beside rank 0 when T = --gpus, "
                           "else on the other --gpus - T GPUs")
    plan.add_argument("--table", action="store_true",
                      help="the Qwen2.5 0.5B / 1.5B / 7B / 32B shapes at 1-64 GPUs instead of one plan")
    plan.add_argument("--prompt-tokens", type=int, default=256, help="prompt positions per sequence (default 256)")
    plan.add_argument("--decode-tps", type=float, default=Rates.decode_tps,
                      help=f"generated tokens/s of one rollout GPU, its engines together (default "
                           f"{Rates.decode_tps:g}, a placeholder: measure yours)")
    plan.add_argument("--train-tflops", type=float, default=Rates.train_flops / 1e12,
                      help=f"achieved TFLOP/s per trainer GPU (default {Rates.train_flops / 1e12:.1f}: 40 %% of "
                           "an H100's bf16 dense peak)")
    plan.add_argument("--bus-gbps", type=float, default=Rates.bus_gbps,
                      help=f"GB/s the weights move at, per GPU (default {Rates.bus_gbps:g}, NVLink-class)")
    plan.add_argument("--gpu-gib", type=float, default=Rates.gpu_gib,
                      help=f"memory of one GPU in GiB (default {Rates.gpu_gib:g}, an H100)")
    plan.add_argument("--markdown", action="store_true", help="print Markdown tables (for docs)")
    plan.add_argument("overrides", nargs="*", metavar="dotted.key=value")


def _plan(args) -> int:
    from asyncrl.plan.cli import run_plan

    return run_plan(args)


def _train(cfg) -> int:
    from asyncrl.distributed.world import RankLost
    from asyncrl.runtime import train
    from asyncrl.runtime.pool import WorkerError
    from asyncrl.runtime.signals import Interrupted

    try:
        summary = train(cfg)
        if summary is None:  # a torchrun rank other than 0: rank 0 reports the run
            return 0
    except Interrupted as stop:
        hint = f"; continue with: asyncrl train --resume {stop.checkpoint.parent.parent}" if stop.checkpoint else ""
        print(f"asyncrl: {stop}{hint}", file=sys.stderr)
        return stop.exit_code
    except (WorkerError, RankLost) as err:
        if not getattr(err, "quiet", False):  # a lost rank is said once per job, by the first rank to find it
            print(f"asyncrl: {err}", file=sys.stderr)
        return 1
    keys = ("mode", "steps", "initial_eval_reward", "final_eval_reward", "wall_time_s", "run_dir")
    from asyncrl.tracking.metrics import json_safe

    line = {k: summary[k] for k in keys}
    report = _report_of(summary["run_dir"])
    if report is not None:
        line["report"] = report
    print(json.dumps(json_safe(line)))
    return 0


def _report_of(run_dir: str) -> str | None:
    """``<run_dir>/report.html`` when this run wrote it: after its summary.json (which comes
    first), so that a stale page of an earlier attempt is never named."""
    from pathlib import Path

    report, summary = Path(run_dir) / "report.html", Path(run_dir) / "summary.json"
    if report.is_file() and summary.is_file() and report.stat().st_mtime_ns >= summary.stat().st_mtime_ns:
        return str(report)
    return None


def _pretrain(cfg) -> int:
    from asyncrl.training.pretrain import pretrain
    from asyncrl.core.progress import TrainProgress

    with TrainProgress(cfg.pretrain.steps, "pretrain", enabled=cfg.run.progress) as progress:
        path = pretrain(cfg, on_step=lambda step, loss: progress.update(step + 1, sft_loss=loss))
    print((path / "pretrain_summary.json").read_text())
    print(f"saved: {path}")
    return 0


def _eval(cfg) -> int:
    import torch

    from asyncrl.training.evaluation import cli_report, eval_metrics, summary_lines, write_outputs
    from asyncrl.tracking.metrics import json_safe
    from asyncrl.policy.model import check_device, load_policy_for
    from asyncrl.runtime.preflight import check_prompts, check_writable
    from asyncrl.runtime.session import warm_start_if_needed
    from asyncrl.config.threads import trainer_threads
    from asyncrl.rewards import RewardSet
    from asyncrl.tasks import configured_task

    torch.set_num_threads(trainer_threads(cfg))
    check_device(cfg.policy.device)
    if cfg.eval.outputs:  # before the evaluation's minutes, not after them
        check_writable(cfg.eval.outputs, "eval.outputs")
    task = configured_task(cfg.task)
    model, tokenizer = load_policy_for(cfg.policy, warm_start_if_needed(cfg, task))
    problems = check_prompts(cfg, task, tokenizer, model).eval[: cfg.eval.n_problems]  # task.long_prompts
    metrics, result = eval_metrics(model, tokenizer, task, problems, cfg, rewards=RewardSet.from_config(cfg.reward, task))
    report = cli_report(metrics, result, cfg)
    lines = summary_lines(report)  # for people (stderr); stdout stays one JSON line
    if cfg.eval.outputs:
        try:
            written = write_outputs(cfg.eval.outputs, json_safe(report), result, cfg.eval.pass_k)
        except OSError as err:  # the directory changed since the check: one line, not a traceback
            raise ConfigError("eval.outputs", f"cannot write {err.filename or cfg.eval.outputs}: "
                                              f"{err.strerror or err}") from None
        lines.append("wrote: " + ", ".join(map(str, written)))
    print("\n".join(lines), file=sys.stderr)
    print(json.dumps(json_safe(report), allow_nan=False))  # JSON has no NaN: null instead
    return 0


COMMANDS = {"train": _train, "pretrain": _pretrain, "eval": _eval}


def parse_with_overrides(parser, argv: list[str]):
    """``parser``'s namespace for ``argv``, with ``key=value`` overrides that follow the options
    (`train --resume DIR k=v`: argparse leaves those unparsed) joined to ``args.overrides``."""
    args, rest = parser.parse_known_args(argv)
    if rest and all("=" in item and not item.startswith("-") for item in rest):
        args.overrides = [*args.overrides, *rest]
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.argv = argv
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # whatever follows: the suites are not here any more
        print(f"asyncrl: {BENCH_MOVED}", file=sys.stderr)
        return 2
    code = guarded(lambda: _import_named_plugins(argv))  # before the parser, which lists what they register
    if code:
        return code
    args = parse_with_overrides(_parser(), argv)
    if args.command == "export":
        return _export(args)
    if args.command == "plan":
        return _plan(args)
    if args.help_keys is not None or getattr(args, "list_presets", False):
        return _describe(args)
    if getattr(args, "nproc_per_node", None) is not None:
        return _launch(args)
    if args.command == "config":
        from asyncrl.rewards.resolve import paths_only

        with paths_only():  # printing a config runs no user code: reward modules are not imported
            return guarded(lambda: _print_config(_config(args)))
    return _past_stray_threads(guarded(lambda: COMMANDS[args.command](_quiet_hub(_config(args)))))


def _past_stray_threads(code: int, grace_s: float = 2.0) -> int:
    """``code``, once the run's own threads are gone. A thread that an environment, tool or reward
    started without ``daemon=True`` would keep the interpreter from exiting after the summary,
    forever if it never ends: after a short grace it is named in a warning and left behind (the
    exit functions run first, so trackers and logs are flushed as on a normal exit)."""
    import atexit
    import threading
    import time

    deadline = time.monotonic() + grace_s
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    stray = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if not stray:
        return code
    names = ", ".join(sorted({t.name for t in stray}))
    print(f"asyncrl: warning: {len(stray)} non-daemon thread{'s' if len(stray) > 1 else ''} started by the run's "
          f"code still running ({names[:200]}); exiting without them", file=sys.stderr)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _launch(args) -> int:
    """``train --nproc-per-node N``: torchrun's agent here, the ranks as its children (asyncrl.distributed.launch)."""
    from asyncrl.distributed.launch import launch, rank_command

    if args.nproc_per_node < 1:
        print("asyncrl: --nproc-per-node: must be >= 1", file=sys.stderr)
        return 2
    if "RANK" in os.environ:
        print("asyncrl: --nproc-per-node: this process is already a rank of a torchrun job", file=sys.stderr)
        return 2
    return launch(args.nproc_per_node, rank_command(args))


def _import_named_plugins(argv: list[str]) -> int:
    """Import the modules of a ``run.plugins=[...]`` argument before the parser is built, so that
    what they register is offered like the built-in parts: a bench suite's name (checked by the
    parser), a loss, a tracker. ConfigError naming ``run.plugins[i]`` for one that fails."""
    from asyncrl.config import Config
    from asyncrl.core.loader import parse_override
    from asyncrl.runtime.validate import import_plugins

    for item in argv:
        if item.startswith("run.plugins="):
            import_plugins(parse_override(item, Config)[1])
    return 0


def _export(args) -> int:
    from asyncrl.training.export import export_run

    try:
        out, step, skipped = export_run(args.run_dir, args.out)
    except ValueError as err:
        print(f"asyncrl: {err}", file=sys.stderr)
        return 2
    for path in skipped:  # links and special files are never copied into a folder meant for upload
        print(f"asyncrl: export skipped {path}: only regular files are copied", file=sys.stderr)
    print(json.dumps({"export": str(out), "step": step}))
    return 0


def _describe(args) -> int:
    """``--list-presets`` / ``--help-keys PATTERN``: print, load nothing."""
    if getattr(args, "list_presets", False):
        for name in preset_names():
            print(f"{name:<14} {PRESETS_DIR / (name + '.yaml')}")
        return 0
    text = describe_keys(args.help_keys)
    if text is None:
        print(f"asyncrl: no config key matches {args.help_keys!r}", file=sys.stderr)
        return 2
    print(text)
    return 0


def _print_config(cfg) -> int:
    sys.stdout.write(config_yaml(cfg))
    return 0


def _quiet_hub(value=None):
    """Our own progress line is the only one. Imported after the config loads: a typo is then
    refused in a fraction of a second instead of after transformers' import."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return value


def _config(args):
    if getattr(args, "resume", None) is None:
        out = [f"eval.outputs={args.out}"] if getattr(args, "out", None) else []
        return load_run_config(args.config, [*args.overrides, *out])
    from asyncrl.runtime.resume import resume_config

    if args.config:
        raise ConfigError("--config", "a resumed run uses the configuration saved in its run directory")
    return resume_config(args.resume, args.overrides)


if __name__ == "__main__":
    sys.exit(main())
