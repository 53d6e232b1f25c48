"""The built-in tool-use task: arithmetic on numbers too large to work out in one's head (products of 4-7 digit
numbers, sums of several large numbers), with the calculator tool described in the system message. The reward
(`algos.rewards.tool_arithmetic`) pays for a right final answer only: calling the tool earns nothing by itself.

Each prompt may open with worked exchanges (a question, the assistant's call, the tool's answer, the assistant's
`#### N` line) before its own question. SmolLM2-135M-Instruct, told about the tool in the system message alone, never
calls it; after one worked exchange it calls it in some answers, which GRPO can then reinforce; after two it calls it
nearly always, which leaves training nothing to teach (docs/agents.md)."""

from __future__ import annotations

import json
import random
from typing import Any

from app.agents.tool_base import ToolSchema
from app.agents.tool_prompt import tool_system_prompt
from app.agents.tools.calculator import evaluate

DATA_SOURCE = "calculator_arithmetic"
INSTRUCTION = 'End with the final answer on its own line as "#### <answer>".'
CALCULATOR_SCHEMA = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression exactly (+ - * / // % ** and parentheses)",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "for example 48213 * 9071"}},
            "required": ["expression"],
        },
    },
}
# verl's tool config file format: what `multi_turn.tool_config_path` names for this task
TOOL_CONFIG = {
    "tools": [
        {"class_name": "app.agents.tools.calculator.CalculatorTool", "config": {}, "tool_schema": CALCULATOR_SCHEMA}
    ]
}


# the worked exchanges' questions: one of each kind make_problem writes; fixed, so every prompt shows the same ones
DEMONSTRATIONS = (
    ("What is 48213 times 9071?", "48213 * 9071"),
    ("What is 120345 + 998712 + 55501?", "120345 + 998712 + 55501"),
)


def demonstration_messages(count: int) -> list[dict[str, str]]:
    """The first `count` worked exchanges, as chat messages: user, assistant (the call), tool, assistant (answer)."""
    if not 0 <= count <= len(DEMONSTRATIONS):
        raise ValueError(f"demonstrations must be between 0 and {len(DEMONSTRATIONS)}, got {count}")
    messages = []
    for question, expression in DEMONSTRATIONS[:count]:
        call = json.dumps({"name": CALCULATOR_SCHEMA["function"]["name"], "arguments": {"expression": expression}})
        answer = str(evaluate(expression))
        messages += [
            {"role": "user", "content": f"{question}\n{INSTRUCTION}"},
            {"role": "assistant", "content": f"<tool_call>{call}</tool_call>"},
            {"role": "tool", "content": answer},
            {"role": "assistant", "content": f"#### {answer}"},
        ]
    return messages


def make_problem(rng: random.Random) -> tuple[str, int, str]:
    """(question, answer, expression)."""
    if rng.random() < 0.5:
        a, b = rng.randint(1000, 9_999_999), rng.randint(100, 99_999)
        return f"What is {a} times {b}?", a * b, f"{a} * {b}"
    terms = [rng.randint(10_000, 9_999_999) for _ in range(rng.randint(3, 5))]
    expression = " + ".join(map(str, terms))
    return f"What is {expression}?", sum(terms), expression


def calculator_rows(count: int, seed: int, split: str, demonstrations: int = 1) -> list[dict[str, Any]]:
    """`count` verl rows: a system message with the tool, `demonstrations` worked exchanges, the question; the same
    for the same arguments."""
    rng = random.Random(f"calculator/{split}/{seed}")
    system = tool_system_prompt([ToolSchema.from_dict(CALCULATOR_SCHEMA, "calculator task")])
    shown = demonstration_messages(demonstrations)
    rows = []
    for i in range(count):
        question, answer, expression = make_problem(rng)
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [
                    {"role": "system", "content": system},
                    *shown,
                    {"role": "user", "content": f"{question}\n{INSTRUCTION}"},
                ],
                "ability": "arithmetic",
                "reward_model": {"style": "rule", "ground_truth": str(answer)},
                "extra_info": {"split": split, "index": i, "expression": expression},
            }
        )
    return rows
