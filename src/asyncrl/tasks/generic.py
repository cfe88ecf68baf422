"""The generic dataset task (``task=dataset``, or ``task.path`` alone): any rows, the user's rewards.

What a TRL user brings: a JSONL / JSON / Parquet / Arrow file, a ``save_to_disk`` directory or a
cached Hub name (read by :mod:`asyncrl.tasks.records`, nothing downloaded), whose prompt is a string
column or a chat conversation, and reward functions (``reward.funcs``) that read the other columns.

* **The prompt** comes from ``task.messages_field`` or ``task.question_field`` when set, else from
  the first of the columns ``prompt`` (TRL's name), ``messages``, ``question`` a row has. A string
  is used as written (``task.prompt_template`` wraps it only when set); a list of
  ``{role, content}`` messages is a chat prompt (:mod:`asyncrl.tasks.chat`).
* **Every other column** reaches reward functions as a keyword argument (:meth:`row_fields`).
* **No gold answer needed**: a row's ``task.answer_field`` column (``answer``), when it holds a text
  or an integer, is its gold answer (read as the math tasks read it), so the default reward
  (math-verify against it) works; rows without one have none, and then a reward function must be
  given (:meth:`default_reward_unavailable` says so at start-up, in one line).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from asyncrl.tasks.datasets import DatasetConfig, _DatasetTask
from asyncrl.tasks.records import MISSING, get_field

__all__ = ["PROMPT_COLUMNS", "DatasetTask", "PromptDatasetConfig"]

# looked for in this order when no prompt column is named (TRL's first)
PROMPT_COLUMNS = ("prompt", "messages", "question")


@dataclass
class PromptDatasetConfig(DatasetConfig):
    """:class:`DatasetConfig` with the generic task's defaults: the prompt column found in each row,
    the prompt used as written."""

    question_field: str | None = None
    prompt_template: str = "{question}"
    found_in_records: ClassVar[tuple[str, ...]] = ("question_field",)


class DatasetTask(_DatasetTask):
    """Prompts (plain or chat) from any rows; gold answers optional (see the module docstring)."""

    name = "dataset"
    config_type = PromptDatasetConfig

    def prompt_column(self, where: str, record: dict) -> str:
        named = self.cfg.messages_field or self.cfg.question_field
        if named is not None:
            return named
        found = next((c for c in PROMPT_COLUMNS if c in record), None)
        if found is None:
            columns = ", ".join(map(str, record)) or "none"
            raise ValueError(f"{where}: no prompt column (looked for {', '.join(PROMPT_COLUMNS)}; the row has: "
                             f"{columns}); name it: task.question_field=<column>")
        return found

    def _problem(self, where: str, record: dict) -> tuple:
        """A row whose answer column is absent, null or not an answer text (a list of test cases,
        say) has no gold answer: its prompt alone, with an empty gold and solution."""
        value = get_field(record, self.cfg.answer_field)
        has_gold = isinstance(value, str) and value.strip() or isinstance(value, int) and not isinstance(value, bool)
        if not has_gold:
            key, prompt, reference = self._prompt_of(where, record)
            if value is not MISSING or reference is None:
                return key, prompt, "", "", False
        return super()._problem(where, record)

    def row_fields(self, record: dict) -> dict:
        """Every column except the prompt's (TRL passes the others to reward functions)."""
        try:
            column = self.prompt_column("", record)
        except ValueError:
            return record
        return {k: v for k, v in record.items() if k != column}

    def default_reward_unavailable(self) -> str | None:
        """Why the default reward (the task's correctness check) cannot score this data, or None:
        it needs a gold answer in every row."""
        rows = [*self.problems("train"), *self.problems("eval")]
        missing = next((p for p in rows if not p.answer), None)
        if missing is None:
            return None
        return (f"{self.source(missing.uid)}: no answer in column {self.cfg.answer_field!r} and no reward "
                "function to score without one; give one: reward.funcs=[my_module:my_reward] (docs/rewards.md), "
                "or name the answer column: task.answer_field=<column>")
