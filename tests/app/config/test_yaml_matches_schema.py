"""Every default is written once, in the typed schema: configs/ppo_trainer.yaml composes to exactly the schema's
defaults (Hydra's base node `rayrl_schema` is made from them), and the other trainer configs set only schema keys,
each to a value other than the one they inherit."""

import dataclasses
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from app.config import compose_config
from app.config.schema import TrainerRunConfig
from app.preflight.config_keys import is_known

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def flatten(tree, prefix=""):
    out = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def composed(name: str) -> dict:
    cfg = compose_config(name)
    tree = OmegaConf.to_container(cfg, resolve=False)
    tree.pop("hydra", None)
    return tree


def test_ppo_trainer_is_the_schema_defaults_and_states_none_of_them():
    assert composed("ppo_trainer") == dataclasses.asdict(TrainerRunConfig())
    raw = yaml.safe_load((CONFIGS / "ppo_trainer.yaml").read_text())
    assert set(raw) == {"hydra", "defaults"}  # no key restated


@pytest.mark.parametrize("name, parent", [("grpo_trainer", "ppo_trainer"), ("quickstart", "grpo_trainer")])
def test_derived_configs_set_only_schema_keys_and_only_to_new_values(name, parent):
    raw = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    raw.pop("defaults")
    inherited = flatten(composed(parent))
    for key, value in flatten(raw).items():
        if key not in inherited:  # a key inside a section open to user code (data.sampler's own settings)
            assert is_known(key, TrainerRunConfig), f"{name}.yaml: {key} is not a schema key"
            continue
        assert value != inherited[key], f"{name}.yaml: {key}={value!r} restates what {parent} already has"


@pytest.mark.parametrize("path", sorted((CONFIGS / "sweep").glob("*.yaml")), ids=lambda p: p.stem)
def test_sweep_files_state_only_what_differs_from_the_sweep_schema(path):
    from app.tuning.spec import SweepFile  # registers rayrl_sweep_schema

    raw = yaml.safe_load(path.read_text())
    raw.pop("hydra", None)
    raw.pop("defaults")
    params = raw.pop("params", None)  # the searched keys: the sweep's content, with no default to restate
    defaults = flatten(dataclasses.asdict(SweepFile()))
    for key, value in flatten(raw).items():
        assert key in defaults, f"sweep/{path.name}: {key} is not a sweep key"
        assert value != defaults[key], f"sweep/{path.name}: {key}={value!r} restates the default"
    # composed, the file is the schema's defaults with its own values over them
    assert composed(f"sweep/{path.stem}") == deep_merge(dataclasses.asdict(SweepFile()), {**raw, "params": params})


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and out.get(key) else value
    return out
