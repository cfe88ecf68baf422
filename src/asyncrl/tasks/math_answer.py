"""Final-answer extraction and math-verify equivalence for math rewards.

Extraction (:func:`extract_final_answer`) runs in the calling process with cheap, linear-time
string scans: the text after the first ``####`` marker, else the last balanced ``\\boxed{...}``,
else the last number. :func:`check_answer` compares two extracted answers with math-verify; it
runs inside the guarded worker pool of :mod:`asyncrl.tasks.math_reward`, which bounds its time.
"""

from __future__ import annotations

import re

__all__ = ["MAX_ANSWER_CHARS", "check_answer", "extract_final_answer", "last_boxed", "normalize_answer"]

# Extracted answers longer than this score 0: no benchmark answer is that long, and the
# bound keeps a babbling policy from feeding sympy megabytes.
MAX_ANSWER_CHARS = 1000
# Only the last few \boxed occurrences are tried (keeps extraction linear).
_MAX_BOXED_TRIES = 8

_BOX_NAMES = ("\\boxed", "\\fbox")
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?%?")
_TRAILING = " \t\r\n.,;:!"
_LATEX_SPACES = ("\\!", "\\,", "\\;", "\\:", "\\ ", "~")
_LATEX_HINT = re.compile(r"[\\^{}_]|^[(\[]")  # LaTeX commands/groups, or a tuple/interval
_WS = re.compile(r"\s+")


# --- answer extraction (runs in the calling process) ----------------------------------


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, or None.

    Escaped braces (``\\{``, ``\\}``) do not count. ``\\boxed 5`` (no braces) yields ``5``.
    If the last box is unterminated (a truncated completion) the last complete one wins.
    """
    if not isinstance(text, str):
        return None
    starts = sorted(
        (m.start(), m.end()) for name in _BOX_NAMES for m in re.finditer(re.escape(name) + r"(?![A-Za-z])", text)
    )
    for _, end in reversed(starts[-_MAX_BOXED_TRIES:]):
        content = _braced(text, end)
        if content is not None:
            return content
    return None


def _braced(text: str, pos: int) -> str | None:
    """The group right at ``pos`` (after optional spaces): ``{...}`` balanced, or a bare token."""
    n = len(text)
    while pos < n and text[pos] in " \t":
        pos += 1
    if pos >= n:
        return None
    if text[pos] != "{":
        match = re.match(r"[^\s${}]+", text[pos:pos + MAX_ANSWER_CHARS + 1])
        return match.group(0) if match else None
    depth, i = 0, pos
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[pos + 1 : i]
        i += 1
    return None


def _clean(answer: str) -> str | None:
    answer = answer.replace("\u2212", "-").strip()
    answer = answer.replace("**", "").strip()
    for _ in range(3):  # "$18$.", "\$18", "$\frac{1}{2}$"
        answer = answer.strip(_TRAILING)
        if answer.startswith("\\$"):
            answer = answer[2:]
        answer = answer.strip("$").strip()
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return None
    return answer


def extract_final_answer(text: str) -> str | None:
    """The model's final answer as a string, or None (see module docstring for the rules).

    ``"... #### 1,234 apples"`` -> ``"1,234 apples"`` (math-verify reads the number),
    ``"... \\boxed{\\dfrac{3}{4}}."`` -> ``"\\dfrac{3}{4}"``, ``"so it is 12."`` -> ``"12"``.
    Never raises; non-strings and answers over :data:`MAX_ANSWER_CHARS` give None.
    """
    if not isinstance(text, str) or not text:
        return None
    text = text.replace("\u2212", "-")  # Unicode minus
    marker = text.find("####")
    if marker >= 0:
        rest = text[marker + 4 : marker + 4 + 4 * MAX_ANSWER_CHARS].lstrip()
        return _clean(rest.split("\n", 1)[0])
    boxed = last_boxed(text)
    if boxed is not None:
        return _clean(boxed)
    last = None
    for last in _NUMBER.finditer(text):
        pass
    return _clean(last.group(0)) if last is not None else None


def normalize_answer(answer: str) -> str:
    """Cheap, meaning-preserving canonical form used for the exact-match fast path."""
    s = answer.replace("\u2212", "-")
    for token in _LATEX_SPACES:
        s = s.replace(token, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\left", "").replace("\\right", "")
    s = _WS.sub("", s).replace("$", "")
    return s.rstrip(".")


# --- the check itself (runs in a worker) -----------------------------------------------


def _parse(answer: str) -> list:
    from math_verify import parse

    # Plain answers ("1,234", "18 dollars", "50%", "1/2", "5 (five)") read best as
    # expressions; LaTeX-looking ones ("\dfrac{3}{4}", "x^2") and tuples/intervals
    # ("(1, 2)" would read as the number 2) must be parsed as LaTeX. Each falls back to
    # the other reading when it finds nothing.
    latex = "$" + answer + "$"
    first, second = (latex, answer) if _LATEX_HINT.search(answer) else (answer, latex)
    parsed = parse(first, parsing_timeout=None)
    return parsed if parsed else parse(second, parsing_timeout=None)


_GOLD_CACHE: dict[str, list] = {}


def check_answer(pred: str, gold: str) -> bool:
    """math-verify equivalence of two extracted answers; math-verify's own (signal) timeouts
    are off because the worker wraps the whole call in one (see :class:`MathVerifier`)."""
    from math_verify import verify

    gold_parsed = _GOLD_CACHE.get(gold)
    if gold_parsed is None:
        gold_parsed = _parse(gold)
        if len(_GOLD_CACHE) > 4096:
            _GOLD_CACHE.clear()
        _GOLD_CACHE[gold] = gold_parsed
    pred_parsed = _parse(pred)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))
