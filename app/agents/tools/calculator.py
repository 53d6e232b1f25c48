"""A calculator tool: evaluates an arithmetic expression by walking its syntax tree. Only numbers, + - * / // % **,
unary signs and parentheses are allowed; anything else (names, calls, attributes, strings...) is refused, so no code
from the model ever runs. Integers stay exact, however large."""

from __future__ import annotations

import ast
import operator
from typing import Any, Mapping, Union

from app.agents.tool_base import BaseTool

Number = Union[int, float]
MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 1000  # keeps 10**10**10 from freezing the run
MAX_RESULT_DIGITS = 4000

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


class CalculatorError(ValueError):
    pass


def evaluate(expression: str) -> Number:
    """The value of `expression`; `CalculatorError` saying what is not allowed or what went wrong."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise CalculatorError(f"not an arithmetic expression: {e.msg}") from e
    value = _eval(tree.body)
    if isinstance(value, int) and len(str(abs(value))) > MAX_RESULT_DIGITS:
        raise CalculatorError(f"result has more than {MAX_RESULT_DIGITS} digits")
    return value


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):  # bool is an int subclass: refused
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is larger than {MAX_EXPONENT}")
        if (
            isinstance(node.op, ast.Pow)
            and isinstance(left, int)
            and isinstance(right, int)
            and abs(left) > 1
            and len(str(abs(left))) * right > MAX_RESULT_DIGITS
        ):
            raise CalculatorError(f"result has more than {MAX_RESULT_DIGITS} digits")
        try:
            value = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError as e:
            raise CalculatorError("division by zero") from e
        except OverflowError as e:
            raise CalculatorError("result too large") from e
        if (
            isinstance(value, float)
            and value.is_integer()
            and isinstance(node.op, ast.Div)
            and isinstance(left, int)
            and isinstance(right, int)
            and left % right == 0
        ):
            return left // right  # exact for big integers, where the float would round
        if isinstance(value, complex):
            raise CalculatorError("the result is not a real number")
        return value
    raise CalculatorError(f"only numbers and + - * / // % ** ( ) are allowed; found {_describe(node)}")


def _describe(node: ast.AST) -> str:
    try:
        return f"{type(node).__name__} {ast.unparse(node)!r}"
    except Exception:  # unparse of an odd node must not hide the refusal itself
        return type(node).__name__


class CalculatorTool(BaseTool):
    """Tool config: `class_name: app.agents.tools.calculator.CalculatorTool`, schema with one string parameter
    (`argument`, default "expression")."""

    def execute(self, instance_id: str, parameters: Mapping[str, Any], **kwargs) -> tuple[str, float, dict]:
        key = self.config.get("argument", "expression")
        expression = parameters.get(key)
        if not isinstance(expression, str):
            return f"Error: give the expression as a string argument {key!r}", 0.0, {"error": 1}
        try:
            return str(evaluate(expression)), 0.0, {}
        except CalculatorError as e:
            return f"Error: {e}", 0.0, {"error": 1}
