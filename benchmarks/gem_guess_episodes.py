"""What a GuessTheNumber-v0-easy (1..10) policy's eval episodes are made of, from ``asyncrl eval --out DIR``'s
problems.jsonl: the share ending in a malformed action (GEM's -0.1, which ends the episode), won
(reward 1), and, over the guesses after the first, the share inside the range the game's hints
still leave (hint-following; a policy that ignores the hints still lands inside it by chance).

Usage: python benchmarks/gem_guess_episodes.py DIR [DIR ...]   (each holding problems.jsonl)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

GUESS = re.compile(r"\\boxed\{(\d+)\}")
HINT = re.compile(r"you guessed (\d+), and the target number is (higher|lower) than")
LOW, HIGH = 1, 10  # GuessTheNumber-v0-easy's range


def guesses_in_range(episode: str) -> tuple[int, int]:
    """(guesses after the first that lie inside the range the hints before them leave, such guesses)."""
    low, high, inside, later = LOW, HIGH, 0, 0
    turns = episode.split("\nuser: ")
    for i, turn in enumerate(turns):
        hint = HINT.search(turn)
        if hint:
            guessed = int(hint.group(1))
            low, high = (max(low, guessed + 1), high) if hint.group(2) == "higher" else (low, min(high, guessed - 1))
        if i == 0:
            continue
        found = GUESS.findall(turn.split("assistant:", 1)[-1]) if "assistant:" in turn else []
        if found:
            later += 1
            inside += low <= int(found[-1]) <= high
    return inside, later


def summarize(folder: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (folder / "problems.jsonl").read_text().splitlines()]
    rewards = [r for row in rows for r in row["rewards"]]
    counts = [guesses_in_range(c) for row in rows for c in row["completions"]]
    later = sum(n for _, n in counts)
    return {"episodes": len(rewards), "eval_reward": sum(rewards) / len(rewards),
            "malformed_end": sum(abs(r + 0.1) < 1e-6 for r in rewards) / len(rewards),
            "won": sum(r >= 1 - 1e-6 for r in rewards) / len(rewards),
            "later_guesses_in_hint_range": sum(i for i, _ in counts) / later if later else float("nan")}


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        stats = summarize(Path(arg))
        print(arg, " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in stats.items()))
