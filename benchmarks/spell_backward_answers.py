"""What a spell_backward policy's eval answers are made of, from ``asyncrl eval --out DIR``'s
problems.jsonl: the share with an ``<answer>`` tag, spelled exactly, whose first letter is the word's
last one (the first step of reading the word backward), and the share of distinct answers (a policy
collapsing to one answer would give few).

Usage: python benchmarks/spell_backward_answers.py DIR [DIR ...]   (each holding problems.jsonl)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from asyncrl.envs.reasoning_gym import extract


def summarize(folder: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (folder / "problems.jsonl").read_text().splitlines()]
    pairs = [(row["answer"].lower(), extract(c)) for row in rows for c in row["completions"]]
    given = [(want, (got or "").strip().lower()) for want, got in pairs if got is not None]
    return {"answers": len(pairs), "tagged": len(given) / len(pairs),
            "exact": sum(want == got for want, got in given) / len(pairs),
            "first_letter_right": sum(got[:1] == want[:1] for want, got in given) / len(pairs),
            "distinct_answers": len({got for _, got in given}) / len(pairs),
            "mean_reward": sum(r for row in rows for r in row["rewards"]) / len(pairs)}


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        stats = summarize(Path(arg))
        print(arg, " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in stats.items()))
