"""A reasoning-gym problem with retries: ``task=reasoning_gym env.name=rg_retry`` (docs/agents.md).

The first turn is the single-turn task's: the row's prompt, an answer between ``<answer>`` and
``</answer>`` (a turn ends there). The environment scores each answer with reasoning-gym's scorer
(asyncrl.tasks.reasoning_gym.score, the task's own reward). A right answer (score 1) ends the
episode. Otherwise the observation gives the scorer's verdict and asks for another try: "Your
answer 12 is not correct (score 0.00). Try again ...", or, for a turn without an answer, how to
write one. ``env.max_turns`` bounds the tries.

**Reward: the final answer's, once.** The environment's per-turn rewards are 0. The episode is
scored by the reward functions on its last assistant turn, as a single completion is: by default
the task's reward, reasoning-gym's score of the final answer. So a wrong first try followed by a
right one scores 1, the same reward functions serve single-turn and retry runs, and no try is
counted twice (a per-turn score plus the task's score of the final turn would be). To pay for
solving in fewer tries, add a reward function that reads its ``turns`` keyword argument
(docs/rewards.md).
"""

from __future__ import annotations

from asyncrl.tasks.reasoning_gym import extract, score

__all__ = ["RetryEnv"]

SOLVED = 1.0 - 1e-9  # a score this high is a right answer (reasoning-gym gives 1.0)


class RetryEnv:
    """One reasoning-gym row (``rg_entry``, ``rg_config``: asyncrl.tasks.reasoning_gym) per episode."""

    stop = ("</answer>",)  # a turn ends with its answer

    def __init__(self):
        self.entry: dict = {}
        self.config: dict = {}
        self.tries = 0

    def reset(self, row: dict):
        if "rg_entry" not in row:
            raise ValueError(f"row {row.get('uid')!r} has no rg_entry column: env.name=rg_retry plays "
                             "task.name=reasoning_gym rows")
        self.entry, self.config = row["rg_entry"], row.get("rg_config") or {}
        self.tries = 0
        return row["prompt"]

    def step(self, action: str):
        self.tries += 1
        value = score(action, self.entry, self.config)
        info = {"score": value, "tries": self.tries, "solved": value >= SOLVED}
        if info["solved"]:
            return "", 0.0, True, info
        answer = extract(action)
        if answer is None:
            return ("No answer found. Write your final answer between <answer> and </answer>, and try again.",
                    0.0, False, info)
        shown = answer if len(answer) <= 200 else answer[:200] + "…"
        return (f"Your answer {shown} is not correct (score {value:.2f}). Try again: think it over and give "
                "your final answer between <answer> and </answer>."), 0.0, False, info
