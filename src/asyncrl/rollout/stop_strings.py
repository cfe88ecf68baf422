"""Stop strings for an engine that sees only token ids (vLLM built with ``skip_tokenizer_init``:
it never detokenizes, so it cannot check ``SamplingParams.stop`` and would ignore it silently).

A stop string that is one token of the vocabulary (``<|im_end|>``, ``<|eom_id|>``) becomes a stop
token id, which the engine checks itself. Every stop string is also checked here on the ids the
engine returned: the first token whose inclusion makes the decoded text contain a stop ends the
row, kept (token-in/token-out: what was sampled stays as sampled), and the tokens the engine
generated past it are dropped. Only the last tokens are decoded at each position, enough to hold
the longest stop string (every token decodes to at least one character)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopCut"]


class StopCut:
    def __init__(self, tokenizer, stops: Sequence[str]):
        self.tokenizer = tokenizer
        self.stops = tuple(dict.fromkeys(s for s in stops if s))
        self.window = max((len(s) for s in self.stops), default=0) + 2
        self.token_ids = [i for i in map(self._one_token, self.stops) if i is not None]
        # strings the engine cannot stop at by itself: generation runs past them to the chunk's end
        self.multi_token = any(self._one_token(s) is None for s in self.stops)

    def _one_token(self, stop: str) -> int | None:
        ids = self.tokenizer(stop, add_special_tokens=False)["input_ids"]
        if len(ids) == 1 and self.tokenizer.decode(ids, skip_special_tokens=False) == stop:
            return ids[0]
        return None

    def end(self, tokens: Sequence[int], start: int) -> int | None:
        """The length to cut ``tokens`` to: just past the first token at or after ``start`` that
        completes a stop string; None when none does."""
        if not self.stops:
            return None
        for j in range(start, len(tokens)):
            tail = self.tokenizer.decode(list(tokens[max(0, j + 1 - self.window):j + 1]), skip_special_tokens=False)
            if any(stop in tail for stop in self.stops):
                return j + 1
        return None
