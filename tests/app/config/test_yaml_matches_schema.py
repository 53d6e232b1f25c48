"""configs/ppo_trainer.yaml lists exactly the schema's keys with the schema's defaults, so neither drifts."""
import dataclasses
from pathlib import Path

import yaml

from app.config.schema import TrainerRunConfig

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
# Keys whose YAML default is an interpolation of another key (verl writes them this way); the schema fills them.
INTERPOLATED = {
    "actor_rollout_ref.rollout.response_length",
    "actor_rollout_ref.rollout.prompt_length",
    "critic.model.path",
    "critic.ppo_mini_batch_size",
    "critic.ppo_epochs",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.actor.checkpoint.load_contents",
    "critic.checkpoint.load_contents",
}


def flatten(tree, prefix=""):
    out = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def test_ppo_trainer_yaml_equals_schema_defaults():
    raw = yaml.safe_load((CONFIGS / "ppo_trainer.yaml").read_text())
    raw.pop("hydra"), raw.pop("defaults")
    in_yaml = flatten(raw)
    in_schema = flatten(dataclasses.asdict(TrainerRunConfig()))
    assert sorted(in_yaml) == sorted(in_schema)
    for key, default in in_schema.items():
        if key in INTERPOLATED:
            assert str(in_yaml[key]).startswith("${"), key
        else:
            assert in_yaml[key] == default, key


def test_grpo_yaml_overrides_only_known_keys():
    raw = yaml.safe_load((CONFIGS / "grpo_trainer.yaml").read_text())
    raw.pop("defaults")
    schema_keys = set(flatten(dataclasses.asdict(TrainerRunConfig())))
    assert set(flatten(raw)) <= schema_keys
