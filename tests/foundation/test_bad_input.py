"""The bad-input table (docs/errors.md): every row runs the real CLI in a process of its own and must
exit 2 with exactly one line on stderr naming the field / file / line, no traceback, and no new run
directory. The processes are forked from one that imported the CLI once (cli_forks.py: most rows
fail at config load, and the imports were most of their time); one test checks that a fresh
``python -m asyncrl.cli`` gives the same result. The rows that need a model use a tiny saved one (no
warm start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# the default progress display stays on: the one-line contract holds with it (stderr is not a terminal)
BASE = ["run.tensorboard=false"]
# the e2e tiny shapes, sized so a prompt of a few hundred words overflows the 256-token context
SMALL = ["rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=8",
         "trainer.n_minibatches=1", "trainer.steps=1", "eval.n_problems=2", "eval.every=0", "run.mode=sync"]
GOOD_ROW = {"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}
EVAL_ROW = {"question": "What is 1 + 1?", "answer": "#### 2"}


def _jsonl(tmp: Path, name: str, rows: list) -> str:
    path = tmp / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def _gsm8k(tmp: Path, rows: list, with_eval: bool = True) -> list[str]:
    """A gsm8k task on ``rows``, with a one-problem eval file (a few rows hold out none)."""
    evals = [f"task.eval_path={_jsonl(tmp, 'eval.jsonl', [EVAL_ROW])}"] if with_eval else []
    return ["task=gsm8k", f"task.path={_jsonl(tmp, 'data.jsonl', rows)}", *evals]


def _corrupt_model(tmp: Path, model: Path) -> str:
    bad = tmp / "corrupt-model"
    bad.mkdir()
    for item in model.iterdir():
        (bad / item.name).write_bytes(item.read_bytes())
    (bad / "model.safetensors").write_bytes(b"\0garbage" * 64)
    return str(bad)


def _model_copy(tmp: Path, model: Path, name: str, drop: tuple[str, ...], tokenizer_config: str | None = None) -> str:
    """``model`` copied to ``tmp/name`` without the files ``drop``; ``tokenizer_config`` replaces its
    tokenizer_config.json."""
    copy = tmp / name
    copy.mkdir()
    for item in model.iterdir():
        if item.name not in drop:
            (copy / item.name).write_bytes(item.read_bytes())
    if tokenizer_config is not None:
        (copy / "tokenizer_config.json").write_text(tokenizer_config)
    return str(copy)


def _alias_bomb() -> str:
    """"Billion laughs": nine aliases of nine aliases, nine levels deep (9^9 values expanded)."""
    levels = ['&a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "trainer:\n  lr: [" + ", ".join(levels) + "]\n"


def _binary(tmp: Path) -> str:
    (tmp / "model.bin").write_bytes(bytes(range(256)) * 8)
    return str(tmp / "model.bin")


def _chat_rows(tmp: Path, role: str) -> str:
    rows = [{"messages": [{"role": "user", "content": "hi"}], "answer": "1"},
            {"messages": [{"role": "system", "content": "be brief"}, {"role": role, "content": "hello"}],
             "answer": "2"}]
    return f"task.path={_jsonl(tmp, 'chat.jsonl', rows)}"


def _resumable_run(tmp: Path, model: Path) -> list[str]:
    """A finished one-step run with its checkpoint, whose ledger then gets a row with a null step."""
    args = ["train", *SMALL, f"policy.model_path={model}", "run.name=damaged", "run.progress=false"]
    proc = run_case(tmp, args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(tmp / "runs" / "damaged" / "ledger.jsonl", "a") as ledger:
        ledger.write('{"step": null}\n')
    return ["--resume", str(tmp / "runs" / "damaged"), "trainer.steps=2"]


def _finished_run(tmp: Path) -> list[str]:
    run = tmp / "runs" / "done"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("{}\n")
    (run / "summary.json").write_text("{}")
    return ["run.name=done"]


# (id, argv after `asyncrl`, text stderr must contain); ``{tmp}`` / ``{model}`` are filled in, a
# callable item is called with (tmp, model) and returns the args it stands for.
CASES = [
    # config keys, types and values (config load)
    ("unknown-key", ["train", "trainer.lrr=0.1"], "trainer.lrr: unknown key"),
    ("unknown-section", ["train", "optimizer.lr=0.1"], "optimizer: unknown key"),
    ("not-an-override", ["train", "trainer.lr"], "trainer.lr: override must look like"),
    ("wrong-type-int", ["train", "trainer.steps=ten"], "trainer.steps: expected an integer"),
    ("wrong-type-bool", ["train", "run.tensorboard=maybe"], "run.tensorboard: expected true/false"),
    ("wrong-type-list", ["train", "eval.pass_k=1,x"], "eval.pass_k[1]: expected an integer"),
    ("bad-literal", ["train", "run.mode=turbo"], "run.mode: must be one of"),
    ("lr-nan", ["train", "trainer.lr=.nan"], "trainer.lr: expected a finite number"),
    ("lr-inf", ["train", "trainer.lr=.inf"], "trainer.lr: expected a finite number"),
    ("lr-zero", ["train", "trainer.lr=0"], "trainer.lr: must be in (0, 1)"),
    ("grad-clip-nan", ["train", "trainer.grad_clip=.nan"], "trainer.grad_clip: expected a finite number"),
    ("grad-clip-inf", ["train", "trainer.grad_clip=.inf"], "trainer.grad_clip: expected a finite number"),
    ("grad-clip-zero", ["train", "trainer.grad_clip=0"], "trainer.grad_clip: must be > 0"),
    ("adv-eps-nan", ["train", "trainer.adv_eps=.nan"], "trainer.adv_eps: expected a finite number"),
    ("adv-eps-inf", ["train", "trainer.adv_eps=.inf"], "trainer.adv_eps: expected a finite number"),
    ("adv-eps-negative", ["train", "trainer.adv_eps=-1e-6"], "trainer.adv_eps: must be > 0"),
    ("weight-decay-negative", ["train", "trainer.weight_decay=-0.1"], "trainer.weight_decay: must be >= 0"),
    ("pretrain-weight-decay-negative", ["pretrain", "pretrain.weight_decay=-1"],
     "pretrain.weight_decay: must be >= 0"),
    ("eval-temperature-nan", ["train", "eval.temperature=.nan"], "eval.temperature: expected a finite number"),
    ("eval-temperature-negative", ["train", "eval.temperature=-1"], "eval.temperature: must be >= 0"),
    ("rollout-temperature-nan", ["train", "rollout.temperature=.nan"], "rollout.temperature: expected a finite"),
    ("run-name-dotdot", ["train", "run.name=.."], "run.name: must be a plain directory name"),
    ("run-name-slash", ["train", "run.name=a/b"], "run.name: must be a plain directory name"),
    ("run-name-empty", ["train", "run.name="], "run.name: must be a plain directory name"),
    ("minibatches-not-dividing", ["train", "trainer.n_minibatches=3"], "trainer.n_minibatches: must divide"),
    ("unknown-loss", ["train", "loss=nope"], "loss.name: must be one of ppo, decoupled, "),
    ("unknown-loss-param", ["train", "loss=ppo", "loss.params.bogus=1"], "loss.params.bogus: not a parameter"),
    ("max-prompt-length-zero", ["train", "task.max_prompt_length=0"], "task.max_prompt_length: must be >= 1"),
    ("max-prompt-chars-zero", ["train", "task.max_prompt_chars=0"], "task.max_prompt_chars: must be >= 1"),
    ("device-tpu", ["train", "policy.device=tpu"], "policy.device:"),
    ("device-cuda-7", ["train", "policy.device=cuda:7"], "policy.device: 'cuda:7'"),
    ("collective-on-trainer-gpu", ["train", "policy.device=cuda", "async.weight_channel=collective"],
     "async.weight_channel: 'collective' needs rollout workers on GPUs of their own"),
    ("model-path-missing", ["train", "policy.model_path={tmp}/nowhere"], "policy.model_path: no such directory"),
    ("model-path-not-a-model", ["train", "policy.model_path={tmp}"], "policy.model_path: not a Hugging Face model"),
    ("model-hub-id-not-cached", ["train", "policy.model_path=asyncrl-tests/no-such-model"],
     "policy.model_path: asyncrl-tests/no-such-model is not a local directory and not in the local Hugging Face "
     "cache at"),
    # config files
    ("config-file-missing", ["train", "--config", "{tmp}/none.yaml"], "--config: no such file"),
    ("config-file-bad-yaml", ["train", "--config", lambda t, m: _text(t, "bad.yaml", "a: [1,\nb: 2\n")],
     "--config: invalid YAML at"),
    ("config-file-not-mapping", ["train", "--config", lambda t, m: _text(t, "list.yaml", "- 1\n- 2\n")],
     "must hold a mapping"),
    ("config-duplicate-key", ["train", "--config", lambda t, m: _text(t, "dup.yaml", "trainer:\n  lr: 0.1\n  lr: 0.2\n")],
     "--config: {tmp}/dup.yaml:3: duplicate key 'lr' (first at line 2)"),
    ("config-alias-bomb", ["train", "--config", lambda t, m: _text(t, "bomb.yaml", _alias_bomb())],
     "bomb.yaml:1: its aliases expand to more than 100,000 values"),
    ("config-file-binary", ["train", "--config", lambda t, m: _binary(t)], "model.bin is not a UTF-8 text file"),
    ("override-invalid-yaml", ["train", "trainer.lr=["], "trainer.lr: cannot read '[' as a YAML value"),
    ("run-name-too-long", ["train", "run.name=" + "x" * 300], "run.name: 300 bytes, longer than a directory name"),
    # data files and lines
    ("task-path-unset", ["train", "task=gsm8k"], "task.path: task 'gsm8k' reads a local file"),
    ("task-path-missing", ["train", "task=gsm8k", "task.path={tmp}/none.jsonl"], "task.path: no such file"),
    ("task-path-wrong-suffix", ["train", "task=gsm8k", lambda t, m: f"task.path={_text(t, 'd.txt', 'x')}"],
     "unsupported file type '.txt'"),
    ("data-file-empty", ["train", lambda t, m: _gsm8k(t, [])], "no training problems"),
    ("data-line-malformed", ["train", lambda t, m: _gsm8k(t, [GOOD_ROW, "{not json"])], "data.jsonl:2: invalid JSON"),
    ("data-line-not-object", ["train", lambda t, m: _gsm8k(t, [GOOD_ROW, "[1, 2]"])],
     "data.jsonl:2: expected a JSON object"),
    ("data-field-missing", ["train", lambda t, m: _gsm8k(t, [GOOD_ROW, {"q": "x", "answer": "#### 1"}])],
     "data.jsonl:2: missing field 'question'"),
    ("data-no-gold-marker", ["train", "task.answer_format=gsm8k",
                             lambda t, m: _gsm8k(t, [GOOD_ROW, {"question": "x", "answer": "five"}])],
     "data.jsonl:2: no '####' marker"),
    ("data-golds-never-score", ["train", lambda t, m: _gsm8k(t, [{"question": "q", "answer": "#### banana"}] * 3)],
     "data.jsonl:1: no gold answer in this file has a number"),
    ("eval-fraction-zero", ["train", "task.eval_fraction=0", lambda t, m: _gsm8k(t, [GOOD_ROW], with_eval=False)],
     "has no eval problems (a file task: raise task.eval_fraction"),
    ("arithmetic-no-eval", ["train", "task.arithmetic.n_eval=0"], "task.arithmetic.n_eval: no eval problems"),
    ("task-path-arithmetic", ["train", "task=arithmetic", "task.path={tmp}/d.jsonl"],
     "task.path: the arithmetic task generates its problems and reads no file"),
    ("data-line-nested-deep", ["train", lambda t, m: _gsm8k(t, [GOOD_ROW, "[" * 100_000 + "]" * 100_000])],
     "data.jsonl:2: JSON nested too deeply to read"),
    # size bounds (asyncrl.tasks.limits, asyncrl.tasks.records): refused before the warm start's minutes
    ("prompt-5mb-line", ["train", lambda t, m: _gsm8k(t, [GOOD_ROW, {"question": "x " * 2_500_000, "answer": "#### 1"}])],
     "task.max_prompt_chars: {tmp}/data.jsonl:2: prompt is 5,000,0"),
    ("chat-role-unknown", ["train", lambda t, m: _chat_rows(t, "wizard")],
     "chat.jsonl:2: field 'messages' item 1: unknown role 'wizard'"),
    ("dataset-no-prompt-column", ["train", lambda t, m: f"task.path={_jsonl(t, 'data.jsonl', [{'text': 'x'}] * 4)}"],
     "data.jsonl:1: no prompt column (looked for prompt, messages, question"),
    # output directory
    ("out-dir-under-a-file", ["train", lambda t, m: f"run.out_dir={_text(t, 'f', '')}/runs"],
     "run.out_dir: "),
    ("out-dir-unwritable", ["train", "run.out_dir=/proc/asyncrl-runs"], "run.out_dir: cannot write under /proc"),
    # the warm start's cache (asyncrl.core.cache); $ASYNCRL_CACHE: tests/foundation/test_cache_dir.py
    ("cache-dir-a-file", ["train", lambda t, m: f"policy.cache_dir={_text(t, 'f', '')}"],
     "policy.cache_dir: the cache directory {tmp}/f (policy.cache_dir) is a file, not a directory"),
    ("cache-dir-unwritable", ["train", "policy.cache_dir=/proc/asyncrl-cache"],
     "policy.cache_dir: cannot write the cache directory /proc/asyncrl-cache (policy.cache_dir): "),
    ("eval-out-under-a-file", ["eval", "--out", lambda t, m: f"{_text(t, 'f', '')}/out"], "eval.outputs: "),
    ("eval-out-unwritable", ["eval", "--out", "/proc/asyncrl-eval"], "eval.outputs: cannot write under /proc"),
    # the benchmark suites left the library: one line naming the command that runs them
    ("bench-moved", ["bench", "atlas", "--ks=1", "--list"], "the benchmark suites are no longer part of the installed package"),
    ("unknown-option", ["train", "--bogus"], "unrecognized arguments: --bogus"),
    ("reward-func-not-importable", ["train", "reward.funcs=[no_such_pkg.rewards:fmt]"],
     "reward.funcs[0]: cannot import 'no_such_pkg.rewards:fmt': ModuleNotFoundError"),
    # agents (docs/agents.md): the environment and its tools are checked at config load
    ("unknown-env", ["train", "env=maze"], "env.name: must be one of none, answer, guess"),
    ("unknown-tool", ["train", "env.tools=[abacus]"], "env.tools[0]: tool 'abacus': not a built-in"),
    ("tool-not-importable", ["train", "env.tools=[no_such_pkg.tools:add]"],
     "env.tools[0]: tool 'no_such_pkg.tools:add': cannot import 'no_such_pkg.tools:add': ModuleNotFoundError"),
    ("tool-without-docstring", ["train", "env.tools=[asyncrl.agents.render:make_turns]"],
     "env.tools[0]: tool asyncrl.agents.render.make_turns:"),
    ("env-max-turns-zero", ["train", "env=guess", "env.max_turns=0"], "env.max_turns: must be >= 1"),
    ("env-discount-zero", ["train", "env=guess", "env.turn_discount=0"], "env.turn_discount: must be in (0, 1]"),
]

# rows that load a (tiny, saved) model: a few seconds more each
MODEL_CASES = [
    ("model-weights-corrupt", ["train", *SMALL, lambda t, m: f"policy.model_path={_corrupt_model(t, m)}"],
     "policy.model_path: cannot load a model from"),
    ("model-no-tokenizer", ["train", lambda t, m: "policy.model_path=" + _model_copy(
        t, m, "bare", ("tokenizer.json", "tokenizer_config.json"))],
     "policy.model_path: {tmp}/bare: no tokenizer files (neither tokenizer.json nor tokenizer_config.json)"),
    ("model-tokenizer-no-vocab",
     ["train", lambda t, m: f"policy.model_path={_model_copy(t, m, 'novocab', ('tokenizer.json',))}"],
     "policy.model_path: {tmp}/novocab: no tokenizer vocabulary: tokenizer_config.json names TokenizersBackend, "
     "which needs tokenizer.json or tokenizer.model"),
    ("model-tokenizer-empty",
     ["train", *SMALL, lambda t, m: f"policy.model_path={_model_copy(t, m, 'empty', ('tokenizer.json',), '{}')}"],
     "policy.model_path: cannot load a model from {tmp}/empty: ValueError: its tokenizer encodes text to no tokens"),
    ("max-new-tokens-fill-context", ["train", *SMALL, "policy.model_path={model}", "rollout.max_new_tokens=256"],
     "rollout.max_new_tokens: 256 leaves no room for a prompt"),
    ("prompt-over-context", ["train", *SMALL, "policy.model_path={model}",
                             lambda t, m: _gsm8k(t, [GOOD_ROW, {"question": "two plus " * 200, "answer": "#### 4"}]
                                                 + [GOOD_ROW] * 20)],
     "rollout.max_new_tokens: {tmp}/data.jsonl:2: prompt of"),
    ("prompt-over-max-tokens", ["train", *SMALL, "policy.model_path={model}", "task.max_prompt_length=60",
                                lambda t, m: _gsm8k(t, [GOOD_ROW] * 3 + [{"question": "one and " * 50,
                                                                          "answer": "#### 1"}])],
     "task.max_prompt_length: {tmp}/data.jsonl:4: prompt is"),
    ("prompt-20mb-line", ["train", *SMALL, "policy.model_path={model}",
                          lambda t, m: _gsm8k(t, [GOOD_ROW, {"question": "x " * 10_000_000, "answer": "#### 1"}])],
     "task: {tmp}/data.jsonl:2: a line of more than 16 MiB, over the bound on one row"),
    ("reward-nan", ["@reward=nan", "train", *SMALL, "policy.model_path={model}"],
     "reward function asyncrl.tasks.rewards:correct_answer returned nan on row uid=arith-train-000000"),
    ("reward-raises", ["@reward=raise", "train", *SMALL, "policy.model_path={model}"],
     "reward function asyncrl.tasks.rewards:correct_answer raised RuntimeError: boom on row uid=arith-train-000000"),
    ("finished-run-dir", ["train", *SMALL, "policy.model_path={model}", lambda t, m: _finished_run(t)],
     "run.name"),
    ("reward-weights-overflow", ["train", *SMALL, "policy.model_path={model}", "reward.weights=[1e308]"],
     "reward.weights: [1e+308] × the values [1.0] on row uid=arith-train-000000: the total 1e+308 is not finite"),
    ("resume-ledger-step-null", ["train", lambda t, m: _resumable_run(t, m)],
     "--resume: {tmp}/runs/damaged/ledger.jsonl:2: 'step' is null, not a step number"),
    ("dataset-no-answer-no-reward", ["train", *SMALL, "policy.model_path={model}", "task.eval_fraction=0.5",
                                     lambda t, m: f"task.path={_jsonl(t, 'data.jsonl', [{'prompt': f'p{i}'} for i in range(8)])}"],
     "reward.funcs: {tmp}/data.jsonl:"),
]

# a reward function replaced before the CLI runs: what a user's broken reward looks like
REWARDS = {
    "nan": "lambda self, completion, problem: float('nan')",
    "raise": "lambda self, completion, problem: (_ for _ in ()).throw(RuntimeError('boom'))",
}


def _text(tmp: Path, name: str, content: str) -> str:
    (tmp / name).write_text(content)
    return str(tmp / name)


def _expand(items: list, tmp: Path, model: Path | None) -> list[str]:
    out: list[str] = []
    for item in items:
        if callable(item):
            value = item(tmp, model)
            out += value if isinstance(value, list) else [value]
        else:
            out.append(item.format(tmp=tmp, model=model))
    return out


def run_case(tmp: Path, args: list[str], fresh: bool = False) -> subprocess.CompletedProcess:
    """``asyncrl ARGS`` in ``tmp``, in a process of its own: forked from the module's server, or
    (``fresh``) a new interpreter, ``python -m asyncrl.cli``."""
    args = list(args)
    prelude = ""
    if args[0].startswith("@reward="):
        patch = REWARDS[args.pop(0).split("=", 1)[1]]
        prelude = f"import asyncrl.tasks.arithmetic as a; a.ArithmeticTask.reward = {patch}"
    if args[0] in ("train", "pretrain", "eval"):
        args = [args[0], *BASE, *args[1:]]
    env = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "ASYNCRL_CACHE": str(tmp / "warm-start-cache")}  # the case's own: a warm start would show
    if not fresh:
        from cli_forks import shared_forks

        return shared_forks().run(args, tmp, env, prelude)
    command = [sys.executable, "-c", f"{prelude}; import sys; from asyncrl.cli import main; "
                                     "sys.exit(main(sys.argv[1:]))"] if prelude else [sys.executable, "-m", "asyncrl.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=tmp, env={**os.environ, **env},
                          timeout=120)


def _tree(tmp: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``runs/`` with its (inode, mtime, size): a file rewritten in place or
    replaced by a rename (config.yaml) shows as well as a new one."""
    runs = tmp / "runs"
    if not runs.exists():
        return {}
    return {str(p.relative_to(tmp)): (st.st_ino, st.st_mtime_ns, st.st_size)
            for p in runs.rglob("*") for st in [p.stat()]}


def check_one_line(tmp: Path, argv: list, expected: str, model: Path | None = None, fresh: bool = False) -> None:
    args = _expand(argv, tmp, model)  # writes the case's files
    before = _tree(tmp)
    proc = run_case(tmp, args, fresh)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].strip(), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert expected.format(tmp=tmp) in lines[0], lines[0]
    assert _tree(tmp) == before, "a refused run left files behind"
    assert not (tmp / "warm-start-cache").exists(), "a refused run started a warm start"


@pytest.mark.parametrize("argv, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(tmp_path, argv, expected):
    check_one_line(tmp_path, argv, expected)


@pytest.mark.parametrize("argv, expected", [c[1:] for c in MODEL_CASES], ids=[c[0] for c in MODEL_CASES])
def test_bad_input_with_a_model_is_one_line(tmp_path, model_dir, argv, expected):
    check_one_line(tmp_path, argv, expected, model_dir)


@pytest.mark.parametrize("case", ["unknown-key", "reward-nan"])
def test_a_fresh_interpreter_gives_the_forked_result(tmp_path, model_dir, case):
    """The fork server changes nothing a row sees: a new ``python -m asyncrl.cli`` process (a row
    refused at config load, and one refused after loading a model with a patched reward) exits the
    same way with the same line."""
    row = {c[0]: c[1:] for c in CASES + MODEL_CASES}[case]
    check_one_line(tmp_path, *row, model_dir, fresh=True)


def test_table_is_documented():
    """docs/errors.md lists every row of the table (by its id)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()
    missing = [case[0] for case in CASES + MODEL_CASES if f"`{case[0]}`" not in doc]
    assert not missing, missing


def test_gold_that_can_never_score_is_a_warning_naming_its_line(tmp_path, capsys):
    """One `#### banana` among good rows: the run may go on, but stderr names the line."""
    from asyncrl.config import load_config
    from asyncrl.tasks import configured_task

    args = _gsm8k(tmp_path, [GOOD_ROW, {"question": "q2", "answer": "#### banana"}, GOOD_ROW])
    configured_task(load_config(None, args).task)
    err = capsys.readouterr().err
    assert "1 gold answer(s) with no number" in err and f"{tmp_path}/data.jsonl:2" in err


def test_config_command_imports_no_reward_module(tmp_path):
    """`asyncrl config` prints the config; a reward module (user code) is named, never run."""
    (tmp_path / "my_rewards.py").write_text(
        "open('imported', 'w').close()\n\ndef fn(completions, **kw):\n    return [0.0] * len(completions)\n")
    proc = run_case(tmp_path, ["config", "reward.funcs=[my_rewards.py:fn]"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{tmp_path}/my_rewards.py:fn" in proc.stdout
    assert not (tmp_path / "imported").exists(), "asyncrl config ran the reward module"
    proc = run_case(tmp_path, ["train", "reward.funcs=[my_rewards.py:fn]", "run.out_dir=/proc/x"])  # refused later
    assert proc.returncode == 2 and (tmp_path / "imported").exists()  # train imports it at config load


def test_resume_auto_without_a_checkpoint_starts_afresh_writing_step_0_once(tmp_path, model_dir):
    """An attempt killed before its first checkpoint left rows; run.resume=auto starts over."""
    run = tmp_path / "runs" / "x"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("{}\n")
    (run / "metrics.jsonl").write_text('{"step": 0, "eval_reward": 0.5}\n{"step": 1, "loss": 0.1}\n')
    (run / "ledger.jsonl").write_text('{"step": 1, "consumed": [0], "dropped": []}\n')
    proc = run_case(tmp_path, ["train", *SMALL, f"policy.model_path={model_dir}", "run.name=x", "run.resume=auto"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1]
    assert "eval_reward\": 0.5" not in (run / "metrics.jsonl").read_text()  # the old attempt's row went
    assert [json.loads(line)["step"] for line in (run / "ledger.jsonl").read_text().splitlines()] == [1]


def test_pretrain_summary_holds_null_not_nan(tmp_path):
    """pretrain.steps=0 trains nothing: its loss is NaN, which JSON cannot hold."""
    from asyncrl.training.pretrain import _save

    class Saved:
        def cpu(self):
            return self

        def save_pretrained(self, path):
            (Path(path) / "weights").write_text("")

    _save(tmp_path / "warm", Saved(), Saved(), {"final_sft_loss": float("nan"), "steps": 0})
    text = (tmp_path / "warm" / "pretrain_summary.json").read_text()
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in JSON")) == {"final_sft_loss": None,
                                                                                      "steps": 0}


def test_a_second_stop_signal_exits_like_the_first(capsys):
    """SIGTERM twice: 143 (not Ctrl-C's 130), one line, no traceback."""
    import signal

    from asyncrl.core.loader import guarded
    from asyncrl.runtime.signals import StopNow, StopRequests

    stops = StopRequests()
    stops._handle(signal.SIGTERM, None)  # the first: stop at the next safe point
    with pytest.raises(StopNow) as second:
        stops._handle(signal.SIGTERM, None)

    def run():
        raise second.value

    assert guarded(run) == 143
    err = capsys.readouterr().err
    assert err == "asyncrl: interrupted by a second SIGTERM (no checkpoint)\n"
    assert guarded(lambda: (_ for _ in ()).throw(KeyboardInterrupt())) == 130  # Ctrl-C outside a run


def test_start_up_phases_wait_for_the_run_directory_unless_in_a_terminal():
    """Not a terminal: a refused run shows no phase line; a started one shows them all, in order."""
    import io

    from rich.console import Console

    from asyncrl.core.progress import TrainProgress

    out = io.StringIO()
    progress = TrainProgress(3, "sync/grpo", console=Console(file=out, force_terminal=False), hold_phases=True)
    progress.phase("loading task")
    progress.phase("loading model")
    assert out.getvalue() == ""
    progress.release_phases()
    progress.phase("first batch")
    assert out.getvalue().splitlines() == ["sync/grpo: loading task", "sync/grpo: loading model",
                                           "sync/grpo: first batch"]
    tty = io.StringIO()
    live = TrainProgress(3, "sync/grpo", console=Console(file=tty, force_terminal=True), hold_phases=True)
    live.phase("loading task")
    assert "loading task" in tty.getvalue()
