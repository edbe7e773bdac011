"""A safe arithmetic evaluator for the calculator tool: parsed with ``ast``, never ``eval``.

Only numbers, + - * / // % **, parentheses and a few math functions are
allowed; sizes are bounded so a model cannot make it burn CPU or memory.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from typing import Any

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 1000
MAX_RESULT_DIGITS = 1000

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "floor": math.floor,
    "ceil": math.ceil,
    "log": math.log,
    "exp": math.exp,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_MAX_BITS = int(MAX_RESULT_DIGITS * 3.33)


class CalculatorError(ValueError):
    """The expression is not allowed arithmetic, or its value is out of bounds."""


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression such as ``(3 + 4) * 12 / 5``."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    # People write 1,234 and 2^3; the model copies them. (A comma before
    # exactly three digits is a thousands separator; others separate arguments.)
    text = _THOUSANDS.sub("", expression).replace("^", "**").replace("×", "*").replace("÷", "/")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise CalculatorError(f"not an arithmetic expression: {expression!r}") from None
    try:
        return _eval(tree.body)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except (OverflowError, ValueError, TypeError) as exc:
        if isinstance(exc, CalculatorError):
            raise
        raise CalculatorError(str(exc)) from None


def _check(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CalculatorError("only numbers are allowed")
    if isinstance(value, int) and value.bit_length() > _MAX_BITS:
        raise CalculatorError("result too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result is not a finite number")
    return value


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant):
        return _check(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise CalculatorError(f"exponent larger than {MAX_EXPONENT}")
            # Refuse before computing: a big integer to a big power is slow to build.
            if isinstance(left, int) and left.bit_length() * abs(right) > _MAX_BITS:
                raise CalculatorError("result too large")
        return _check(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
        and 0 < len(node.args) <= 10
    ):
        return _check(_FUNCTIONS[node.func.id](*(_eval(a) for a in node.args)))
    raise CalculatorError(f"not allowed in an arithmetic expression: {ast.unparse(node)!r}")


def format_number(value: int | float) -> str:
    """A number as the model should read it: integers without '.0', floats to 12 digits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.12g}"
    return str(value)


def calculator(expression: str) -> str:
    """The tool: the formatted value, or 'error: ...' the model can read and correct."""
    try:
        return format_number(evaluate(expression))
    except CalculatorError as exc:
        return f"error: {exc}"
