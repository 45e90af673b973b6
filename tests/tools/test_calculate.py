"""calculate (T5): correct arithmetic, and no way out of arithmetic (no eval)."""

from __future__ import annotations

import ast
import math
from typing import Any

import pytest

from agents.engine.interfaces import READ_ONLY, RunContext
from agents.engine.types import ToolCallPart, ToolResultPart
from tools_app.builtins.calculate import MAX_EXPRESSION_CHARS, CalculateTool, evaluate
from tools_app.registry import INVALID_ARGUMENTS, TOOL_ERROR, Registry, RegistryToolExecutor, ToolError

TOOLS = RegistryToolExecutor(Registry("builtin", [CalculateTool()]), role="viewer")


async def calculate(expression: Any) -> ToolResultPart:
    return await TOOLS.execute(ToolCallPart("c1", "calculate", {"expression": expression}), RunContext())


def test_t5_calculate_is_read_only_and_low_risk() -> None:
    assert CalculateTool.traits == READ_ONLY
    assert CalculateTool.traits.risk == "low"


# ------------------------------------------------------------------------ results


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("(2 + 3) * 4 - 1", "19"),  # MicroClaw's own example
        ("2 + 3 * 4", "14"),
        ("2 * 3 + 4", "10"),
        ("(2 + 3) * 4", "20"),
        ("10 - 4 - 3", "3"),  # left-associative
        ("2 ** 3 ** 2", "512"),  # right-associative
        ("-2 ** 2", "-4"),  # power binds tighter than unary minus
        ("(-2) ** 2", "4"),
        ("10 / 4", "2.5"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),  # floored, as Python
        ("7 % 3", "1"),
        ("-10 % 3 + 2", "4"),  # floored modulo, as Python
        ("+5 - -5", "10"),
        ("2 ** -1", "0.5"),
        ("0.1 + 0.2", "0.30000000000000004"),
        ("1e3 + 1", "1001"),
        ("1_000_000 * 3", "3000000"),
        ("2 ** 100", "1267650600228229401496703205376"),  # integers stay exact
        ("12345678901234567890 * 98765432109876543210", str(12345678901234567890 * 98765432109876543210)),
        ("sqrt(16) + 1", "5"),
        ("sqrt(2) ** 2", "2.0000000000000004"),  # floats are not rounded away
        ("sin(pi / 2)", "1"),
        ("cos(0) + tan(0)", "1"),
        ("log(e)", "1"),
        ("log(8, 2)", "3"),
        ("log10(1000) + log2(8)", "6"),
        ("exp(0)", "1"),
        ("abs(-3.5)", "3.5"),
        ("round(2.567, 2)", "2.57"),
        ("round(1234.5678, -2)", "1200"),
        ("round(7 / 2)", "4"),
        ("min(3, 1, 2) + max(4, 9, 5)", "10"),
        ("floor(2.7) + ceil(2.1) + trunc(-2.7)", "3"),
        ("factorial(20)", "2432902008176640000"),
        ("pow(2, 10)", "1024"),
        ("hypot(3, 4)", "5"),
        ("degrees(pi)", "180"),
        ("gcd(12, 18)", "6"),
        ("tau / 2", repr(math.pi)),
        ("100 * 1.07 ** 5", repr(100 * 1.07**5)),
    ],
)
async def test_t5_calculate_evaluates_arithmetic(expression: str, expected: str) -> None:
    result = await calculate(expression)
    assert not result.is_error, result.content
    assert result.content == expected


# --------------------------------------------------------------------- no eval


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "only these functions can be called"),
        ("__import__('os').system('id')", "attribute access cannot be used"),
        ("().__class__.__bases__[0].__subclasses__()", "attribute access cannot be used"),
        ("(lambda: 1)()", "lambdas cannot be used"),
        ("(pi + 1)(2)", "calling the result of an expression cannot be used"),
        ("(1).real", "attribute access cannot be used"),
        ("math.sqrt(4)", "attribute access cannot be used"),
        ("os", "unknown name 'os'"),
        ("x + 1", "unknown name 'x'"),
        ("__builtins__", "unknown name '__builtins__'"),
        ("lambda: 1", "lambdas cannot be used"),
        ("[x for x in (1, 2)]", "comprehensions cannot be used"),
        ("sum(x for x in (1, 2))", "only these functions can be called"),
        ("abs(x for x in (1, 2))", "comprehensions cannot be used"),
        ("{x: 1 for x in (1,)}", "comprehensions cannot be used"),
        ("open('/etc/passwd')", "only these functions can be called"),
        ("eval('1+1')", "only these functions can be called"),
        ("print(1)", "only these functions can be called"),
        ("'a' * 3", "only numbers are allowed"),
        ("b'a'", "only numbers are allowed"),
        ("f'{1}'", "strings cannot be used"),
        ("True + 1", "only numbers are allowed, not bool"),
        ("None", "only numbers are allowed"),
        ("1j * 2", "only numbers are allowed, not complex"),
        ("(1, 2)", "Tuple cannot be used"),
        ("[1, 2][0]", "subscripts cannot be used"),
        ("1 < 2", "comparisons cannot be used"),
        ("1 and 2", "boolean operators cannot be used"),
        ("1 if 1 else 2", "conditional expressions cannot be used"),
        ("(y := 2)", "assignments cannot be used"),
        ("sqrt(x=4)", "by position"),
        ("max(*[1, 2])", "by position"),
        ("~1", "the operator Invert is not allowed"),
        ("not 1", "the operator Not is not allowed"),
        ("1 << 10", "the operator LShift is not allowed"),
        ("2 ^ 3", "use ** for powers"),
        ("import os", "syntax error"),
        ("x = 1", "syntax error"),
        ("2 +", "syntax error"),
    ],
)
async def test_t5_calculate_refuses_anything_but_arithmetic(expression: str, message: str) -> None:
    result = await calculate(expression)
    assert result.is_error
    assert result.error_type == TOOL_ERROR
    assert message in result.content


def test_t5_calculate_never_calls_eval_exec_or_compile() -> None:
    with open(evaluate.__code__.co_filename, encoding="utf-8") as source:
        module = ast.parse(source.read())
    called = {
        node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        for node in ast.walk(module)
        if isinstance(node, ast.Call)
    }
    assert not called & {"eval", "exec", "compile", "__import__", "getattr", "literal_eval"}


# ---------------------------------------------------------------- resource guards


@pytest.mark.timeout(10)  # a hang guard, not a speed assertion (bench/ measures speed)
@pytest.mark.parametrize(
    "expression",
    [
        "9**9**9",
        "10 ** 100000",
        "2 ** 4096 * 2 ** 4096",
        "pow(7, 10 ** 8)",
        "factorial(100000)",
        "round(1, -10 ** 9)",
        "(10 ** 1000) ** 10",
    ],
)
async def test_t5_calculate_refuses_results_too_large_to_compute(expression: str) -> None:
    result = await calculate(expression)
    assert result.is_error
    assert result.error_type == TOOL_ERROR
    assert any(text in result.content for text in ("too large", "limited to", "digits must be"))


@pytest.mark.parametrize(
    "expression", ["1e308 * 10", "exp(1000)", "2.0 ** 5000", "sqrt(10 ** 400)", "(10 ** 400) / 3"]
)
async def test_t5_float_overflow_is_a_tool_error(expression: str) -> None:
    result = await calculate(expression)
    assert result.error_type == TOOL_ERROR
    assert "too large" in result.content


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 / 0", "Division by zero"),
        ("1 // 0", "Division by zero"),
        ("1 % 0", "Modulo by zero"),
        ("5 / (3 - 3)", "Division by zero"),
        ("0 ** -1", "Division by zero"),
        ("1.5 % 0.0", "Modulo by zero"),
    ],
)
async def test_t5_division_by_zero_is_a_tool_error(expression: str, message: str) -> None:
    result = await calculate(expression)
    assert result.is_error
    assert result.error_type == TOOL_ERROR
    assert message in result.content


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("sqrt(-1)", "Math domain error in sqrt()"),
        ("log(0)", "Math domain error in log()"),
        ("(-8) ** 0.5", "not a real number"),
        ("factorial(2.5)", "non-negative integer"),
        ("sqrt(1, 2)", "wrong number or kind of arguments"),
        ("max()", "wrong number or kind of arguments"),
    ],
)
async def test_t5_math_errors_are_tool_errors_the_model_can_act_on(expression: str, message: str) -> None:
    result = await calculate(expression)
    assert result.error_type == TOOL_ERROR
    assert message in result.content


async def test_t5_deep_nesting_is_refused() -> None:
    result = await calculate("-" * 300 + "1")
    assert result.error_type == TOOL_ERROR
    assert "nested too deeply" in result.content
    parens = await calculate("(" * 250 + "1" + ")" * 250)
    assert parens.error_type == TOOL_ERROR


async def test_t5_long_input_is_refused_by_the_schema() -> None:
    result = await calculate("1+" * MAX_EXPRESSION_CHARS + "1")
    assert result.error_type == INVALID_ARGUMENTS
    assert "$.expression" in result.content
    with pytest.raises(ToolError, match="too long"):
        evaluate("1+" * MAX_EXPRESSION_CHARS + "1")


@pytest.mark.parametrize("expression", ["", "   "])
async def test_t5_an_empty_expression_is_refused(expression: str) -> None:
    result = await calculate(expression)
    assert result.is_error


async def test_t5_a_non_string_expression_is_invalid_arguments() -> None:
    result = await calculate(42)
    assert result.error_type == INVALID_ARGUMENTS
    assert "$.expression: 42 is not of type 'string'" in result.content
