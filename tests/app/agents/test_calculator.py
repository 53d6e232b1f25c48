import pytest

from app.agents.tool_base import FunctionSchema, ToolSchema
from app.agents.tools.calculator import CalculatorError, CalculatorTool, evaluate


def test_exact_big_integer_arithmetic():
    assert evaluate("123456789123 * 987654321987") == 123456789123 * 987654321987
    assert evaluate("(10**30 + 1) // 7 - -3") == (10**30 + 1) // 7 + 3
    assert evaluate("10**40 / 10**20") == 10**20  # exact integer, where a float would round
    assert evaluate("7 / 2") == 3.5
    assert evaluate("2 ** 10 % 1000") == 24


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('ls')",
        "x + 1",
        "open('/etc/passwd')",
        "(1).real",
        "'a' * 3",
        "[1, 2]",
        "True + 1",
        "1 if 1 else 2",
        "lambda: 1",
    ],
)
def test_refuses_everything_but_arithmetic(expression):
    with pytest.raises(CalculatorError, match="only numbers"):
        evaluate(expression)


def test_refuses_huge_powers_and_division_by_zero():
    with pytest.raises(CalculatorError, match="exponent"):
        evaluate("10 ** 10 ** 10")
    with pytest.raises(CalculatorError, match="digits"):
        evaluate("99999 ** 999")
    with pytest.raises(CalculatorError, match="division by zero"):
        evaluate("1 // 0")


def test_tool_answers_errors_as_text():
    tool = CalculatorTool({}, ToolSchema(FunctionSchema("calculator")))
    assert tool.execute("i", {"expression": "6 * 7"}) == ("42", 0.0, {})
    text, _, metrics = tool.execute("i", {"expression": "os.getcwd()"})
    assert text.startswith("Error: only numbers") and metrics == {"error": 1}
    assert tool.execute("i", {"expr": "1"})[0].startswith("Error: give the expression")
