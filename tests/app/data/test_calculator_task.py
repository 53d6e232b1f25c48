"""The tool-use task: deterministic rows whose answers the calculator reproduces, a tool config file that loads, and
a reward that pays for right answers only."""

import pytest
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


def test_a_demonstration_is_a_worked_exchange_whose_answer_the_reward_pays():
    bare, shown = calculator_rows(3, 0, "test", demonstrations=0), calculator_rows(3, 0, "test", demonstrations=1)
    assert [m["role"] for m in bare[0]["prompt"]] == ["system", "user"]
    assert [m["role"] for m in shown[0]["prompt"]] == ["system", "user", "assistant", "tool", "assistant", "user"]
    # the same questions either way: the exchange is only put before them
    assert [r["prompt"][-1] for r in bare] == [r["prompt"][-1] for r in shown]
    _, question, call, result, answer, _ = shown[0]["prompt"]
    expected_call = '{"name": "calculator", "arguments": {"expression": "48213 * 9071"}}'
    assert call["content"] == f"<tool_call>{expected_call}</tool_call>"
    assert result["content"] == str(48213 * 9071)  # what the calculator answers to that call
    assert default_compute_score(DATA_SOURCE, answer["content"], result["content"])["score"] == 1.0
    assert len(calculator_rows(1, 0, "test", demonstrations=2)[0]["prompt"]) == 10


def test_prepare_refuses_more_demonstrations_than_there_are(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["calculator", "--output", str(tmp_path), "--demonstrations", "3"])
    assert "--demonstrations" in capsys.readouterr().err
    with pytest.raises(ValueError, match="between 0 and 2, got 3"):
        calculator_rows(1, 0, "test", demonstrations=3)
