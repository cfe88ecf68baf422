"""Size bounds on what a task reads, checked before anything costly looks at it.

A prompt of megabytes is tokenized in seconds to minutes (a long run of characters with no space
is one pre-token, which BPE merges in more than linear time), and the embedded model's warm start
trains on it whole: a 5 MB prompt hung start-up with no output. So the task's prompts are measured
in characters when the task is built, before any tokenizer or model exists, and one over
``task.max_prompt_chars`` refuses the run naming its ``file:LINE``.

The default bound is :data:`CHARS_PER_TOKEN` characters per token of ``task.max_prompt_length``:
more than any tokenizer's average token (about 4 characters of English text, 1 of digits split one
by one), so a prompt over it is over the token limit too, and refusing it changes no outcome of
``task.long_prompts=error``; it only comes before the tokenizer instead of after minutes of it.
"""

from __future__ import annotations

from asyncrl.config.task import CHARS_PER_TOKEN, prompt_chars_bound
from asyncrl.tasks.base import Task

__all__ = ["CHARS_PER_TOKEN", "check_prompt_sizes", "prompt_chars_bound"]


def check_prompt_sizes(task: Task, bound: int, why: str) -> None:
    """Every prompt of both splits has at most ``bound`` characters (a conversation: its plain
    rendering, which holds every message); else ValueError naming the first one's source (``file:LINE``
    for a file task) and the bound, ``why`` saying where the bound comes from. Linear in the text's size."""
    source = getattr(task, "source", lambda uid: f"problem {uid}")
    for split in ("train", "eval"):
        for problem in task.problems(split):
            size = len(problem.prompt)
            if size > bound:
                raise ValueError(f"{source(problem.uid)}: prompt is {size:,} characters, over the bound of "
                                 f"{bound:,} ({why}); refused before tokenizing")
