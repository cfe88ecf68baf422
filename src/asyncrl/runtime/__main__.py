"""``python -m asyncrl.runtime [--config FILE] [dotted.key=value ...]``: one training run, without the
CLI (what a benchmark suite, ``python -m benchmarks``, runs in a fresh interpreter per cell). Bad
input exits 2 with one line."""

from __future__ import annotations

import argparse
import json
import sys

from asyncrl.runtime.validate import load_run_config
from asyncrl.core.loader import guarded
from asyncrl.runtime import train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asyncrl.runtime", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="YAML config file")
    parser.add_argument("overrides", nargs="*", metavar="dotted.key=value")
    args = parser.parse_args(argv)

    def run() -> int:
        summary = train(load_run_config(args.config, args.overrides))
        if summary is None:  # a torchrun rank other than 0
            return 0
        print(json.dumps({k: summary[k] for k in ("mode", "steps", "final_eval_reward", "run_dir")}))
        return 0

    return guarded(run)


if __name__ == "__main__":
    sys.exit(main())
