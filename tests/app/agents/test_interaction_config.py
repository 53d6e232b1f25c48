"""verl's interaction config file loads (entries by name, class_name as `module.Class` or `module:Class`, config with
the name added; a missing name comes from the class name as in verl), mistakes name the file, the entry and the key,
and the config loader checks the file on the driver, before any worker."""

from pathlib import Path

import pytest
from support import compose_verl, verl_grpo_example_args, write_text

from app.agents.interaction_base import BaseInteraction
from app.agents.interaction_config import InteractionConfigError, default_name, load_interactions
from app.agents.interactions.gsm8k import Gsm8kInteraction
from app.config import ConfigError, load_config

KEY = "actor_rollout_ref.rollout.multi_turn"

# the shape of verl's interaction config files (examples/.../interaction_config/*.yaml there): written here
VERL_STYLE = """\
interaction:
  - name: "gsm8k"
    class_name: "app.agents.interactions.gsm8k.Gsm8kInteraction"
    config:
      method: flexible
  - class_name: "app.agents.interaction_base:BaseInteraction"
"""


def write(tmp_path, text, name="interaction.yaml"):
    return write_text(tmp_path, name, text)


def test_verl_style_file_builds_the_interactions_in_file_order(tmp_path):
    interactions = load_interactions(write(tmp_path, VERL_STYLE))
    assert list(interactions) == ["gsm8k", "base"]  # the unnamed one is named after its class, less 'Interaction'
    gsm8k = interactions["gsm8k"]
    assert isinstance(gsm8k, Gsm8kInteraction) and gsm8k.method == "flexible"
    assert gsm8k.config == {"method": "flexible", "name": "gsm8k"} and gsm8k.name == "gsm8k"
    assert type(interactions["base"]) is BaseInteraction and interactions["base"].name == "base"


def test_verls_own_gsm8k_interaction_class_is_the_one_here(tmp_path):
    # verl's docs and its examples' gsm8k_interaction_config.yaml name its GSM8K interaction so
    text = 'interaction:\n  - name: "gsm8k"\n    class_name: "verl.interactions.gsm8k_interaction.Gsm8kInteraction"\n'
    assert isinstance(load_interactions(write(tmp_path, text))["gsm8k"], Gsm8kInteraction)


def test_default_names_follow_verl():
    assert default_name("pkg.mod.Gsm8kInteraction") == "gsm8k"
    assert default_name("pkg.mod:WeatherHelper") == "weatherhelper"
    assert default_name("pkg.Interaction") == "interaction"


ENTRY = "interaction:\n  - class_name: "


@pytest.mark.parametrize(
    "text, message",
    [
        ("interaction: []\n", r"needs a top-level 'interaction:' list of \{name, class_name, config\}"),
        ("interaction:\n  - name: a\n", r"interaction\[0\]: class_name is missing"),
        (
            ENTRY + "no_such_module.Thing\n",
            r"interaction\[0\] \(thing\): class_name='no_such_module.Thing': cannot import",
        ),
        (
            ENTRY + "app.agents.interactions.gsm8k.Nope\n",
            r"interaction\[0\] \(nope\): .*module 'app.agents.interactions.gsm8k' has no class 'Nope'",
        ),
        (ENTRY + "pathlib.Path\n", r"lacks \['start_interaction', 'generate_response', 'calculate_score', 'finalize"),
        (ENTRY + "x.A\n    config: [1]\n", r"interaction\[0\]: config must be a mapping"),
        (ENTRY + "x.A\n    name: ''\n", r"interaction\[0\]: name='' must be a non-empty string"),
        (
            ENTRY + "x.AInteraction\n  - name: a\n    class_name: y.B\n",
            r"interaction\[1\]: a second interaction named 'a'",
        ),
        (
            ENTRY + "app.agents.interactions.gsm8k.Gsm8kInteraction\n    config: {method: fuzzy}\n",
            r"interaction\[0\] \(gsm8k\): .*Gsm8kInteraction\(config=.*\) failed: ValueError: config.method='fuzzy'",
        ),
    ],
)
def test_mistakes_name_the_file_the_entry_and_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(InteractionConfigError, match=message) as info:
        load_interactions(path)
    assert path in str(info.value)


def test_the_config_loader_checks_the_file_before_any_worker(tmp_path):
    grpo_args = verl_grpo_example_args(tmp_path)
    path = write(tmp_path, VERL_STYLE)
    cfg = load_config(compose_verl(grpo_args + [f"{KEY}.enable=true", f"{KEY}.interaction_config_path={path}"]))
    assert cfg.actor_rollout_ref.rollout.multi_turn.interaction_config_path == str(Path(path).resolve())

    bad = write(tmp_path, VERL_STYLE.replace("Gsm8kInteraction", "Gsm8k"), "bad.yaml")
    with pytest.raises(
        ConfigError,
        match=r"multi_turn\.interaction_config_path: .*bad\.yaml: interaction\[0\] \(gsm8k\): "
        r"class_name='app.agents.interactions.gsm8k.Gsm8k'",
    ):
        load_config(compose_verl(grpo_args + [f"{KEY}.interaction_config_path={bad}"]))
    with pytest.raises(ConfigError, match=r"multi_turn\.interaction_config_path='.*/no/such\.yaml': no such file"):
        load_config(compose_verl(grpo_args + [f"{KEY}.interaction_config_path={tmp_path}/no/such.yaml"]))
