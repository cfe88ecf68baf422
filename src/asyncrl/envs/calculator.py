"""Arithmetic with a calculator: the ``calculator`` tool and the ``calculator`` task that teaches it
(``task=calculator`` with ``env.tools=[calculator]``; the ``calculator-agent`` preset). Registered as
``calculator`` in asyncrl.tasks.TASKS and among the built-in tools of ``env.tools``
(asyncrl.agents.toolset).

**The tool** (:func:`calculator`) needs no sandbox: it parses the expression and evaluates numbers,
``+ - * / // % **`` and parentheses only, exactly (integers stay exact however large), within bounds
on the exponent, the digits of any intermediate number and the expression's length.

**The task** (:class:`CalculatorTask`): arithmetic on numbers too large for a small model to compute.
"What is 48 * 937?": products of a 2-digit and a 3-digit number, or sums of two 5-digit numbers.
The tiny model cannot compute these in its head; it can call the calculator
(``<tool_call>{"name": "calculator", ...}</tool_call>``), read the result and copy it into its answer
(``#### 44976``). The warm start demonstrates both habits on the train split, tokenized turn by
turn as episodes are, trained on the policy's turns only: a share of the worked
solutions (:data:`TOOL_DEMO_FRAC`) call the tool, the others answer directly, as a model without
tools would. Reinforcement learning then has to find out that calling pays. Splits are by a hash
of the question, as in the arithmetic task (train and eval never share one). The reward is the
exact result after the final answer's first ``####``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import operator
import random
from fractions import Fraction

from asyncrl.tasks.base import Problem, extract_answer
from asyncrl.tasks.chat import render_plain

__all__ = ["TOOL_DEMO_FRAC", "CalculatorTask", "calculator", "tool_call_text"]

MAX_EXPONENT = 64  # |b| in a ** b: 10 ** 10 ** 10 would take the process's memory and time
MAX_DIGITS = 1000  # of any intermediate integer: a chain of bounded powers still grows without end
MAX_CHARS = 1000  # of the expression: the parser itself recurses on deep nesting
_MAX_BITS = int(MAX_DIGITS * 3.33)  # log2(10) bits per digit, near enough
TOOL_DEMO_FRAC = 0.5  # the task's worked solutions that call the calculator; the rest answer directly
N_TRAIN, N_EVAL = 2000, 200

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _bits(value: Fraction) -> int:
    return max(value.numerator.bit_length(), value.denominator.bit_length())


def _check_size(value: Fraction | float | int) -> Fraction | float:
    if isinstance(value, int):  # Fraction // Fraction is an int: back to the exact type
        value = Fraction(value)
    if isinstance(value, Fraction) and _bits(value) > _MAX_BITS:
        raise ValueError(f"a number in the calculation has more than {MAX_DIGITS} digits")
    return value


def _power(base: Fraction | float, exp: Fraction | float) -> Fraction | float:
    if abs(exp) > MAX_EXPONENT:
        raise ValueError(f"exponent {exp} is larger than {MAX_EXPONENT} in absolute value")
    if isinstance(base, Fraction) and isinstance(exp, Fraction) and exp.denominator == 1:
        if base == 0 and exp < 0:
            raise ValueError("division by zero (0 to a negative power)")
        if _bits(base) * abs(int(exp)) > _MAX_BITS + 64:  # refused before it is computed
            raise ValueError(f"the result would have more than {MAX_DIGITS} digits")
        return base ** int(exp)  # exact: 2 ** -3 is 1/8, not 0.125 rounded
    result = float(base) ** float(exp)
    if isinstance(result, complex):  # (-8) ** (1/3) in Python is complex: not arithmetic here
        raise ValueError("a negative number to a fractional power has no real value")
    return result


def _eval(node: ast.AST) -> Fraction | float:
    """The value of one node: exact (Fraction) while only integers and exact divisions are
    involved, float once a float literal or an inexact operation comes in."""
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(node.value) if isinstance(node.value, int) else node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right))
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ValueError("division by zero")
        return _check_size(_BINARY[type(node.op)](left, right))
    what = type(node).__name__
    if isinstance(node, ast.Constant):
        what = f"constant {node.value!r}"
    elif isinstance(node, ast.Name):
        what = f"name {node.id!r}"
    raise ValueError(f"not allowed in an expression: {what} (only numbers, + - * / // % ** and parentheses)")


def _format(value: Fraction | float) -> str:
    if isinstance(value, Fraction):
        if value.denominator == 1:
            return str(value.numerator)
        value = float(value)  # 1/3: a float, as a calculator shows it
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("the result is not a finite number")
    if value.is_integer() and abs(value) < 2 ** 53:
        return str(int(value))
    return repr(value)


# The docstring is what the model reads (the tool's schema): a paragraph of the description is one
# line, since the template shows its line breaks as written; Args lines are joined with spaces.
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly: integers stay exact however large, and a division gives an integer when it is exact, a decimal otherwise.

    Args:
        expression: The arithmetic expression, e.g. "48213 * 9127" or "(3 + 4) ** 2 / 7".
            Allowed: numbers, + - * / // % ** and parentheses.
    """
    if not isinstance(expression, str):
        raise ValueError(f"expression must be a string, not {type(expression).__name__}")
    if len(expression) > MAX_CHARS:
        raise ValueError(f"expression is {len(expression)} characters long; the limit is {MAX_CHARS}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        raise ValueError(f"not an arithmetic expression: {getattr(err, 'msg', None) or err}") from None
    try:
        return _format(_eval(tree))
    except (OverflowError, RecursionError) as err:
        raise ValueError(f"cannot compute: {err}") from None


def tool_call_text(name: str, arguments: dict) -> str:
    """A call in the Qwen/Hermes form the runtime parses."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _question(rng: random.Random) -> tuple[str, int]:
    if rng.random() < 0.5:
        a, b = rng.randint(10, 99), rng.randint(100, 999)
        return f"{a} * {b}", a * b
    a, b = rng.randint(10000, 99999), rng.randint(10000, 99999)
    return f"{a} + {b}", a + b


def _segments(expression: str, answer: int, with_tool: bool) -> tuple[tuple[str, bool], ...]:
    """What follows the prompt, as (text, trained) segments: a tool call, its result (observed, as
    the episode renders it: asyncrl.agents.render.PlainTurns) and the answer; or the answer alone."""
    if not with_tool:
        return ((f" #### {answer}", True),)
    call = tool_call_text("calculator", {"expression": expression})
    return ((f" {call}", True), (f"\ntool: {answer}\nassistant:", False), (f" #### {answer}", True))


class CalculatorTask:
    name = "calculator"

    def __init__(self, cfg=None, seed: int = 0):
        del cfg  # no settings of its own
        rng = random.Random(seed)
        splits: dict[str, list[Problem]] = {"train": [], "eval": []}
        seen: set[str] = set()
        while len(splits["train"]) < N_TRAIN or len(splits["eval"]) < N_EVAL:
            expression, answer = _question(rng)
            if expression in seen:
                continue
            seen.add(expression)
            split = "eval" if int(hashlib.sha1(expression.encode()).hexdigest(), 16) % 10 == 0 else "train"
            if len(splits[split]) >= (N_EVAL if split == "eval" else N_TRAIN):
                continue
            messages = (("user", f"What is {expression}?"),)
            segments = _segments(expression, answer, rng.random() < TOOL_DEMO_FRAC)
            splits[split].append(Problem(
                uid=f"calc-{split}-{len(splits[split])}", prompt=render_plain(messages), answer=str(answer),
                solution="".join(text for text, _ in segments), messages=messages, segments=segments))
        self._splits = {k: tuple(v) for k, v in splits.items()}

    def problems(self, split: str) -> list[Problem]:
        if split not in self._splits:
            raise ValueError(f"calculator: unknown split {split!r} (train, eval)")
        return list(self._splits[split])

    def reward(self, completion: str, problem: Problem) -> float:
        """1.0 when the number after the first ``####`` of the final answer is the exact result."""
        return 1.0 if extract_answer(completion) == problem.answer else 0.0
