"""Built-in tools that need no sandbox: ``calculator``. (``python`` is in :mod:`.python_tool`.)"""

from __future__ import annotations

import ast
import operator
from fractions import Fraction

__all__ = ["calculator"]

MAX_EXPONENT = 64  # |b| in a ** b: 10 ** 10 ** 10 would take the process's memory and time
MAX_DIGITS = 1000  # of any intermediate integer: a chain of bounded powers still grows without end
MAX_CHARS = 1000  # of the expression: the parser itself recurses on deep nesting
_MAX_BITS = int(MAX_DIGITS * 3.33)  # log2(10) bits per digit, near enough

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
