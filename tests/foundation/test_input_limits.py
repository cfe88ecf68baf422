"""Size bounds on inputs (docs/errors.md, "Input sizes"): a prompt over ``task.max_prompt_chars`` is
refused when the task is built, before any tokenizer or warm start (a 5 MB prompt hung start-up
for minutes); a JSON line over 16 MiB and a JSON array file over 256 MiB are refused as they are
read. The CLI and the Python API both refuse in seconds, in one line naming ``file:LINE``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from asyncrl.config import load_config
from asyncrl.core.loader import ConfigError
from asyncrl.tasks import configured_task, records
from test_bad_input import GOOD_ROW, _gsm8k, run_case

HUGE = {"question": "x " * 2_500_000, "answer": "#### 1"}  # a 5 MB prompt


def test_a_5mb_prompt_is_refused_by_the_cli_within_seconds(tmp_path):
    """No model given: the run would build the embedded model's warm start on the task's rows first."""
    args = ["train", *_gsm8k(tmp_path, [GOOD_ROW, HUGE, GOOD_ROW])]
    started = time.monotonic()
    proc = run_case(tmp_path, args)  # forked from a process that imported the CLI: the check's own time
    took = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (f"asyncrl: config error: task.max_prompt_chars: {tmp_path}/data.jsonl:2: prompt "
                                   "is 5,000,017 characters, over the bound of 65,536 (task.max_prompt_chars: 32 "
                                   "per token of task.max_prompt_length=2048); refused before tokenizing")
    assert took < 20, took
    assert not (tmp_path / "warm-start-cache").exists() and not (tmp_path / "runs").exists()


API_SCRIPT = textwrap.dedent('''
    import time
    import asyncrl, asyncrl.api

    rows = [{"prompt": "What is 1 + 1?", "answer": "2"}, {"prompt": "x" * 5_000_000, "answer": "1"}] + \\
        [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(10)]
    started = time.monotonic()
    try:
        asyncrl.train(train_dataset=rows, eval_dataset=rows[:1], run__name="r", trainer__steps=1)
    except asyncrl.ConfigError as err:
        print("TOOK", time.monotonic() - started)
        print("LINE", err)
''')


def test_a_5mb_prompt_is_refused_by_the_api_within_seconds(tmp_path):
    (tmp_path / "big.py").write_text(API_SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "ASYNCRL_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "big.py"], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line[:4] in ("TOOK", "LINE"))
    # refused before any warm start (no cache: the assertion below); the bound is loose, for a loaded
    # machine: the old failure mode was a start-up that tokenized the prompt for minutes
    assert float(out["TOOK"]) < 120, out
    assert out["LINE"].startswith("config error: task.max_prompt_chars: ") and ".jsonl:2: prompt is 5,000,000 " \
        "characters, over the bound of 65,536" in out["LINE"], out
    assert not (tmp_path / "cache").exists() and not (tmp_path / "runs" / "r").exists()


def _task(tmp_path: Path, prompt_chars: int, *overrides: str):
    rows = [GOOD_ROW] * 3 + [{"question": "y" * prompt_chars, "answer": "#### 1"}]
    return load_config(None, _gsm8k(tmp_path, rows) + list(overrides)).task


def test_the_bound_follows_max_prompt_length_or_the_setting(tmp_path):
    # "Question: {question}\nAnswer:" adds 18 characters to the question
    with pytest.raises(ConfigError, match=r"^config error: task.max_prompt_chars: .*data.jsonl:4: prompt is 338 "
                                          r"characters, over the bound of 320 \(task.max_prompt_chars: 32 per token "
                                          r"of task.max_prompt_length=10\); refused before tokenizing$"):
        configured_task(_task(tmp_path, 320, "task.max_prompt_length=10"))
    with pytest.raises(ConfigError, match=r"prompt is 338 characters, over the bound of 300 \(task.max_prompt_chars\)"):
        configured_task(_task(tmp_path, 320, "task.max_prompt_chars=300", "task.long_prompts=drop"))  # drop: still refused
    assert len(configured_task(_task(tmp_path, 320, "task.max_prompt_chars=338")).problems("train")) == 4


def test_a_chat_prompt_is_measured_by_its_messages(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "hi"}], "answer": "1"},
            {"messages": [{"role": "system", "content": "s" * 200}, {"role": "user", "content": "u" * 200}],
             "answer": "2"}]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(None, [f"task.path={path}", "task.eval_fraction=0.5", "task.max_prompt_chars=300"])
    with pytest.raises(ConfigError, match=r"chat.jsonl:2: prompt is 4\d\d characters, over the bound of 300"):
        configured_task(cfg.task)


def test_a_json_line_over_the_row_bound_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "ROW_BYTES_BOUND", 1024)
    line = json.dumps({"question": "q", "answer": "#### 1"})
    exact, over = (json.dumps({"question": "q" * (n - len(line) + 1), "answer": "#### 1"}) for n in (1024, 1025))
    assert (len(exact), len(over)) == (1024, 1025)  # the bound counts a line's bytes without its newline
    path = tmp_path / "rows.jsonl"
    path.write_text(f"{line}\n{exact}\n")
    assert len(list(records.load_records(path))) == 2
    path.write_text(f"{line}\n{over}\n")
    with pytest.raises(ValueError, match=r"rows.jsonl:2: a line of more than 0 MiB, over the bound on one row"):
        list(records.load_records(path))
    with path.open("w") as fh:  # no newline at all: refused after reading the bound, not the file
        fh.write(line + "\n" + "x" * 100_000)
    with pytest.raises(ValueError, match="rows.jsonl:2: a line of more than"):
        list(records.load_records(path))


def test_a_json_array_file_over_its_bound_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "ARRAY_FILE_BYTES_BOUND", 100)
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([GOOD_ROW] * 2))
    with pytest.raises(ValueError, match=r"rows.json: a JSON array file of \d+ bytes, over the bound of 0 MiB for one "
                                         r"JSON document; write it as JSON lines"):
        list(records.load_records(path))
    monkeypatch.setattr(records, "ARRAY_FILE_BYTES_BOUND", 10_000)
    assert len(list(records.load_records(path))) == 2
