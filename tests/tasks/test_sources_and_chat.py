"""Datasets the way users hold them (JSONL, JSON, Parquet, Arrow, save_to_disk, a Hub name in the
local cache) and chat-format rows (messages rendered with a chat template or the plain fallback)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from asyncrl.config import load_config
from asyncrl.core.loader import ConfigError
from asyncrl.policy.prompts import encode_problems, encode_prompt, prompt_of
from asyncrl.tasks import build_task
from asyncrl.tasks.chat import render_plain
from asyncrl.tasks import configured_task

ROWS = [{"question": f"What is {i} plus {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(12)]
CHAT_TEMPLATE = ("{% for m in messages %}<bos>[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}[assistant]{% endif %}")


def _chat_rows(n: int = 12, system: str = "Answer with #### N.") -> list[dict]:
    return [{"messages": [{"role": "system", "content": system},
                          {"role": "user", "content": f"What is {i} plus {i}?"}],
             "answer": f"#### {2 * i}"} for i in range(n)]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _problems(path, **extra):
    task = build_task("gsm8k", {"path": str(path), "eval_fraction": 0.25, **extra})
    return task.problems("train") + task.problems("eval")


# --- formats ----------------------------------------------------------------------------------


def test_every_local_format_gives_the_same_problems(tmp_path):
    import datasets

    reference = _problems(_write_jsonl(tmp_path / "d.jsonl", ROWS))
    (tmp_path / "d.json").write_text(json.dumps(ROWS))  # one JSON array
    ds = datasets.Dataset.from_list(ROWS)
    ds.to_parquet(str(tmp_path / "d.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"))
    arrow = next((tmp_path / "saved").glob("*.arrow"))  # an Arrow file as datasets writes them
    shutil.copy(arrow, tmp_path / "d.arrow")
    datasets.DatasetDict({"train": ds, "test": ds.select(range(3))}).save_to_disk(str(tmp_path / "dict"))
    for name in ("d.json", "d.parquet", "saved", "d.arrow"):
        assert _problems(tmp_path / name) == reference, name
    # a DatasetDict: train from "train", eval from its "test" split (eval_split) instead of a hold-out
    task = build_task("gsm8k", {"path": str(tmp_path / "dict"), "eval_split": "test"})
    assert [p.answer for p in task.problems("eval")] == ["0", "2", "4"]
    assert len(task.problems("train")) == 9  # the 3 eval questions are not trained on
    with pytest.raises(ValueError, match=r"dict: no split 'dev' \(splits: train, test\)"):
        build_task("gsm8k", {"path": str(tmp_path / "dict"), "split": "dev"}).problems("train")


def _fake_hub_cache(cache: Path, tmp_path: Path) -> None:
    """What ``load_dataset("openai/gsm8k", "main")`` leaves in the datasets cache, built offline: the
    same Arrow/JSON layout, written by datasets itself for a local file, moved under the Hub name."""
    import datasets

    built = tmp_path / "built"
    datasets.load_dataset("json", data_files=str(_write_jsonl(tmp_path / "src.jsonl", ROWS)), cache_dir=str(built))
    source = next(built.glob("json/*/0.0.0/*/"))
    target = cache / "openai___gsm8k" / "main" / "0.0.0" / "0123abcd"
    shutil.copytree(source, target)
    (target / "json-train.arrow").rename(target / "gsm8k-train.arrow")
    info = json.loads((target / "dataset_info.json").read_text())
    info.update(config_name="main", builder_name="gsm8k", dataset_name="gsm8k")
    (target / "dataset_info.json").write_text(json.dumps(info))


def test_hub_name_reads_the_local_cache_offline_or_says_it_is_missing(tmp_path, monkeypatch):
    import datasets

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    cfg = load_config(None, ["task=gsm8k", "task.path=openai/gsm8k"])  # a Hub name passes validation
    with pytest.raises(ConfigError) as err:
        configured_task(cfg.task)
    message = str(err.value)
    assert "\n" not in message and "openai/gsm8k: not a local file and not in the local datasets cache" in message
    assert "task.path to a local .jsonl" in message
    _fake_hub_cache(cache, tmp_path)
    reference = _problems(_write_jsonl(tmp_path / "d.jsonl", ROWS))
    assert _problems("openai/gsm8k") == reference
    assert _problems("openai/gsm8k", subset="main") == reference
    with pytest.raises(ValueError, match="subset 'socratic' is not in the local datasets cache"):
        _problems("openai/gsm8k", subset="socratic")


# --- chat rows --------------------------------------------------------------------------------


def test_chat_rows_keep_the_conversation_and_render_plainly_without_a_template(tmp_path, tiny_policy):
    _, tok, _ = tiny_policy
    problems = _problems(_write_jsonl(tmp_path / "chat.jsonl", _chat_rows()), messages_field="messages")
    first = problems[0]
    assert first.messages[0] == ("system", "Answer with #### N.")
    assert first.prompt == f"system: Answer with #### N.\nuser: {first.messages[1][1]}\nassistant:"
    assert first.solution == f" #### {first.answer}"
    # the embedded tokenizer has no chat template: the plain rendering is what the policy sees
    assert getattr(tok, "chat_template", None) is None
    assert encode_problems(tok, [first]) == [tok(first.prompt)["input_ids"]]


def test_chat_rows_use_the_tokenizer_chat_template_with_the_system_prompt(tmp_path, tiny_policy):
    _, base, _ = tiny_policy
    tok = copy.deepcopy(base)
    tok.chat_template = CHAT_TEMPLATE
    problem = _problems(_write_jsonl(tmp_path / "chat.jsonl", _chat_rows()), messages_field="messages")[0]
    text = tok.decode(encode_prompt(tok, prompt_of(problem)))
    assert text == f"<bos>[system] Answer with #### N.\n<bos>[user] {problem.messages[1][1]}\n[assistant]"
    # a plain prompt is still one user turn; chat_template=False falls back to the plain rendering
    assert tok.decode(encode_prompt(tok, "hi")) == "<bos>[user] hi\n[assistant]"
    assert encode_prompt(tok, problem.messages, chat_template=False) == base(render_plain(problem.messages))["input_ids"]


def test_prompt_column_of_messages_and_trailing_assistant_answer(tmp_path):
    # TRL-style rows: "prompt" holds the conversation; the answer comes from a column, or else from
    # a trailing assistant message (which is never part of the prompt)
    rows = [{"prompt": [{"role": "user", "content": f"{i} plus {i}?"},
                        {"role": "assistant", "content": f"#### {2 * i}"}]} for i in range(8)]
    problems = _problems(_write_jsonl(tmp_path / "trl.jsonl", rows), question_field="prompt")
    assert all(p.messages == (("user", p.messages[0][1]),) for p in problems)
    assert sorted(int(p.answer) for p in problems) == [0, 2, 4, 6, 8, 10, 12, 14]
    with_column = [dict(r, answer="#### 99") for r in rows]
    problems = _problems(_write_jsonl(tmp_path / "col.jsonl", with_column), question_field="prompt")
    assert {p.answer for p in problems} == {"99"}


@pytest.mark.parametrize("messages, message", [
    ("plain text", r"chat.jsonl:1: field 'messages' must be a non-empty list of \{role, content\} messages"),
    ([{"role": "user", "content": ["an", "image"]}], r"chat.jsonl:1: field 'messages' item 0: 'content' must be a string"),
    ([{"content": "hi"}], r"chat.jsonl:1: field 'messages' item 0: 'role' must be a non-empty string"),
    ([{"role": "assistant", "content": "#### 1"}], r"chat.jsonl:1: field 'messages' holds only assistant messages"),
])
def test_bad_chat_rows_name_the_line(tmp_path, messages, message):
    path = _write_jsonl(tmp_path / "chat.jsonl", [{"messages": messages, "answer": "#### 1"}] * 4)
    with pytest.raises(ValueError, match=message):
        _problems(path, messages_field="messages")
