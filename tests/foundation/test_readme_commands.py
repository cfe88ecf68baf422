"""The README's commands are the docs check: every shell line in its code blocks is either an
`asyncrl` command checked here, or one of the few install/setup lines listed below (CI itself runs
`make test` from a fresh clone, which is the same setup `make demo` does).

- `asyncrl train|eval|pretrain ...` resolve their whole config (`asyncrl config` with the same
  arguments: every key, value, file, preset, model directory and reward function is checked),
  in a scratch directory holding the files the README's recipes name (examples/recipe2's among
  them: its `cd examples/recipe2` line must name a folder of the repository);
- `asyncrl plan ...` runs as written (it only prints an estimate);
- the Python recipe runs with `asyncrl.train` swapped for `asyncrl.api.build_config`, which takes
  the same arguments and checks them without training;
- `python -m benchmarks ...` (the benchmark apparatus, run from a checkout) builds and validates
  every cell (`--list`): tests/bench/test_readme_bench_commands.py.

Training itself is covered by the end-to-end tests (the recipes' data and reward forms by
tests/runtime/test_any_dataset_e2e.py).
"""

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from asyncrl.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", README, re.S)
NOT_ASYNCRL = ("make demo", "pip install", "python -m venv")  # setup: what CI's `make test` does
RECIPE_DIR = "examples/recipe2"  # recipe 2 runs in it: its files are copied into the scratch directory
GSM8K_ROW = {"question": "Tom has 3 apples and buys 4 more. How many apples?", "answer": "3 + 4 = 7\n#### 7"}
MINIMAL_QWEN2 = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 64,
                 "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                 "num_key_value_heads": 1, "max_position_embeddings": 512}


def shell_lines(lang: str = "bash") -> list[str]:
    lines = []
    for block_lang, body in BLOCKS:
        if block_lang != lang:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def asyncrl_args(line: str) -> list[str]:
    """The arguments after `asyncrl`, without the trailing comment."""
    words = shlex.split(line, comments=True)
    assert words[0] == "asyncrl", line
    return words[1:]


COMMANDS = [line for line in shell_lines() if line.startswith("asyncrl ")]
BENCH = "python -m benchmarks "  # the apparatus' lines: tests/bench/test_readme_bench_commands.py


def test_every_readme_shell_line_is_checked():
    others = [line for line in shell_lines() if not line.startswith(("asyncrl ", BENCH, "echo ", "cd ", *NOT_ASYNCRL))]
    assert others == []
    moves = [line.split(None, 1)[1] for line in shell_lines() if line.startswith("cd ")]
    assert moves == [RECIPE_DIR] and (ROOT / RECIPE_DIR).is_dir()
    assert len(COMMANDS) >= 10 and [b for b in BLOCKS if b[0] == "python"]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A directory with what the recipes name: examples/recipe2's files (prompts.jsonl, eval.jsonl,
    my_rewards.py), what the README's echo lines write, GSM8K files, and a model directory."""
    root = tmp_path_factory.mktemp("readme")
    for path in (ROOT / RECIPE_DIR).iterdir():
        if path.is_file():
            shutil.copy(path, root / path.name)
    for line in shell_lines():
        if line.startswith("echo "):
            subprocess.run(line, shell=True, cwd=root, check=True)
    (root / "data" / "gsm8k").mkdir(parents=True)
    for split in ("train", "test"):
        (root / "data" / "gsm8k" / f"{split}.jsonl").write_text((json.dumps(GSM8K_ROW) + "\n") * 20)
    model = root / "models" / "Qwen2.5-1.5B-Instruct"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(MINIMAL_QWEN2))
    (model / "tokenizer.json").write_text("{}")  # config load checks that tokenizer files are there
    return root


def _localised(args: list[str], root: Path) -> list[str]:
    # plan files are read from the checkout, whatever the working directory
    return [a.replace("=/models/", f"={root}/models/") if not a.startswith("benchmarks/plans/")
            else str(ROOT / a) for a in args]


@pytest.mark.parametrize("line", COMMANDS, ids=range(len(COMMANDS)))
def test_readme_command_is_valid(line, scratch, monkeypatch, capsys):
    monkeypatch.chdir(scratch)
    args = _localised(asyncrl_args(line), scratch)
    command, rest = args[0], args[1:]
    if command == "plan":
        code = main(args)
    else:
        assert command in ("train", "eval", "pretrain"), line  # not `bench`: moved to python -m benchmarks
        if "--out" in rest:  # eval's output folder: not a config key
            i = rest.index("--out")
            rest = rest[:i] + rest[i + 2:]
        code = main(["config", *rest])
    out = capsys.readouterr()
    assert code == 0, f"{line}\n{out.err[-2000:]}"


def test_readme_python_recipe_builds_its_config(scratch, monkeypatch):
    import asyncrl.api

    monkeypatch.chdir(scratch)
    monkeypatch.syspath_prepend(str(scratch))
    source = next(body for lang, body in BLOCKS if lang == "python")
    source = source.replace("asyncrl.train(", "asyncrl.api.build_config(")
    namespace = {"__name__": "__main__"}
    exec(compile(source, "README.md", "exec"), namespace)
    cfg = namespace["summary"]
    assert cfg.trainer.steps == 100 and cfg.task.name == "dataset" and len(cfg.reward.funcs) == 1
