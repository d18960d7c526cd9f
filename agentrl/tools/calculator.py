"""A safe arithmetic tool: ``<calculate> 3 * (4 + 5) </calculate>`` → ``27``.

It exists to prove the plug-in path end to end (config → registry → manager → masked
observation) with a tool that needs no server. The expression is parsed with ``ast``
and evaluated by walking a whitelist of node types: numbers, + - * / // % **, unary
signs and parentheses. Names, calls, attributes, subscripts and everything else are
rejected, so there is no route to ``eval``; exponents and operand sizes are bounded so a
policy cannot ask for ``9 ** 9 ** 9`` and stall the rollout.
"""

from __future__ import annotations

import ast
import math
import operator

from agentrl.tools.base import ToolResult

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculationError(ValueError):
    """The expression is not safe arithmetic, or its value is out of bounds."""


def evaluate(
    expression: str, max_exponent: int = 100, max_abs: float = 1e100, max_length: int = 200
) -> int | float:
    """Evaluate an arithmetic expression without ``eval``; raises ``CalculationError``."""
    if len(expression) > max_length:
        raise CalculationError(f"expression longer than {max_length} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculationError(f"not an arithmetic expression: {exc.msg}") from None

    def check(value: int | float) -> int | float:
        if isinstance(value, float) and not math.isfinite(value):
            raise CalculationError("result is not finite")
        if abs(value) > max_abs:
            raise CalculationError(f"result exceeds {max_abs:g} in magnitude")
        return value

    def walk(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise CalculationError(f"unsupported literal {node.value!r}")
            return check(node.value)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return check(_UNARY[type(node.op)](walk(node.operand)))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > max_exponent:
                raise CalculationError(f"exponent {right} exceeds the limit of {max_exponent}")
            try:
                return check(_BINARY[type(node.op)](left, right))
            except ZeroDivisionError:
                raise CalculationError("division by zero") from None
            except OverflowError:
                raise CalculationError("result overflows") from None
        raise CalculationError(f"unsupported syntax: {type(node).__name__}")

    return walk(tree)


def format_number(value: int | float) -> str:
    """Integers as integers, floats without trailing noise (``0.1 + 0.2`` → ``0.3``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.12g}"
    return str(value)


class CalculatorTool:
    """``<calculate> expression </calculate>``; errors come back as observation text."""

    name = "calculator"
    argument = "expression"  # the one string parameter of its derived ToolSpec
    description = "Evaluate an arithmetic expression: numbers, + - * / // % **, unary signs and parentheses."

    def __init__(self, tag: str = "calculate", max_exponent: int = 100, timeout_s: float = 5.0) -> None:
        if max_exponent < 1:
            raise ValueError(f"max_exponent must be >= 1, got {max_exponent}")
        self.tag = tag
        self.max_exponent = max_exponent
        self.timeout_s = timeout_s

    async def execute(self, calls: list[str]) -> list[ToolResult]:
        results = []
        for call in calls:
            try:
                value = evaluate(call, max_exponent=self.max_exponent)
            except CalculationError as exc:
                results.append(ToolResult(f"Error: {exc}", {"calc_errors": 1.0}))
            else:
                results.append(ToolResult(format_number(value), {"calc_errors": 0.0}))
        return results
