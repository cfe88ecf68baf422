"""task.max_prompt_length with task.long_prompts = error | drop | truncate (and the old key)."""

import json

import pytest

from asyncrl.config import load_config
from asyncrl.core.loader import ConfigError
from asyncrl.policy.prompts import encode_problems
from asyncrl.runtime.preflight import check_prompts
from asyncrl.tasks import Problem
from asyncrl.tasks import configured_task

SHORT = {"question": "What is 1 plus 1?", "answer": "#### 2"}


def _cfg(tmp_path, *overrides):
    rows = [dict(SHORT, question=f"What is {i} plus 1?") for i in range(20)]
    rows += [{"question": f"Long {i}: " + "one and " * 40 + "?", "answer": "#### 1"} for i in range(4)]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_config(None, ["task=gsm8k", f"task.path={path}", "task.eval_fraction=0.3",
                              "task.max_prompt_length=40", *overrides])


def _lengths(tok, problems):
    return [len(ids) for ids in encode_problems(tok, problems)]


def test_error_names_the_line_and_the_ways_on(tmp_path, tiny_policy):
    _, tok, _ = tiny_policy
    cfg = _cfg(tmp_path)
    with pytest.raises(ConfigError, match=r"task.max_prompt_length: .*data.jsonl:2\d: prompt is \d+ tokens, over "
                                          r"the limit of 40 \(task.long_prompts=drop or truncate to go on\)"):
        check_prompts(cfg, configured_task(cfg.task), tok, model=None)


def test_drop_removes_long_prompts_and_counts_them(tmp_path, tiny_policy):
    _, tok, _ = tiny_policy
    cfg = _cfg(tmp_path, "task.long_prompts=drop")
    task = configured_task(cfg.task)
    fit = check_prompts(cfg, task, tok, model=None)
    long_uids = {p.uid for s in ("train", "eval") for p in task.problems(s) if p.prompt.startswith("Question: Long")}
    assert len(long_uids) == 4
    assert sum(fit.over.values()) == 4 and not {p.uid for p in fit.train + fit.eval} & long_uids
    assert len(fit.train) + len(fit.eval) == 20
    assert fit.counts() == {"prompts_dropped_train": fit.over["train"], "prompts_dropped_eval": fit.over["eval"]}
    assert fit.message(40) == (f"task: {fit.over['train']} train and {fit.over['eval']} eval prompt(s) longer "
                               "than task.max_prompt_length=40 tokens: dropped (task.long_prompts=drop)")
    assert max(_lengths(tok, fit.train + fit.eval)) <= 40


def test_truncate_keeps_every_prompt_and_the_last_tokens(tmp_path, tiny_policy):
    _, tok, _ = tiny_policy
    cfg = _cfg(tmp_path, "task.long_prompts=truncate")
    task = configured_task(cfg.task)
    fit = check_prompts(cfg, task, tok, model=None)
    assert len(fit.train) + len(fit.eval) == 24 and sum(fit.over.values()) == 4
    assert set(fit.counts()) == {"prompts_truncated_train", "prompts_truncated_eval"}
    long = next(p for p in fit.train + fit.eval if p.prompt.startswith("Question: Long"))
    full = encode_problems(tok, [long])[0]
    cut = encode_problems(tok, [long], 2, max_length=cfg.task.truncate_to)
    assert len(full) > 40 and cut == [full[-40:]] * 2  # left truncation: the end (and "Answer:") stays
    assert tok.decode(cut[0]).endswith("?\nAnswer:")


def test_short_prompts_pass_untouched_and_nothing_is_reported(tiny_policy):
    _, tok, _ = tiny_policy
    problem = Problem("u", "Q: 1 + 1\nA:", "2", " #### 2")
    assert encode_problems(tok, [problem], max_length=40) == encode_problems(tok, [problem])


def test_old_key_still_loads_and_both_keys_are_refused():
    assert load_config(None, ["task.max_prompt_tokens=99"]).task.max_prompt_length == 99
    with pytest.raises(ConfigError, match="task.max_prompt_tokens: renamed to task.max_prompt_length"):
        load_config(None, ["task.max_prompt_tokens=99", "task.max_prompt_length=50"])
    with pytest.raises(ConfigError, match="task.long_prompts"):
        load_config(None, ["task.long_prompts=clip"])
