"""Every key of verl's PPO trainer config, as one verl commit publishes it, is accounted for here: Hydra takes it as an
override without `+` (the schema has it), the loader takes it at verl's default, and it is read with verl's meaning,
accepted with no effect (and logged once), or accepted at verl's default only (and refused otherwise, naming the key).

The key list is verl_keys_b2df6f8.txt: verl's own flattening of ppo_trainer.yaml
(verl/trainer/config/_generated_ppo_trainer.yaml) at github.com/volcengine/verl commit
b2df6f8c8c9521fcc4742c40d437be40f48d8b42, with verl's default of each key.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import typing
from pathlib import Path

import pytest

from app.config import ConfigError, compose_config, load_config
from app.config.schema import TrainerRunConfig
from app.config.verl_compat import DEFAULT_ONLY, NO_EFFECT
from app.config.verl_keys import (
    DEFAULT_ONLY_CLASS,
    NO_EFFECT_CLASS,
    READ,
    classify,
    docs_page,
    ours_only,
    read_key_list,
    schema_leaf_keys,
)

ROOT = Path(__file__).resolve().parents[3]
VERL_COMMIT = "b2df6f8c8c9521fcc4742c40d437be40f48d8b42"
KEY_LIST = Path(__file__).resolve().parent / f"verl_keys_{VERL_COMMIT[:7]}.txt"
VERL_KEYS = read_key_list(KEY_LIST)
# read keys whose loaded value is not verl's default because this framework fills it from others
DERIVED = {"reward_model.micro_batch_size_per_gpu": 8}  # verl: null (no reward model); here RM_MICRO_BATCH_PER_GPU


def hydra_override(key: str, value) -> str:
    """`key=value` in Hydra's override grammar: strings quoted, lists and mappings spelled out."""

    def text(v):
        if v is None:
            return "null"
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
        if isinstance(v, list):
            return "[" + ",".join(map(text, v)) + "]"
        return "{" + ",".join(f"{k}:{text(x)}" for k, x in v.items()) + "}"

    return f"{key}={text(value)}"


def compose(overrides: list[str]):
    return compose_config("ppo_trainer", overrides)


def lookup(node, key: str):
    for part in key.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


def base_tree() -> dict:
    """The schema's defaults as the plain tree Hydra hands over, with a model path (the one required key)."""
    tree = dataclasses.asdict(TrainerRunConfig())
    tree["actor_rollout_ref"]["model"]["path"] = "/models/m"
    tree["data"]["train_files"] = "/data/train.parquet"  # load_config does not open it
    return tree


def with_value(tree: dict, key: str, value) -> dict:
    tree = copy.deepcopy(tree)
    *parents, last = key.split(".")
    node = tree
    for part in parents:
        node = node[part]
    node[last] = value
    return tree


def declared_type(key: str):
    """The schema's type of a dotted key, Optional[...] unwrapped."""
    cls, tp = TrainerRunConfig, None
    for part in key.split("."):
        tp = typing.get_type_hints(cls)[part]
        cls = tp
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) is typing.Union and len(args) == 1 else tp


def other_value(key: str, default):
    """A value of the key's type that differs from its default."""
    tp = declared_type(key)
    if typing.get_origin(tp) is typing.Literal:
        return next(option for option in typing.get_args(tp) if option != default)
    if default is None:
        origin = typing.get_origin(tp) or tp
        return {bool: True, int: 5, float: 0.5, list: [1, 2], dict: {"path": "/m2"}}.get(origin, "/somewhere/else")
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 3
    if isinstance(default, dict):
        return {**default, "extra_setting": 1}
    if isinstance(default, list):
        return [*default, 7]
    return "/somewhere/else"  # a string or None


def test_the_key_list_is_verls_whole_config():
    keys = [k for k, _ in VERL_KEYS]
    assert len(keys) == len(set(keys)) == 414
    sections = {k.split(".")[0] for k in keys}
    assert sections == {
        "actor_rollout_ref",
        "data",
        "critic",
        "reward_model",
        "custom_reward_function",
        "algorithm",
        "trainer",
        "global_profiler",
        "ray_kwargs",
    }
    assert f"commit {VERL_COMMIT}" in KEY_LIST.read_text()  # the header names the commit it came from


def test_every_verl_key_is_classified():
    classes = {}
    for key, _ in VERL_KEYS:
        classes.setdefault(classify(key)[0], []).append(key)  # KeyError: a key nothing here accounts for
    assert set(classes) == {READ, NO_EFFECT_CLASS, DEFAULT_ONLY_CLASS}
    leaves = schema_leaf_keys()
    # read: the schema has the key itself, or the mapping it sits in (ray_kwargs.ray_init.num_cpus: ray.init's own)
    assert set(classes[READ]) - leaves == {"ray_kwargs.ray_init.num_cpus"} and "ray_kwargs.ray_init" in leaves
    # every no-effect and default-only entry is a real schema key (a typo there would classify nothing)
    assert set(NO_EFFECT) <= leaves and set(DEFAULT_ONLY) <= leaves
    # each class has its reason, except plain reads
    assert all(classify(k)[1] for k in classes[NO_EFFECT_CLASS] + classes[DEFAULT_ONLY_CLASS])


def test_classify_refuses_an_unknown_key():
    with pytest.raises(KeyError):
        classify("actor_rollout_ref.actor.not_a_verl_key")


def test_verls_whole_default_config_composes_and_loads_with_verls_values(caplog):
    """All 414 keys as command-line overrides at once (no `+`: Hydra would say "Could not override" for a key the
    schema lacks), then the loader; each read key holds verl's value."""
    cfg = compose([hydra_override(k, v) for k, v in VERL_KEYS])
    with caplog.at_level(logging.INFO, logger="app.config.verl_compat"):
        run = load_config(cfg)
    for key, value in VERL_KEYS:
        assert lookup(run, key) == DERIVED.get(key, value), key
    # no-effect keys whose verl default differs from the schema's are logged, each once
    logged = [r.getMessage().split("=", 1)[0] for r in caplog.records if "has no effect here" in r.getMessage()]
    assert len(logged) == len(set(logged))
    assert "actor_rollout_ref.actor.use_remove_padding" in logged  # verl false, schema None (model's value)


def test_hydra_still_refuses_a_key_neither_verl_nor_the_schema_has():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="Could not override 'actor_rollout_ref.actor.not_a_key'"):
        compose(["actor_rollout_ref.actor.not_a_key=1"])


@pytest.mark.parametrize("key", sorted(DEFAULT_ONLY))
def test_default_only_keys_are_refused_at_another_value_naming_the_key(key):
    base = base_tree()
    default = lookup(base, key)
    load_config(with_value(base, key, default))  # verl's default: accepted
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}=.*; only verl's default .* is accepted"):
        load_config(with_value(base, key, other_value(key, default)))


REQUIRED = ("actor_rollout_ref.model.path=/m", "data.train_files=/d/train.parquet")


def test_a_default_only_refusal_through_hydra_says_why():
    with pytest.raises(
        ConfigError,
        match=r"^actor_rollout_ref\.model\.hf_config_path='/c': the model's config is read from model\.path; .*only "
        r"verl's default None is accepted",
    ):
        load_config(compose([*REQUIRED, "actor_rollout_ref.model.hf_config_path=/c"]))
    with pytest.raises(
        ConfigError,
        match=r"^actor_rollout_ref\.rollout\.skip_rollout=True: dumping and replaying rollouts is not supported; "
        r"only verl's default False is accepted",
    ):
        load_config(compose([*REQUIRED, "actor_rollout_ref.rollout.skip_rollout=true"]))


@pytest.mark.parametrize("key", sorted(NO_EFFECT))
def test_no_effect_keys_take_any_value_and_say_so_once(key, caplog):
    base = base_tree()
    default = lookup(base, key)
    changed = other_value(key, default)
    with caplog.at_level(logging.INFO, logger="app.config.verl_compat"):
        run = load_config(with_value(base, key, changed))
    assert lookup(run, key) == changed
    where = f"{key}.extra_setting" if isinstance(default, dict) else key  # a plain-data section: the leaf that changed
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"{where}=")]
    assert len(lines) == 1 and f"has no effect here: {NO_EFFECT[key]}" in lines[0]


# ---------------------------------------------------------------- keys read with a mapping or a check
def load(**keys):
    tree = base_tree()
    for key, value in keys.items():
        tree = with_value(tree, key.replace("__", "."), value)
    return load_config(tree)


def test_rollout_name_sglang_is_served_by_vllm_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="app.config.verl_compat"):
        run = load(actor_rollout_ref__rollout__name="sglang")
    assert run.actor_rollout_ref.rollout.name == "vllm"
    assert "rollout.name=sglang: vLLM is the rollout engine here" in caplog.text
    assert "set actor_rollout_ref.rollout.name=vllm" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="app.config.verl_compat"):
        load(actor_rollout_ref__rollout__name="vllm")
    assert "sglang" not in caplog.text


def test_resume_path_mode_becomes_the_path():
    assert (
        load(trainer__resume_mode="resume_path", trainer__resume_from_path="/ckpt/step_5").trainer.resume_mode
        == "/ckpt/step_5"
    )
    with pytest.raises(ConfigError, match=r"trainer\.resume_mode=resume_path needs trainer\.resume_from_path"):
        load(trainer__resume_mode="resume_path")
    assert load(trainer__resume_from_path="/ckpt/step_5").trainer.resume_mode == "auto"  # ignored, as in verl


def test_per_role_checkpoint_limits_become_one_limit():
    assert load(trainer__max_actor_ckpt_to_keep=2).trainer.max_ckpt_to_keep == 2
    assert load(trainer__max_actor_ckpt_to_keep=3, trainer__max_critic_ckpt_to_keep=3).trainer.max_ckpt_to_keep == 3
    with pytest.raises(
        ConfigError,
        match=r"trainer\.max_actor_ckpt_to_keep=2 and trainer\.max_critic_ckpt_to_keep=5"
        r": a checkpoint here holds the actor and the critic together",
    ):
        load(trainer__max_actor_ckpt_to_keep=2, trainer__max_critic_ckpt_to_keep=5)


def test_reward_model_micro_batch_names():
    assert load().reward_model.micro_batch_size_per_gpu == 8  # RM_MICRO_BATCH_PER_GPU
    assert load(reward_model__micro_batch_size_per_gpu=4).reward_model.micro_batch_size_per_gpu == 4
    # verl's older global name, over the two CPU ranks
    assert load(reward_model__micro_batch_size=6).reward_model.micro_batch_size_per_gpu == 3
    with pytest.raises(
        ConfigError,
        match=r"reward_model\.micro_batch_size=6 means 3 per rank .* but "
        r"reward_model\.micro_batch_size_per_gpu=4",
    ):
        load(reward_model__micro_batch_size=6, reward_model__micro_batch_size_per_gpu=4)


def test_role_copies_must_agree_with_the_key_that_is_read():
    assert load(actor_rollout_ref__ref__strategy="fsdp").actor_rollout_ref.ref.strategy == "fsdp"  # fsdp2's twin
    with pytest.raises(
        ConfigError,
        match=r"actor_rollout_ref\.ref\.strategy='deepspeed': the reference runs on the "
        r"actor's engine here \(actor_rollout_ref\.actor\.strategy='fsdp2'\)",
    ):
        load(actor_rollout_ref__ref__strategy="deepspeed")
    load(critic__model__tokenizer_path="/models/m")
    with pytest.raises(ConfigError, match=r"critic\.model\.tokenizer_path='/other': the critic reads the policy's"):
        load(critic__model__tokenizer_path="/other")
    # the policy's own tokenizer_path is the critic's too (verl's critic default interpolates it)
    load(actor_rollout_ref__model__tokenizer_path="/tok", critic__model__tokenizer_path="/tok")
    with pytest.raises(
        ConfigError, match=r"tokenizer is the policy's \(actor_rollout_ref\.model\.tokenizer_path='/tok'\)"
    ):
        load(actor_rollout_ref__model__tokenizer_path="/tok", critic__model__tokenizer_path="/other")
    load(critic__enable=True)  # the schema's estimator, gae, runs a critic
    load(critic__enable=False, algorithm__adv_estimator="grpo")
    with pytest.raises(ConfigError, match=r"critic\.enable=False: algorithm\.adv_estimator='gae' needs a critic"):
        load(critic__enable=False)


# ---------------------------------------------------------------- the docs table
def test_docs_page_is_the_classification_of_the_key_list():
    page = (ROOT / "docs" / "verl_keys.md").read_text()
    assert page == docs_page(VERL_KEYS, f"github.com/volcengine/verl at {VERL_COMMIT}"), (
        "regenerate: python -m app.config.verl_keys tests/app/config/verl_keys_b2df6f8.txt > docs/verl_keys.md"
    )
    for key, _ in VERL_KEYS:
        assert f"| `{key}` |" in page
    assert "`algorithm.filter_groups.enable`" in page.split("## Keys of this framework")[1]
    assert "actor_rollout_ref.actor.profiler" not in ours_only([k for k, _ in VERL_KEYS])


def test_ray_init_address_is_trainer_ray_address():
    # verl joins the cluster its ray.init names; here trainer.ray_address does, and ray.init gets no second address
    run = load(ray_kwargs__ray_init={"address": "10.0.0.1:6379", "num_cpus": 8})
    assert run.trainer.ray_address == "10.0.0.1:6379" and run.ray_kwargs.ray_init == {"num_cpus": 8}
    assert load(ray_kwargs__ray_init={"address": "local"}).trainer.ray_address is None  # a cluster the run starts
    assert load(ray_kwargs__ray_init={"address": "auto"}, trainer__ray_address="auto").trainer.ray_address == "auto"
    with pytest.raises(ConfigError, match=r"ray_init\.address='auto' and trainer\.ray_address='h:1' name two"):
        load(ray_kwargs__ray_init={"address": "auto"}, trainer__ray_address="h:1")
