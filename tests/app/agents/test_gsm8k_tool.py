"""verl's GSM8K answer-checking tool (`app.agents.tools.gsm8k`), loaded from verl's own tool config file."""

from __future__ import annotations

import json

import pytest
from support import write_text

from app.agents.tool_config import load_tools
from app.agents.tools.gsm8k import NO_GAIN_PENALTY, Gsm8kTool

# verl's examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml @ df51df23738d70e5efa060d9ba8b54770a07ee7d
# (its description folded onto two lines: YAML reads the same string)
VERL_TOOL_CONFIG = """\
tools:
  - class_name: "verl.workers.tool.gsm8k_tool.Gsm8kTool"
    config: {}
    tool_schema:
      type: "function"
      function:
        name: "calc_gsm8k_reward"
        description: "A tool for calculating the reward of gsm8k. (1.0 if your answer is correct, 0.0 if your answer
          is incorrect)"
        parameters:
          type: "object"
          properties:
            answer:
              type: "string"
              description: "The model's answer to the GSM8K math problem, must be a digits"
          required: ["answer"]
"""


@pytest.fixture
def tool(tmp_path):
    return load_tools(write_text(tmp_path, "gsm8k_tool_config.yaml", VERL_TOOL_CONFIG))["calc_gsm8k_reward"]


@pytest.mark.parametrize("verl_name", ["verl.tools.gsm8k_tool.Gsm8kTool", "verl.workers.tool.gsm8k_tool.Gsm8kTool"])
def test_verls_class_names_build_this_tool(tmp_path, verl_name):
    text = VERL_TOOL_CONFIG.replace("verl.workers.tool.gsm8k_tool.Gsm8kTool", verl_name)
    assert isinstance(load_tools(write_text(tmp_path, "tools.yaml", text))["calc_gsm8k_reward"], Gsm8kTool)


def test_each_submission_is_scored_and_only_a_better_one_goes_unpenalised(tool):
    instance = tool.create(ground_truth="72")
    # a wrong answer does not raise the score above its start (0): the no-gain penalty, as in verl
    assert tool.execute(instance, {"answer": "70"}) == ("Current parsed answer='70' reward=0.0", NO_GAIN_PENALTY, {})
    assert tool.calc_reward(instance) == 0.0
    # the right one raises it to 1, with or without verl's "#### " prefix and a thousands separator
    assert tool.execute(instance, {"answer": "#### 72"}) == ("Current parsed answer='#### 72' reward=1.0", 0.0, {})
    assert tool.calc_reward(instance) == 1.0
    # submitting it again gains nothing: penalised, the score stays
    assert tool.execute(instance, {"answer": "72"})[1] == NO_GAIN_PENALTY and tool.calc_reward(instance) == 1.0
    # a later wrong answer is what the trajectory ends with
    tool.execute(instance, {"answer": "7"})
    assert tool.calc_reward(instance) == 0.0
    other = tool.create(ground_truth="1250")  # instances are independent
    assert tool.execute(other, {"answer": "1,250"})[0] == "Current parsed answer='1,250' reward=1.0"
    tool.release(instance)
    with pytest.raises(KeyError):
        tool.calc_reward(instance)


def test_a_row_without_the_ground_truth_is_named(tool):
    with pytest.raises(ValueError, match=r"extra_info\['tools_kwargs'\]\['calc_gsm8k_reward'\]\['create_kwargs'\]"):
        tool.create()
    assert json.loads(json.dumps(tool.get_openai_tool_schema().to_dict()))["function"]["name"] == "calc_gsm8k_reward"
