"""Tests for the file-backed gsm8k / math tasks, math-verify rewards and pass@k (the verifier pool's
processes: test_math_verifier_processes.py)."""

from __future__ import annotations

import json
import math
import pickle
import re
import time
from pathlib import Path

import pytest

from asyncrl.tasks import TASKS, DatasetConfig, GSM8KTask, MathTask, Task, build_task
from asyncrl.tasks.datasets import load_records
from asyncrl.tasks.math_reward import MathVerifier, extract_final_answer, last_boxed
from asyncrl.tasks.metrics import pass_at_k

TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(timeout_s=TIMEOUT_S, workers=1) as v:
        v.warmup()
        yield v


def gsm8k_rows(n: int, start: int = 0) -> list[dict]:
    rows = []
    for i in range(start, start + n):
        a, b = 17 * i + 3, 1000 + 31 * i
        rows.append({"question": f"Tom has {a} apples and buys {b} more (case {i}). How many now?",
                     "answer": f"He has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b:,}"})
    return rows


def write_jsonl(path: Path, rows: list, raw_lines: dict[int, str] | None = None) -> Path:
    """One JSON object per line; ``raw_lines`` overrides given 1-based lines verbatim."""
    lines = [json.dumps(r) for r in rows]
    for lineno, text in (raw_lines or {}).items():
        lines[lineno - 1] = text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def task(cls=GSM8KTask, verifier=None, **kwargs) -> GSM8KTask | MathTask:
    return cls(DatasetConfig(**kwargs), verifier=verifier)


# --- config -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"path": ""}, "path"),
        ({"eval_path": ""}, "eval_path"),
        ({"eval_fraction": 1.0}, "eval_fraction"),
        ({"eval_fraction": -0.1}, "eval_fraction"),
        ({"eval_fraction": True}, "eval_fraction"),
        ({"question_field": ""}, "question_field"),
        ({"answer_field": None}, "answer_field"),
        ({"prompt_template": "Q: {q}\nA:"}, "prompt_template"),
        ({"answer_format": "latex"}, "answer_format"),
        ({"max_train": 0}, "max_train"),
        ({"max_eval": -1}, "max_eval"),
        ({"max_eval": 2.5}, "max_eval"),
        ({"reward_timeout_s": 0}, "reward_timeout_s"),
        ({"reward_timeout_s": float("inf")}, "reward_timeout_s"),
        ({"reward_workers": 0}, "reward_workers"),
    ],
)
def test_config_validation(overrides: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: "):
        DatasetConfig(**{"path": "x.jsonl", **overrides})


def test_config_defaults_and_registry(tmp_path: Path) -> None:
    cfg = DatasetConfig(path="x.jsonl")
    assert (cfg.eval_path, cfg.eval_fraction, cfg.question_field, cfg.answer_field) == (None, 0.1, "question", "answer")
    assert (cfg.prompt_template, cfg.answer_format) == ("Question: {question}\nAnswer:", "auto")
    assert (cfg.max_train, cfg.max_eval, cfg.reward_timeout_s, cfg.reward_workers) == (None, None, 5.0, 1)
    assert TASKS["gsm8k"] is GSM8KTask and TASKS["math"] is MathTask
    path = write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(20))
    built = build_task("gsm8k", {"path": str(path), "max_train": 5})
    assert isinstance(built, Task) and built.name == "gsm8k" and len(built.problems("train")) == 5
    with pytest.raises(ValueError, match="^path: "):
        build_task("math", None)
    with pytest.raises(ValueError, match="unknown gsm8k config field"):
        build_task("gsm8k", {"path": str(path), "nope": 1})


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "data" / "train.jsonl"
    with pytest.raises(ValueError, match=re.escape(f"path: {missing}: no such file")):
        task(path=str(missing))
    good = write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(3))
    with pytest.raises(ValueError, match=re.escape(f"eval_path: {tmp_path / 'nope.parquet'}")):
        task(path=str(good), eval_path=str(tmp_path / "nope.parquet"))
    (tmp_path / "t.csv").write_text("question,answer\n")
    with pytest.raises(ValueError, match="t.csv: unsupported file type '.csv'"):
        list(load_records(tmp_path / "t.csv"))


# --- loading JSONL ----------------------------------------------------------------------------


def test_gsm8k_jsonl_problems(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(30))
    t = task(path=str(path), eval_fraction=0.0)
    train = t.problems("train")
    assert len(train) == 30 and t.problems("eval") == []
    first = train[0]
    assert first.prompt == "Question: Tom has 3 apples and buys 1000 more (case 0). How many now?\nAnswer:"
    assert first.answer == "1003"  # "#### 1,003" with the comma removed
    assert first.solution.startswith(" He has 3 + 1000") and first.solution.endswith("#### 1,003")
    assert first.uid == "gsm8k-train-000000" and len({p.uid for p in train}) == 30
    assert t.problems("train") == train and t.problems("train") is not t.problems("train")
    assert all(p.answer == str(17 * i + 3 + 1000 + 31 * i) for i, p in enumerate(train))
    with pytest.raises(ValueError, match="split"):
        t.problems("test")


@pytest.mark.parametrize(("text", "gold"), [("#### 1,234", "1234"), ("a\n#### 5\nb #### -1,000,000 ", "-1000000"),
                                            ("no marker", "no marker"), ("so \\boxed{12}", "12")])
def test_gsm8k_gold_extraction(tmp_path: Path, text: str, gold: str) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [{"question": "q", "answer": text}])
    assert task(path=str(path), eval_fraction=0.0).problems("train")[0].answer == gold


def test_field_overrides_and_nested_fields(tmp_path: Path) -> None:
    rows = [{"problem": f"What is {i}/2?", "solution": f"Half of {i} is $\\boxed{{\\frac{{{i}}}{{2}}}}$."}
            for i in range(1, 6)]
    path = write_jsonl(tmp_path / "math.jsonl", rows)
    t = task(MathTask, path=str(path), question_field="problem", answer_field="solution", eval_fraction=0.0)
    assert [p.answer for p in t.problems("train")] == [f"\\frac{{{i}}}{{2}}" for i in range(1, 6)]
    assert t.problems("train")[0].prompt == "Question: What is 1/2?\nAnswer:"
    # DAPO-Math-17k style: chat-formatted prompt and nested ground truth
    dapo = [{"prompt": [{"role": "user", "content": f"Compute {i}+{i}."}],
             "reward_model": {"ground_truth": str(2 * i), "style": "rule"}} for i in range(4)]
    path = write_jsonl(tmp_path / "dapo.jsonl", dapo)
    t = task(MathTask, path=str(path), question_field="prompt.0.content", answer_field="reward_model.ground_truth",
             prompt_template="{question}", eval_fraction=0.0)
    train = t.problems("train")
    assert [(p.prompt, p.answer) for p in train] == [(f"Compute {i}+{i}.", str(2 * i)) for i in range(4)]
    assert train[1].solution == " \\boxed{2}"  # raw golds get a synthesized final answer for SFT


def test_math_task_formats(tmp_path: Path) -> None:
    rows = [
        {"problem": "p0", "solution": "We get $\\boxed{\\frac{\\sqrt{3}}{2}}$.", "answer": "\\frac{\\sqrt{3}}{2}"},
        {"problem": "p1", "solution": "First \\boxed{1}, then \\boxed{\\{1, 2\\}}", "answer": "\\{1,2\\}"},
        {"problem": "p2", "solution": "Thus \\boxed{(3, \\frac{\\pi}{2})}.",
         "answer": "\\left( 3, \\frac{\\pi}{2} \\right)"},
    ]
    path = write_jsonl(tmp_path / "math500.jsonl", rows)
    from_solution = task(MathTask, path=str(path), question_field="problem", answer_field="solution",
                         eval_fraction=0.0).problems("train")
    assert [p.answer for p in from_solution] == ["\\frac{\\sqrt{3}}{2}", "\\{1, 2\\}", "(3, \\frac{\\pi}{2})"]
    assert from_solution[0].solution == " We get $\\boxed{\\frac{\\sqrt{3}}{2}}$."
    from_answer = task(MathTask, path=str(path), question_field="problem", eval_fraction=0.0).problems("train")
    assert [p.answer for p in from_answer] == [r["answer"] for r in rows]
    # AIME-style integer answers are accepted
    path = write_jsonl(tmp_path / "aime.jsonl", [{"Problem": "p", "Answer": 204}])
    aime = task(MathTask, path=str(path), question_field="Problem", answer_field="Answer", eval_fraction=0.0)
    assert aime.problems("train")[0].answer == "204"
    with pytest.raises(ValueError, match=r"math500.jsonl:1: no \\boxed\{...\} answer in field 'answer'"):
        task(MathTask, path=str(tmp_path / "math500.jsonl"), question_field="problem", answer_format="boxed",
             eval_fraction=0.0).problems("train")


def test_held_out_split_is_deterministic_and_disjoint(tmp_path: Path) -> None:
    rows = gsm8k_rows(400)
    rows += [dict(r, answer=r["answer"] + " ") for r in rows[:50]]  # duplicated questions
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    a, b = task(path=str(path), eval_fraction=0.2), task(path=str(path), eval_fraction=0.2)
    assert a.problems("train") == b.problems("train") and a.problems("eval") == b.problems("eval")
    train_q = {p.prompt for p in a.problems("train")}
    eval_q = {p.prompt for p in a.problems("eval")}
    assert not train_q & eval_q
    assert len(a.problems("train")) + len(a.problems("eval")) == 450
    assert 40 <= len(eval_q) <= 120  # ~20 % of 400 distinct questions
    # a question's side does not depend on the rest of the file (stable hash of its text)
    subset = write_jsonl(tmp_path / "subset.jsonl", list(reversed(rows[:200])))
    subset_q = {p.prompt for p in task(path=str(subset), eval_fraction=0.0).problems("train")}
    assert {p.prompt for p in task(path=str(subset), eval_fraction=0.2).problems("eval")} == eval_q & subset_q
    # more held out with a larger fraction, and the smaller eval set is contained in it
    bigger = {p.prompt for p in task(path=str(path), eval_fraction=0.5).problems("eval")}
    assert eval_q < bigger


def test_eval_path_and_limits(tmp_path: Path) -> None:
    train_rows, eval_rows = gsm8k_rows(60), gsm8k_rows(20, start=1000)
    train_path = write_jsonl(tmp_path / "train.jsonl", train_rows + eval_rows[:5])  # 5 contaminated
    eval_path = write_jsonl(tmp_path / "test.jsonl", eval_rows)
    t = task(path=str(train_path), eval_path=str(eval_path))
    assert len(t.problems("train")) == 60 and len(t.problems("eval")) == 20
    assert not {p.prompt for p in t.problems("train")} & {p.prompt for p in t.problems("eval")}
    limited = task(path=str(train_path), eval_path=str(eval_path), max_train=7, max_eval=3)
    assert limited.problems("train") == t.problems("train")[:7]
    assert limited.problems("eval") == t.problems("eval")[:3]
    assert task(path=str(train_path), eval_path=str(eval_path), max_eval=0).problems("eval") == []


def test_prompt_template(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [{"question": "What is {x}?  ", "answer": "#### 4"}])
    t = task(path=str(path), eval_fraction=0.0,
             prompt_template="<|user|>Solve: {question} Put the answer in \\boxed{}.\n<|assistant|>\n")
    p = t.problems("train")[0]
    assert p.prompt == "<|user|>Solve: What is {x}? Put the answer in \\boxed{}.\n<|assistant|>\n"
    assert p.solution == "#### 4"  # no leading space after a template ending in whitespace
    assert list(t.corpus(3)) == [p.prompt + p.solution] * 3


# --- malformed records -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"question": "q"}', r"train.jsonl:3: missing field 'answer'"),
        ('{"question": "q", "answer": "#### 1"', r"train.jsonl:3: invalid JSON: .*column"),
        ('{"question": "q", "answer": ["#### 1"]}', r"train.jsonl:3: field 'answer' must be a string, got list"),
        ('{"question": "q", "answer": null}', r"train.jsonl:3: field 'answer' must be a string, got NoneType"),
        ('{"question": "q", "answer": true}', r"train.jsonl:3: field 'answer' must be a string, got bool"),
        ('{"question": 7, "answer": "#### 1"}', r"train.jsonl:3: field 'question' must be a string, got int"),
        ('{"question": "  ", "answer": "#### 1"}', r"train.jsonl:3: field 'question' is empty"),
        ('{"question": "q", "answer": "#### "}', r"train.jsonl:3: empty answer in field 'answer'"),
        ('["q", "#### 1"]', r"train.jsonl:3: expected a JSON object, got list"),
    ],
)
def test_malformed_jsonl_names_file_and_line(tmp_path: Path, raw: str, message: str) -> None:
    path = write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(4), raw_lines={3: raw})
    with pytest.raises(ValueError, match=message):
        task(path=str(path)).problems("train")


def test_malformed_line_numbers_count_blank_lines_and_check_eval_file(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join([json.dumps(gsm8k_rows(1)[0]), "", "   ", '{"question": "q"}']) + "\n")
    with pytest.raises(ValueError, match=r"train.jsonl:4: missing field 'answer'"):
        task(path=str(path)).problems("train")
    (tmp_path / "bad.jsonl").write_bytes(json.dumps(gsm8k_rows(1)[0]).encode() + b"\n\xff\xfe\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: invalid UTF-8"):
        task(path=str(write_jsonl(tmp_path / "ok.jsonl", gsm8k_rows(3))),
             eval_path=str(tmp_path / "bad.jsonl")).problems("train")
    with pytest.raises(ValueError, match=r"marker.jsonl:2: no '####' marker in field 'answer'"):
        task(path=str(write_jsonl(tmp_path / "marker.jsonl", gsm8k_rows(1) + [{"question": "q", "answer": "5"}])),
             answer_format="gsm8k").problems("train")


# --- Parquet and save_to_disk ---------------------------------------------------------------


def test_parquet_and_saved_datasets(tmp_path: Path) -> None:
    import datasets

    rows = gsm8k_rows(40)
    reference = task(path=str(write_jsonl(tmp_path / "train.jsonl", rows)), eval_fraction=0.25)
    ds = datasets.Dataset.from_list(rows)
    ds.to_parquet(str(tmp_path / "train.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"))
    for path in ("train.parquet", "saved"):
        t = task(path=str(tmp_path / path), eval_fraction=0.25)
        assert t.problems("train") == reference.problems("train")
        assert t.problems("eval") == reference.problems("eval")
    # DatasetDict: "train" for path, "test" for eval_path
    test_rows = gsm8k_rows(10, start=500)
    dd = datasets.DatasetDict({"train": ds, "test": datasets.Dataset.from_list(test_rows)})
    dd.save_to_disk(str(tmp_path / "dd"))
    t = task(path=str(tmp_path / "dd"), eval_path=str(tmp_path / "dd"))
    assert len(t.problems("train")) == 40 and len(t.problems("eval")) == 10
    assert t.problems("eval")[0].prompt == reference.problems("train")[0].prompt.replace("case 0", "case 500").replace(
        "Tom has 3 apples and buys 1000", f"Tom has {17 * 500 + 3} apples and buys {1000 + 31 * 500}")
    datasets.DatasetDict({"a": ds, "b": ds}).save_to_disk(str(tmp_path / "ab"))
    with pytest.raises(ValueError, match=r"ab: DatasetDict has splits \['a', 'b'\]"):
        task(path=str(tmp_path / "ab")).problems("train")
    # malformed rows give the row index
    bad = rows[:5] + [{"question": "q", "answer": None}]
    datasets.Dataset.from_list(bad).to_parquet(str(tmp_path / "bad.parquet"))
    with pytest.raises(ValueError, match=r"bad.parquet: row 5: field 'answer' must be a string, got NoneType"):
        task(path=str(tmp_path / "bad.parquet")).problems("train")
    datasets.Dataset.from_list([{"question": "q", "solution": "s"}]).save_to_disk(str(tmp_path / "nofield"))
    with pytest.raises(ValueError, match=r"nofield: row 0: missing field 'answer'"):
        task(path=str(tmp_path / "nofield")).problems("train")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=r"junk.parquet: cannot read Parquet file"):
        task(path=str(tmp_path / "junk.parquet")).problems("train")


# --- answer extraction -------------------------------------------------------------------------


def test_last_boxed_and_final_answer_extraction() -> None:
    assert last_boxed("\\boxed{1} and \\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert last_boxed("\\boxed{\\{1, 2\\}}") == "\\{1, 2\\}"
    assert last_boxed("\\boxed{2} then \\boxed{\\frac{3") == "2"  # unterminated last box
    assert last_boxed("\\boxed 5$") == "5" and last_boxed("\\fbox{7}") == "7" and last_boxed("\\boxedx{1}") is None
    assert last_boxed("nothing") is None and last_boxed(None) is None
    assert extract_final_answer("#### 12 apples\n#### 13") == "12 apples"  # first marker, its line only
    assert extract_final_answer("x \\boxed{3}. Final: #### $1,234.") == "1,234"
    assert extract_final_answer("it is $\\boxed{\\dfrac{3}{4}}$.") == "\\dfrac{3}{4}"
    assert extract_final_answer("5 apples, then 7 more: 12.") == "12"
    assert extract_final_answer("half: 1/2") == "1/2" and extract_final_answer("down to −3") == "-3"
    assert extract_final_answer("") is None and extract_final_answer("no digits") is None
    assert extract_final_answer(None) is None and extract_final_answer("#### ") is None
    assert extract_final_answer("\\boxed{" + "1" * 2000 + "}") is None


# --- rewards -------------------------------------------------------------------------------------


REWARD_CASES = [
    # (completion, gold, expected)
    ("So the answer is \\boxed{0.5}.", "\\frac{1}{2}", 1.0),
    ("#### 1/2", "\\frac{1}{2}", 1.0),
    ("The probability is $\\frac{1}{2}$, i.e. 1/2", "0.5", 1.0),
    ("Therefore $\\boxed{\\dfrac{3}{4}}$", "\\frac{3}{4}", 1.0),
    ("\\boxed{\\tfrac34}", "0.75", 1.0),
    ("#### 12 dollars", "12", 1.0),
    ("She pays 12 dollars", "12", 1.0),
    ("The side is \\boxed{12\\text{ cm}}", "12", 1.0),
    ("The side is $12\\text{ cm}$", "12", 1.0),
    ("#### 1,000", "1000", 1.0),
    ("#### 1000", "1,000", 1.0),
    ("#### $1,234.", "1234", 1.0),
    ("#### -5", "-5", 1.0),
    ("\\boxed{-\\frac{2}{3}}", "-\\frac{2}{3}", 1.0),
    ("#### 5", "-5", 0.0),
    ("\\boxed{50\\%}", "50", 1.0),
    ("#### 50%", "50", 1.0),
    ("\\boxed{3\\sqrt{2}}", "\\sqrt{18}", 1.0),
    ("\\boxed{(3, \\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
    ("\\boxed{\\text{Evelyn}}", "\\text{Evelyn}", 1.0),
    ("#### 72", "72", 1.0),
    ("#### 5 (five)", "5", 1.0),
    ("\\boxed{[0, 1)}", "[0,1)", 1.0),
    ("\\boxed{(0, 1)}", "[0,1)", 0.0),
    ("#### 73", "72", 0.0),
    ("\\boxed{\\frac{1}{3}}", "\\frac{1}{2}", 0.0),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{18}", 0.0),
    ("#### 72\n#### 73", "73", 0.0),  # first marker counts: no credit for hedging
    ("", "7", 0.0),
    ("asdf qwerty", "7", 0.0),
    ("\\boxed{", "7", 0.0),
    ("\\boxed{}}}{{\\frac{", "7", 0.0),
    ("#### \\frac{", "7", 0.0),
    ("\x00\x01\udcff #### ", "7", 0.0),
    ("#### 7", "", 0.0),
]


def test_math_verify_rewards(verifier: MathVerifier) -> None:
    completions, golds, expected = zip(*REWARD_CASES)
    got = verifier.score_many(list(completions), list(golds))
    wrong = [(c, g, e, s) for (c, g, e), s in zip(REWARD_CASES, got) if s != e]
    assert not wrong, f"(completion, gold, expected, got): {wrong}"
    assert verifier.score("\\boxed{0.5}", "\\frac{1}{2}") == 1.0
    assert verifier.score(None, "1") == 0.0  # type: ignore[arg-type]
    assert verifier.score_many([], []) == []
    with pytest.raises(ValueError, match="completions"):
        verifier.score_many(["a"], [])


def test_pathological_answer_times_out_to_zero(verifier: MathVerifier) -> None:
    started = time.monotonic()
    scores = verifier.score_many(["\\boxed{9^{9^{9^{9}}}}", "#### 3"], ["7", "3"])
    elapsed = time.monotonic() - started
    assert scores == [0.0, 1.0]
    # cut at the timeout: 9^9^9^9 would not end at all, so a wide margin still proves the cut and
    # survives a loaded machine
    assert elapsed < TIMEOUT_S + 30, elapsed
    assert verifier.score("\\boxed{\\frac{6}{8}}", "0.75") == 1.0  # still healthy afterwards


def test_tasks_reward_their_own_solutions(tmp_path: Path, verifier: MathVerifier) -> None:
    path = write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(12))
    t = task(path=str(path), verifier=verifier, eval_fraction=0.0)
    train = t.problems("train")
    assert t.reward_many([p.solution for p in train], train) == [1.0] * 12
    assert t.reward(" I think #### 5", train[0]) == 0.0
    assert t.reward("#### " + f"{int(train[0].answer):,}", train[0]) == 1.0
    rows = [{"problem": "p", "answer": "\\frac{1}{2}"}, {"problem": "q", "answer": "\\sqrt{2}"}]
    m = task(MathTask, path=str(write_jsonl(tmp_path / "m.jsonl", rows)), question_field="problem",
             verifier=verifier, eval_fraction=0.0)
    problems = m.problems("train")
    assert m.reward_many([p.solution for p in problems], problems) == [1.0, 1.0]
    assert m.reward_many(["\\boxed{0.5}", "#### 1.41"], problems) == [1.0, 0.0]
    with pytest.raises(ValueError, match="completions"):
        m.reward_many(["x"], problems)
    copy = pickle.loads(pickle.dumps(m))
    assert copy.problems("train") == problems and copy.verifier.timeout_s == verifier.timeout_s


def test_task_pickles_without_its_pool(tmp_path: Path) -> None:
    t = task(path=str(write_jsonl(tmp_path / "t.jsonl", gsm8k_rows(5))), eval_fraction=0.0)
    t.problems("train")
    assert t.verifier is not None
    copy = pickle.loads(pickle.dumps(t))
    assert copy._verifier is None and copy.problems("train") == t.problems("train")
    t.close()


# --- pass@k ---------------------------------------------------------------------------------------


def test_pass_at_k_by_hand() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(10, 3, 3) == pytest.approx(1 - 35 / 120)  # 1 - C(7,3)/C(10,3)
    assert pass_at_k(10, 0, 5) == 0.0 and pass_at_k(4, 3, 2) == 1.0 and pass_at_k(1, 1, 1) == 1.0
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
    for args in ((0, 0, 1), (5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6), (5.0, 2, 1), (True, 1, 1)):
        with pytest.raises(ValueError):
            pass_at_k(*args)
