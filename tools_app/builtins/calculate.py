"""``calculate`` (T5): arithmetic without ``eval``.

The expression is parsed with :func:`ast.parse` and walked by a small evaluator that
knows numbers, ``+ - * / // % **``, unary signs, parentheses and a whitelist of math
functions and constants. Any other node -- names, attributes, calls of anything else,
lambdas, comprehensions, subscripts, strings -- is refused, so nothing the model
writes can reach Python objects. ``%`` and ``//`` follow Python (floored) semantics.

The evaluator runs on the event loop and cannot be interrupted by the tool timeout,
so every operation that could take long is bounded *before* it runs: input length,
nesting depth, integer size (powers, products, factorials) and ``round`` digits.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from agents.engine.interfaces import READ_ONLY, RunContext
from tools_app.registry import TOOL_ERROR, Tool, ToolError

MAX_EXPRESSION_CHARS = 1_000
MAX_DEPTH = 200
# Integers stay exact up to ~1,200 decimal digits; beyond that is not arithmetic a
# chat needs, and bigger products/powers are where the CPU time would go.
MAX_INT_BITS = 4_096
MAX_FACTORIAL = 500
MAX_ROUND_DIGITS = 100

Number = int | float


def _error(message: str) -> ToolError:
    return ToolError(TOOL_ERROR, message)


def _check_size(value: Number) -> Number:
    if isinstance(value, complex):
        raise _error("The result is not a real number (e.g. a fractional power of a negative number).")
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise _error(f"The result is too large (more than {MAX_INT_BITS} bits).")
    elif math.isnan(value):
        raise _error("The result is not a number (NaN).")
    elif math.isinf(value):
        raise _error("The result is too large (floating-point overflow).")
    return value


# ------------------------------------------------------------------------ operations


def _multiply(left: Number, right: Number) -> Number:
    if (
        isinstance(left, int)
        and isinstance(right, int)
        and left.bit_length() + right.bit_length() > MAX_INT_BITS
    ):
        raise _error(f"The result is too large (more than {MAX_INT_BITS} bits).")
    return left * right


def _divide(left: Number, right: Number) -> Number:
    if right == 0:
        raise _error("Division by zero.")
    return left / right


def _floor_divide(left: Number, right: Number) -> Number:
    if right == 0:
        raise _error("Division by zero.")
    return left // right


def _modulo(left: Number, right: Number) -> Number:
    if right == 0:
        raise _error("Modulo by zero.")
    return left % right


def _power(base: Number, exponent: Number) -> Number:
    # An integer power has at least exponent * (bits(base) - 1) bits: refuse before
    # computing it, so 9**9**9 costs microseconds, not minutes.
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and exponent > 0
        and exponent * (base.bit_length() - 1) > MAX_INT_BITS
    ):
        raise _error(f"The result is too large (more than {MAX_INT_BITS} bits).")
    if base == 0 and exponent < 0:
        raise _error("Division by zero (zero to a negative power).")
    result: Number = base**exponent
    return result


def _factorial(value: Number) -> int:
    if not isinstance(value, int) or value < 0:
        raise _error("factorial() needs a non-negative integer.")
    if value > MAX_FACTORIAL:
        raise _error(f"factorial() is limited to n <= {MAX_FACTORIAL}.")
    return math.factorial(value)


def _round(value: Number, digits: int | None = None) -> Number:
    if digits is not None and isinstance(digits, int) and abs(digits) > MAX_ROUND_DIGITS:
        raise _error(f"round() digits must be between -{MAX_ROUND_DIGITS} and {MAX_ROUND_DIGITS}.")
    return round(value) if digits is None else round(value, digits)


def _log(value: Number, base: Number | None = None) -> float:
    return math.log(value) if base is None else math.log(value, base)


BINARY_OPERATORS: dict[type[ast.operator], Callable[[Any, Any], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: _multiply,
    ast.Div: _divide,
    ast.FloorDiv: _floor_divide,
    ast.Mod: _modulo,
    ast.Pow: _power,
}

FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs,
    "round": _round,
    "min": min,
    "max": max,
    "pow": _power,
    "sqrt": math.sqrt,
    "cbrt": math.cbrt,
    "exp": math.exp,
    "log": _log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "atan2": math.atan2,
    "sinh": math.sinh,
    "cosh": math.cosh,
    "tanh": math.tanh,
    "degrees": math.degrees,
    "radians": math.radians,
    "hypot": math.hypot,
    "floor": math.floor,
    "ceil": math.ceil,
    "trunc": math.trunc,
    "factorial": _factorial,
    "gcd": math.gcd,
}

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}

_REFUSED_NAMES = {
    ast.Attribute: "attribute access",
    ast.Subscript: "subscripts",
    ast.Lambda: "lambdas",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions",
    ast.Compare: "comparisons",
    ast.BoolOp: "boolean operators",
    ast.IfExp: "conditional expressions",
    ast.NamedExpr: "assignments",
    ast.JoinedStr: "strings",
}


# ------------------------------------------------------------------------- evaluator


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression; :class:`ToolError` for anything else."""
    text = expression.strip()
    if not text:
        raise _error("The expression is empty.")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise _error(f"The expression is too long (limit {MAX_EXPRESSION_CHARS} characters).")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        raise _error(
            f"Invalid expression: syntax error{where}. Use numbers, + - * / // % ** and ( )."
        ) from None
    except (ValueError, RecursionError, MemoryError):
        raise _error("Invalid expression: it could not be parsed.") from None
    return _check_size(_evaluate_node(tree.body, 0))


def _evaluate_node(node: ast.expr, depth: int) -> Number:
    if depth > MAX_DEPTH:
        raise _error(f"The expression is nested too deeply (limit {MAX_DEPTH}).")
    if isinstance(node, ast.Constant):
        value = node.value
        # bool is an int subclass: True + 1 is not arithmetic the model meant.
        if isinstance(value, int | float) and not isinstance(value, bool):
            return _check_size(value)
        raise _error(f"Invalid expression: only numbers are allowed, not {type(value).__name__} values.")
    if isinstance(node, ast.BinOp):
        operation = BINARY_OPERATORS.get(type(node.op))
        if operation is None:
            hint = " (use ** for powers)" if isinstance(node.op, ast.BitXor) else ""
            raise _error(f"Invalid expression: the operator {type(node.op).__name__} is not allowed{hint}.")
        left = _evaluate_node(node.left, depth + 1)
        right = _evaluate_node(node.right, depth + 1)
        return _check_size(_apply(operation, left, right))
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate_node(node.operand, depth + 1)
        if isinstance(node.op, ast.USub):
            return -operand
        if isinstance(node.op, ast.UAdd):
            return +operand
        raise _error(f"Invalid expression: the operator {type(node.op).__name__} is not allowed.")
    if isinstance(node, ast.Call):
        return _check_size(_call(node, depth))
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise _error(
            f"Invalid expression: unknown name {node.id!r}. Known constants: {', '.join(CONSTANTS)}."
        )
    what = _REFUSED_NAMES.get(type(node), type(node).__name__)
    raise _error(f"Invalid expression: {what} cannot be used, only arithmetic.")


def _call(node: ast.Call, depth: int) -> Number:
    if not isinstance(node.func, ast.Name):
        what = _REFUSED_NAMES.get(type(node.func), "calling the result of an expression")
        raise _error(f"Invalid expression: {what} cannot be used, only arithmetic.")
    name = node.func.id
    if name not in FUNCTIONS:
        raise _error(f"Invalid expression: only these functions can be called: {', '.join(FUNCTIONS)}.")
    if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
        raise _error(f"Invalid expression: pass the arguments of {name}() by position.")
    args = [_evaluate_node(arg, depth + 1) for arg in node.args]
    try:
        return FUNCTIONS[name](*args)
    except ToolError:
        raise
    except TypeError:
        raise _error(f"{name}() got the wrong number or kind of arguments.") from None
    except ValueError:
        raise _error(f"Math domain error in {name}(): an argument is out of range.") from None
    except OverflowError:
        raise _error(f"The result of {name}() is too large.") from None
    except ZeroDivisionError:
        raise _error(f"Division by zero in {name}().") from None


def _apply(operation: Callable[[Any, Any], Number], left: Number, right: Number) -> Number:
    try:
        return operation(left, right)
    except OverflowError:
        raise _error("The result is too large (floating-point overflow).") from None
    except ZeroDivisionError:
        raise _error("Division by zero.") from None


def format_number(value: Number) -> str:
    """``19`` for whole numbers (also 19.0), the shortest exact form otherwise."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


class CalculateTool(Tool):
    """Evaluates an arithmetic expression safely."""

    name = "calculate"
    description = (
        "Evaluate an arithmetic expression exactly, instead of doing maths in your head. "
        "Supports numbers, + - * / // % ** (power), parentheses, the constants pi, e, tau "
        f"and the functions {', '.join(FUNCTIONS)}. Example: (2 + 3) * sqrt(16) - 2**10 % 7."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_EXPRESSION_CHARS,
                "description": "The expression, e.g. (2+3)*4-1 or round(100 * 1.07**5, 2).",
            }
        },
        "required": ["expression"],
        "additionalProperties": False,
    }
    traits = READ_ONLY
    timeout = 5.0
    max_output_chars = 2_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        return format_number(evaluate(args["expression"]))
