"""Tests for the arithmetic task and the shared ``####`` answer parser."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncrl.tasks import (
    TASKS,
    ArithmeticConfig,
    ArithmeticTask,
    Problem,
    Task,
    build_task,
    extract_answer,
    extract_any_answer,
)

SMALL = dict(n_train=400, n_eval=40)
EQUATION = re.compile(r"(-?\d+) ([+\-*]) (\d+) = (-?\d+)\.")
OPENING = re.compile(r"^Q: [A-Z][a-z]+ has (\d+) [a-z]+\.")


@cache
def task(**kwargs: object) -> ArithmeticTask:
    return ArithmeticTask(ArithmeticConfig(**kwargs))


def content(problem: Problem) -> tuple[int, tuple[tuple[str, int], ...]]:
    """Recover the operand/op sequence from the worked solution."""
    steps = EQUATION.findall(problem.solution)
    return int(steps[0][0]), tuple((op, int(b)) for _, op, b, _ in steps)


def digest(t: ArithmeticTask) -> str:
    h = hashlib.sha256()
    for split in ("train", "eval"):
        for p in t.problems(split):
            h.update(repr(p).encode())
    return h.hexdigest()


# --- determinism, splits, sizes -------------------------------------------------------


def test_same_seed_same_problems() -> None:
    a, b = ArithmeticTask(ArithmeticConfig(seed=3, **SMALL)), ArithmeticTask(ArithmeticConfig(seed=3, **SMALL))
    assert a.problems("train") == b.problems("train")
    assert a.problems("eval") == b.problems("eval")


def test_different_seed_different_problems() -> None:
    a, b = task(seed=0, **SMALL), task(seed=1, **SMALL)
    prompts_a = {p.prompt for p in a.problems("train")}
    prompts_b = {p.prompt for p in b.problems("train")}
    assert len(prompts_a & prompts_b) < len(prompts_a) // 10


def test_independent_of_pythonhashseed() -> None:
    code = (
        "from asyncrl.tasks import ArithmeticTask, ArithmeticConfig; import hashlib\n"
        "t = ArithmeticTask(ArithmeticConfig(seed=5, n_train=300, n_eval=30)); h = hashlib.sha256()\n"
        "[h.update(repr(p).encode()) for s in ('train', 'eval') for p in t.problems(s)]\n"
        "print(h.hexdigest())"
    )
    outs = set()
    for hashseed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout)
    assert len(outs) == 1
    assert outs.pop().strip() == digest(ArithmeticTask(ArithmeticConfig(seed=5, n_train=300, n_eval=30)))


def test_default_sizes_and_uids() -> None:
    t = task()
    train, evals = t.problems("train"), t.problems("eval")
    assert (len(train), len(evals)) == (ArithmeticConfig().n_train, ArithmeticConfig().n_eval)
    uids = [p.uid for p in train + evals]
    assert len(set(uids)) == len(uids)
    assert train[0].uid == "arith-train-000000" and evals[-1].uid == f"arith-eval-{len(evals) - 1:06d}"


@pytest.mark.parametrize("seed", [0, 7])
def test_splits_disjoint_and_deduped(seed: int) -> None:
    t = task(seed=seed, **SMALL)
    train, evals = t.problems("train"), t.problems("eval")
    for split in (train, evals):
        assert len({p.prompt for p in split}) == len(split)
        assert len({content(p) for p in split}) == len(split)
    assert not {p.prompt for p in train} & {p.prompt for p in evals}
    assert not {content(p) for p in train} & {content(p) for p in evals}


def test_eval_never_leaks_across_seeds() -> None:
    eval_0 = {content(p) for p in task(seed=0, **SMALL).problems("eval")}
    train_1 = {content(p) for p in task(seed=1, max_value=99, max_steps=3, n_train=20000, n_eval=10).problems("train")}
    assert not eval_0 & train_1


def test_problems_returns_fresh_list_and_rejects_bad_split() -> None:
    t = task(**SMALL)
    first = t.problems("train")
    first.clear()
    assert len(t.problems("train")) == SMALL["n_train"]
    with pytest.raises(ValueError, match="split"):
        t.problems("test")


def test_too_small_problem_space_raises_instead_of_hanging() -> None:
    with pytest.raises(ValueError, match="n_train"):
        ArithmeticConfig(max_value=3, min_steps=1, max_steps=1, n_train=100)
    with pytest.raises(ValueError, match="n_train/n_eval"):  # passes the bound, but "-"-only runs dry
        ArithmeticTask(ArithmeticConfig(ops="-", max_value=10, max_steps=1, n_train=60, n_eval=0)).problems("train")


# --- content correctness ---------------------------------------------------------------


def check_problem(p: Problem, cfg: ArithmeticConfig) -> None:
    assert p.prompt.startswith("Q: ") and p.prompt.endswith("\nA:") and p.prompt.count("\n") == 1
    assert p.solution.startswith(" ") and not p.solution.endswith("\n")
    assert p.solution.endswith(f" #### {p.answer}") and p.solution.count("####") == 1
    steps = EQUATION.findall(p.solution)
    assert cfg.min_steps <= len(steps) <= cfg.max_steps
    assert p.solution == " " + " ".join(f"{a} {op} {b} = {c}." for a, op, b, c in steps) + f" #### {p.answer}"
    opening = OPENING.match(p.prompt)
    assert opening and int(opening.group(1)) == int(steps[0][0])
    assert 1 <= int(steps[0][0]) <= cfg.max_value
    total = int(steps[0][0])
    for a, op, b, c in steps:
        a, b, c = int(a), int(b), int(c)
        assert a == total and op in cfg.ops
        if op == "*":
            assert 2 <= b <= 9
        else:
            assert 1 <= b <= cfg.max_value
        assert c == (a + b if op == "+" else a - b if op == "-" else a * b)
        if not cfg.allow_negative:
            assert c >= 0
        total = c
    assert p.answer == str(total)
    # operands appear in the question in order, one sentence per step
    body = p.prompt[len(opening.group(0)) :]
    assert [int(x) for x in re.findall(r"\d+", body)] == [int(b) for _, _, b, _ in steps]
    assert body.count(".") == len(steps)
    assert p.prompt.endswith("have?\nA:")


CONFIGS = [
    ArithmeticConfig(**SMALL),
    ArithmeticConfig(min_steps=2, max_steps=5, max_value=999, ops="+-*", seed=2, **SMALL),
    ArithmeticConfig(min_steps=3, max_steps=3, max_value=9, ops="*+", n_train=500, n_eval=50),
    ArithmeticConfig(ops="-", max_value=50, allow_negative=True, **SMALL),
    ArithmeticConfig(ops="-", max_value=99, max_steps=4, **SMALL),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.ops}-{c.min_steps}..{c.max_steps}-{c.max_value}")
def test_every_problem_is_correct_and_self_rewarding(cfg: ArithmeticConfig) -> None:
    t = ArithmeticTask(cfg)
    for split in ("train", "eval"):
        for p in t.problems(split):
            check_problem(p, cfg)
            assert t.reward(p.solution, p) == 1.0
            assert t.reward(p.solution + "\nQ: babble #### 123456789", p) == 1.0


def test_default_config_is_correct_and_short() -> None:
    t = task()
    problems = t.problems("train") + t.problems("eval")
    for p in problems:
        check_problem(p, t.cfg)
        assert t.reward(p.solution, p) == 1.0
    lengths = [len(p.prompt + p.solution) for p in problems]
    assert max(lengths) < 220 and sum(lengths) / len(lengths) < 160


def test_knobs_are_used() -> None:
    steps = {len(EQUATION.findall(p.solution)) for p in task(min_steps=1, max_steps=4, **SMALL).problems("train")}
    assert steps == {1, 2, 3, 4}
    ops = {op for p in task(ops="+-*", **SMALL).problems("train") for _, op, _, _ in EQUATION.findall(p.solution)}
    assert ops == {"+", "-", "*"}
    big = [int(b) for p in task(max_value=999, **SMALL).problems("train") for _, _, b, _ in EQUATION.findall(p.solution)]
    assert max(big) > 900
    negative = task(ops="-", allow_negative=True, **SMALL).problems("train")
    assert any(p.answer.startswith("-") for p in negative)
    assert {p.prompt.split()[1] for p in task(**SMALL).problems("train")} == {"Tom", "Sam", "Ben", "Ana", "Mia", "Eva"}


# --- reward ------------------------------------------------------------------------------


def test_reward_on_wrong_and_malformed_completions() -> None:
    t = task(**SMALL)
    p = t.problems("eval")[0]
    wrong = str(int(p.answer) + 1)
    for completion in [
        "",
        p.answer,
        f" The answer is {p.answer}",
        f" #### {wrong}",
        f" #### {wrong} #### {p.answer}",
        p.solution.replace(f"#### {p.answer}", f"#### {wrong}"),
        p.solution.replace("####", "###"),
        f" #### {p.answer}e3",
        "#" * 10_000,
    ]:
        assert t.reward(completion, p) == 0.0, completion
    assert t.reward(None, p) == 0.0  # type: ignore[arg-type]
    assert t.reward(f"####{p.answer}.", p) == 1.0
    assert t.reward(f" #### {int(p.answer):,}", p) == 1.0


# --- answer parser ------------------------------------------------------------------------

PARSER_CASES = [
    ("#### 31", "31"),
    (" 23 + 15 = 38. 38 - 7 = 31. #### 31", "31"),
    ("#### 1,234", "1234"),
    ("#### 1,234,567", "1234567"),
    ("#### -5.", "-5"),
    ("####7", "7"),
    ("####\n\t 7\n", "7"),
    ("#### +7", "7"),
    ("#### $12", "12"),
    ("#### -$12", "-12"),
    ("#### $-12", "-12"),
    ("#### 12 apples", "12"),
    ("#### 12, then more text", "12"),
    ("#### 007", "7"),
    ("#### 3.50", "3.5"),
    ("#### 2.0", "2"),
    ("#### 0.0", "0"),
    ("#### -0", "0"),
    ("#### -0.00", "0"),
    ("#### 5 #### 6", "5"),
    ("#### 5\nQ: Tom has 3 pens. #### 9", "5"),
    ("x #### 5 ####", "5"),
    ("The answer is 12", None),
    ("", None),
    ("#### ", None),
    ("####", None),
    ("#### apples", None),
    ("#### -", None),
    ("#### .5", None),
    ("#### - 5", None),
    ("### 5", None),
    ("#### 1e5", None),  # scientific notation is not the format: no credit rather than "1"
    ("#### 12abc", None),
    ("#### 1,23", None),  # bad thousands grouping is ambiguous
    ("#### 1,2345", None),
    ("#### 1.2.3", None),
    ("#### ١٢", None),  # Arabic-Indic digits: ASCII only
    ("#### １２", None),  # full-width digits
    ("#### 12٣", None),
    ("#### " + "9" * 40, "9" * 40),
    ("#### " + "9" * 41, None),
    ("#### " + "1" * 100_000, None),
    ("x" * 100_000 + " #### 42", "42"),
    ("#### 42 " + "x" * 100_000, "42"),
    ("#### 5 " * 10_000, "5"),
]


@pytest.mark.parametrize(("text", "expected"), PARSER_CASES)
def test_extract_answer_table(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize("bad", [None, 12, b"#### 12", ["#### 12"]])
def test_extract_answer_non_str(bad: object) -> None:
    assert extract_answer(bad) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "expected"), [
    (" 3 + 5 = 8. #### 8", "8"),
    (" 3 + 5 = 8. The answer is 8.", "8"),
    (" the ANSWER IS -3 apples", "-3"),
    (" The answer is 5. #### 6", "5"),  # the first answer committed to, whatever its style
    (" #### 6 The answer is 5.", "6"),
    (" 3 + 5 = 8.", None),  # no marker: the last equation is not read as an answer
    (" The answer is x.", None),
    (" The answer is 12abc", None),  # same number rules as extract_answer
])
def test_extract_any_answer_reads_either_style(text: str, expected: str | None) -> None:
    assert extract_any_answer(text) == expected


def test_answer_correct_ignores_the_format_the_reward_checks() -> None:
    task = ArithmeticTask(ArithmeticConfig(**SMALL))
    problem = task.problems("eval")[0]
    body = problem.solution.rsplit(" ####", 1)[0]
    alt = f"{body} The answer is {problem.answer}."
    assert task.reward(alt, problem) == 0.0 and task.answer_correct(alt, problem)
    assert task.reward(problem.solution, problem) == 1.0 and task.answer_correct(problem.solution, problem)
    wrong = f"{body} The answer is {int(problem.answer) + 1}."
    assert not task.answer_correct(wrong, problem)


NORMALIZED = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?")


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_extract_answer_never_raises(text: str) -> None:
    out = extract_answer(text)
    assert out is None or (NORMALIZED.fullmatch(out) and out != "-0")
    out2 = extract_answer("#### " + text)
    assert out2 is None or NORMALIZED.fullmatch(out2)


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text())
def test_reward_is_binary(prefix: str, suffix: str) -> None:
    t = task(**SMALL)
    p = t.problems("eval")[0]
    for completion in (prefix, prefix + "#### " + suffix, prefix + p.solution + suffix):
        assert t.reward(completion, p) in (0.0, 1.0)


@given(st.integers(min_value=-(10**30), max_value=10**30), st.sampled_from(["", " ", "\n", ".", " apples"]))
def test_extract_answer_round_trips_integers(n: int, tail: str) -> None:
    assert extract_answer(f"#### {n}{tail}") == str(n)
    assert extract_answer(f"#### {n:,}{tail}") == str(n)


# --- config, registry, corpus -------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seed", 1.5),
        ("seed", True),
        ("min_steps", 0),
        ("max_steps", 0),
        ("max_steps", 1000),
        ("max_value", 0),
        ("max_value", "99"),
        ("ops", ""),
        ("ops", "+/"),
        ("ops", "++"),
        ("ops", None),
        ("n_train", 0),
        ("n_eval", -1),
        ("allow_negative", 1),
    ],
)
def test_config_validation_names_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        ArithmeticConfig(**{field: value})


def test_min_greater_than_max_steps() -> None:
    with pytest.raises(ValueError, match="max_steps"):
        ArithmeticConfig(min_steps=4, max_steps=3)


def test_registry_and_build_task() -> None:
    assert TASKS["arithmetic"] is ArithmeticTask
    t = build_task("arithmetic", {"seed": 3, **SMALL})
    assert isinstance(t, Task) and t.name == "arithmetic"
    assert t.problems("eval") == ArithmeticTask(ArithmeticConfig(seed=3, **SMALL)).problems("eval")
    assert build_task("arithmetic", ArithmeticConfig(**SMALL)).problems("eval") == task(**SMALL).problems("eval")
    with pytest.raises(ValueError, match="task.name: must be one of arithmetic, .*; got 'chess'"):
        build_task("chess", None)
    with pytest.raises(ValueError, match="max_stepz"):
        build_task("arithmetic", {"max_stepz": 3})


def test_corpus_is_train_only_and_cycles() -> None:
    t = task(n_train=50, n_eval=20)
    train = t.problems("train")
    texts = list(t.corpus(120))
    assert len(texts) == 120
    assert texts[:50] == [p.prompt + p.solution for p in train]
    assert texts[50:100] == texts[:50]
    eval_prompts = {p.prompt for p in t.problems("eval")}
    assert not any(text.split("\nA:")[0] + "\nA:" in eval_prompts for text in texts)
    assert list(t.corpus(0)) == []
    with pytest.raises(ValueError, match="n"):
        list(t.corpus(-1))
