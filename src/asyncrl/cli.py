"""``asyncrl train | pretrain | eval``: parse, call the library, nothing else.

Bad input (config key, file, value) exits 2 with one line on stderr and no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

from asyncrl.config import ConfigError, load_config


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
    return parser


def _train(cfg) -> int:
    from asyncrl.runtime import RUNNERS

    summary = RUNNERS[cfg.run.mode](cfg)
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

    from asyncrl.evaluation import evaluate
    from asyncrl.policy.model import load_policy_for
    from asyncrl.runtime.session import resolve_policy_dir
    
    torch.set_num_threads(cfg.policy.torch_threads)
    task = cfg.task.build()
    model, tokenizer = load_policy_for(cfg.policy, resolve_policy_dir(cfg))
    problems = task.problems("eval")[: cfg.eval.n_problems]
    acc = evaluate(model, tokenizer, task, problems, max_new_tokens=cfg.rollout.max_new_tokens,
                   temperature=cfg.eval.temperature, batch_size=cfg.eval.batch_size,
                   samples=cfg.eval.samples, seed=cfg.run.seed, chat_template=cfg.policy.chat_template)
    print(json.dumps({"eval_reward": acc, "n_problems": len(problems)}))
    return 0


COMMANDS = {"train": _train, "pretrain": _pretrain, "eval": _eval}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress line is the only one
    try:
        cfg = load_config(args.config, args.overrides)
        return COMMANDS[args.command](cfg)
    except ConfigError as err:
        print(f"asyncrl: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("asyncrl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
