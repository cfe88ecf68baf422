"""The best score one fixed answer gets on a spell_backward configuration's eval split: a check that
a rise in eval reward is not the policy collapsing to one answer (as leg_counting's runs did).

spell_backward's scorer gives 1/len(word) for each position where the answer's letter equals the
reversed word's (lower-cased), 1 for the exact word, and nothing for letters past the word's end. A
fixed answer's credit therefore adds up position by position, and the best one takes at each position
the letter that earns most over the eval words; the script scores it with the task's own reward.

Usage: python benchmarks/rg_constant_baseline.py [MIN_LEN MAX_LEN SIZE]   (default 3 5 5000)
"""

from __future__ import annotations

import sys
from collections import defaultdict

from asyncrl.envs.reasoning_gym import ReasoningGymTask


def best_constant(words: list[str]) -> str:
    """At each position, the letter with the most credit (1/len(word) per eval word matching there)."""
    letters = []
    for i in range(max(map(len, words))):
        credit: dict[str, float] = defaultdict(float)
        for word in words:
            if i < len(word):
                credit[word[i]] += 1 / len(word)
        letters.append(max(sorted(credit), key=credit.__getitem__))  # the longest word reaches every i
    return "".join(letters)


def main(min_len: int = 3, max_len: int = 5, size: int = 5000) -> None:
    task = ReasoningGymTask({"rg_tasks": ["spell_backward"], "rg_size": size, "rg_system_prompt": "",
                             "rg_configs": {"spell_backward": {"min_word_len": min_len, "max_word_len": max_len}}})
    evals = task.problems("eval")
    answer = best_constant([p.answer.lower() for p in evals])
    score = sum(task.reward(f" <answer>{answer}</answer>", p) for p in evals) / len(evals)
    print(f"spell_backward {min_len}-{max_len} letters, {len(evals)} eval words: the best fixed answer "
          f"{answer!r} scores {score:.4f}")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
