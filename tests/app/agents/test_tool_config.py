"""verl's tool config file format loads unchanged (tools by class_name, their config, an OpenAI function schema), a
tool class plugs in by `module.Class` or `module:Class`, and the config loader checks the file before any worker."""

from pathlib import Path

import pytest
from support import compose_verl as compose
from support import verl_grpo_example_args, write_text

from app.agents.tool_config import ToolConfigError, load_tools
from app.agents.tools.calculator import CalculatorTool
from app.config import ConfigError, load_config

KEY = "actor_rollout_ref.rollout.multi_turn"

SCHEMA = "    tool_schema: {type: function, function: {name: t}}\n"
# the shape of verl's tool config files (verl's examples/*/config/tool_config/*.yaml): written here, not copied
VERL_STYLE = """\
tools:
  - class_name: "app.agents.tools.calculator.CalculatorTool"
    config:
      type: native
    tool_schema:
      type: "function"
      function:
        name: "calculator"
        description: "Evaluate an arithmetic expression exactly"
        parameters:
          type: "object"
          properties:
            expression:
              type: "string"
              description: "for example 123456 * 789"
          required: ["expression"]
  - class_name: "app.agents.tools.python_sandbox:PythonSandboxTool"
    config: {timeout_s: 2, sandbox: false}
    tool_schema:
      type: function
      function:
        name: python
        description: Run Python code
        parameters: {type: object, properties: {code: {type: string}}}
"""


def write(tmp_path, text, name="tools.yaml"):
    return write_text(tmp_path, name, text)


def test_verl_style_file_builds_the_tools(tmp_path):
    tools = load_tools(write(tmp_path, VERL_STYLE))
    assert list(tools) == ["calculator", "python"]
    calc = tools["calculator"]
    assert isinstance(calc, CalculatorTool) and calc.config == {"type": "native"}
    assert calc.get_openai_tool_schema().to_dict()["function"]["parameters"]["required"] == ["expression"]
    assert tools["python"].timeout_s == 2.0 and tools["python"].isolate_network is False


@pytest.mark.parametrize(
    "text, message",
    [
        ("tools: []\n", "needs a top-level 'tools:' list"),
        ("tools:\n  - class_name: no_such_module.Tool\n" + SCHEMA, "cannot import module 'no_such_module'"),
        (
            "tools:\n  - class_name: app.agents.tools.calculator.Nope\n" + SCHEMA,
            "module 'app.agents.tools.calculator' has no class 'Nope'",
        ),
        ("tools:\n  - class_name: pathlib.Path\n" + SCHEMA, r"lacks \['create', 'execute', 'calc_reward', 'release'\]"),
        (
            "tools:\n  - class_name: app.agents.tools.calculator.CalculatorTool\n    tool_schema: {type: function}\n",
            "tool_schema.function.name is missing",
        ),
    ],
)
def test_mistakes_name_the_file_and_the_tool(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ToolConfigError, match=message) as info:
        load_tools(path)
    assert path in str(info.value)


@pytest.fixture
def grpo_args(tmp_path):
    return verl_grpo_example_args(tmp_path)


def test_multi_turn_keys_load_through_the_config_loader(tmp_path, grpo_args):
    tools = write(tmp_path, VERL_STYLE)
    cfg = load_config(
        compose(
            grpo_args
            + [
                f"{KEY}.enable=true",
                f"{KEY}.tool_config_path={tools}",
                f"{KEY}.max_assistant_turns=4",
                f"{KEY}.max_parallel_calls=2",
                f"{KEY}.max_tool_response_length=512",
                f"{KEY}.tool_response_truncate_side=left",
                f"{KEY}.format=hermes",
                "data.return_raw_chat=true",
            ]
        )
    )
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    assert (mt.enable, mt.tool_config_path, mt.max_assistant_turns, mt.max_parallel_calls) == (True, tools, 4, 2)
    assert Path(mt.tool_config_path).is_absolute()
    assert (mt.max_tool_response_length, mt.tool_response_truncate_side) == (512, "left")


@pytest.mark.parametrize(
    "override, message",
    [
        (
            f"{KEY}.tool_config_path=/no/such/tools.yaml",
            r"multi_turn\.tool_config_path='/no/such/tools.yaml': no such file",
        ),
        (
            f"{KEY}.format=gpt-oss",
            r"multi_turn\.format='gpt-oss': the tool-call format must be one of \('hermes', 'llama3_json', 'mistral'\)",
        ),
        (f"{KEY}.max_parallel_calls=0", r"multi_turn\.max_parallel_calls=0: must be >= 1"),
        (f"{KEY}.max_assistant_turns=0", r"multi_turn\.max_assistant_turns=0: must be >= 1, or null"),
    ],
)
def test_refusals_name_the_key(grpo_args, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(compose(grpo_args + [override]))


def test_a_relative_tool_config_path_is_made_absolute(tmp_path, grpo_args, monkeypatch):
    write(tmp_path, VERL_STYLE)
    monkeypatch.chdir(tmp_path)  # the workers run elsewhere: they get the path the driver checked
    cfg = load_config(compose(grpo_args + [f"{KEY}.tool_config_path=tools.yaml"]))
    assert cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path == str((tmp_path / "tools.yaml").resolve())


def test_an_unknown_tool_class_stops_the_config(tmp_path, grpo_args):
    tools = write(tmp_path, VERL_STYLE.replace("CalculatorTool", "Calculator"))
    with pytest.raises(
        ConfigError,
        match=r"multi_turn\.tool_config_path: .*tools\[0\] \(calculator\): "
        r"class_name='app.agents.tools.calculator.Calculator'",
    ):
        load_config(compose(grpo_args + [f"{KEY}.tool_config_path={tools}"]))
    with pytest.raises(ConfigError, match="ReMax's greedy baseline"):
        load_config(compose(grpo_args + [f"{KEY}.enable=true", "algorithm.adv_estimator=remax"]))
