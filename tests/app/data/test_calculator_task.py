"""The tool-use task: deterministic rows whose answers the calculator reproduces, a tool config file that loads, and
a reward that pays for right answers only."""

import yaml

from algos.rewards import default_compute_score
from app.agents.tool_config import load_tools
from app.data.calculator_task import DATA_SOURCE, calculator_rows
from app.prepare import main


def test_rows_are_deterministic_and_the_calculator_gets_every_answer(tmp_path):
    assert calculator_rows(20, seed=3, split="train") == calculator_rows(20, seed=3, split="train")
    assert calculator_rows(5, 3, "train") != calculator_rows(5, 3, "test")
    assert main(["calculator", "--output", str(tmp_path), "--train-size", "30", "--test-size", "5"]) == 0
    tools = load_tools(tmp_path / "tool_config.yaml")
    rows = calculator_rows(30, 0, "train")
    for row in rows:
        text, _, _ = tools["calculator"].execute("i", {"expression": row["extra_info"]["expression"]})
        assert text == row["reward_model"]["ground_truth"]
        assert '<tool_call>{"name": <tool name>' in row["prompt"][0]["content"]  # the system message teaches calls
        assert '"name": "calculator"' in row["prompt"][0]["content"]
    assert min(int(r["reward_model"]["ground_truth"]) for r in rows) > 10_000  # too large to do in one's head
    assert (
        yaml.safe_load((tmp_path / "tool_config.yaml").read_text())["tools"][0]["tool_schema"]["function"]["name"]
        == "calculator"
    )


def test_reward_pays_for_right_answers_only():
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "12345 * 678"}}</tool_call>'
    assert default_compute_score(DATA_SOURCE, f"{call}\n#### 8369910", "8369910")["score"] == 1.0
    assert default_compute_score(DATA_SOURCE, f"{call}\n#### 8369911", "8369910")["score"] == 0.0
    assert default_compute_score(DATA_SOURCE, call, "8369910")["score"] == 0.0  # calling the tool earns nothing
    assert default_compute_score(DATA_SOURCE, "8369910", "8369910")["score"] == 0.0  # unmarked: no partial credit
