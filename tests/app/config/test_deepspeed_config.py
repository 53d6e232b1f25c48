"""`strategy=deepspeed`: DeepSpeed's JSON derived from our keys and merged with a user's file, refused on the driver
when the two disagree."""

import json

import pytest

from app.config import ConfigError, load_config
from app.engine.deepspeed_config import (
    DeepSpeedConfigError,
    batch_keys,
    derived_config,
    load_user_config,
    merge_user_config,
)

A = "actor_rollout_ref.actor"
# 4 prompts x rollout.n=2 = 8 samples per optimiser step, over 2 ranks = 4 each, in micro-batches of 2
BASE = {
    "data": {"train_files": "train.parquet", "train_batch_size": 8},
    "actor_rollout_ref": {
        "model": {"path": "/models/x"},
        "rollout": {"n": 2},
        "actor": {"strategy": "deepspeed", "ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 2},
    },
    "algorithm": {"adv_estimator": "grpo"},
    "trainer": {"num_workers": 2},
}


def _config(tmp_path, user=None, **actor):
    import copy

    cfg = copy.deepcopy(BASE)
    cfg["actor_rollout_ref"]["actor"].update(actor)
    if user is not None:
        path = tmp_path / "ds.json"
        path.write_text(json.dumps(user))
        cfg["actor_rollout_ref"]["actor"].setdefault("deepspeed_config", {})["config_path"] = str(path)
    return cfg


def test_batch_keys_split_like_the_fsdp_engine():
    # 8 samples over 2 ranks = 4 per rank; micro-batches of 2 -> 2 accumulated backward passes per step
    assert batch_keys(8, 2, 2) == {
        "train_batch_size": 8,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2,
    }
    # no micro-batch size, or a token budget: one forward of the whole per-rank share
    assert batch_keys(8, None, 2)["train_micro_batch_size_per_gpu"] == 4
    assert batch_keys(8, 2, 2, use_dynamic_bsz=True)["gradient_accumulation_steps"] == 1
    # inference only: nothing accumulates
    assert batch_keys(None, 3, 2) == {
        "train_batch_size": 6,
        "train_micro_batch_size_per_gpu": 3,
        "gradient_accumulation_steps": 1,
    }
    with pytest.raises(DeepSpeedConfigError, match="micro-batches of 3"):
        batch_keys(8, 3, 2)


def _derived(**kwargs):
    args = dict(
        zero_stage=2, offload_optimizer=False, trains=True, grad_clip=1.0, param_dtype="bf16", batch=batch_keys(8, 2, 2)
    )
    args.update(kwargs)
    return derived_config(**args)


def test_user_values_win_auto_takes_ours_and_an_inference_engine_drops_zero_2():
    user = {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": 2,
        "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "overlap_comm": False},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}},
    }
    merged = merge_user_config(_derived(offload_optimizer=True), user, source="ds.json", trains=True)
    assert merged["zero_optimization"] == {"stage": 3, "overlap_comm": False, "offload_optimizer": {"device": "cpu"}}
    assert merged["train_micro_batch_size_per_gpu"] == 2 and merged["gradient_accumulation_steps"] == 2
    assert merged["gradient_clipping"] == 1.0 and merged["bf16"] == {"enabled": True}
    assert "optimizer" not in merged and "scheduler" not in merged  # ours: AdamW and the optim.* schedule
    # no optimizer: ZeRO-2 has nothing to partition (DeepSpeed refuses it), the user's batch keys mean nothing
    inference = merge_user_config(
        _derived(trains=False, batch=batch_keys(None, None, 2)),
        {"train_batch_size": 64, "zero_optimization": {"stage": 2}},
        source="ds.json",
        trains=False,
    )
    assert inference["zero_optimization"]["stage"] == 0 and inference["train_batch_size"] == 2


@pytest.mark.parametrize(
    "section",
    [
        {"optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}},
        {"optimizer": {"type": "Lamb", "params": {"lr": "auto"}}},
        {"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}},
    ],
)
def test_an_optimizer_or_schedule_of_its_own_is_refused(section):
    with pytest.raises(DeepSpeedConfigError, match=r"ds\.json: (optimizer|scheduler)=.* actor\.optim"):
        merge_user_config(_derived(), section, source="ds.json", trains=True, optim_key="actor.optim")


def test_a_user_file_whose_batch_key_disagrees_is_refused_before_any_worker_naming_file_key_and_values(tmp_path):
    # derived: 4 samples per rank in micro-batches of 2 -> gradient_accumulation_steps=2; the file says 4
    with pytest.raises(
        ConfigError,
        match=rf"{A}\.deepspeed_config\.config_path=.*ds\.json: "
        r"gradient_accumulation_steps=4 disagrees with "
        r"gradient_accumulation_steps=2 derived from .*ppo_mini_batch_size=4 x "
        r"actor_rollout_ref\.rollout\.n=2 .*trainer\.num_workers=2.*"
        r"ppo_micro_batch_size_per_gpu=2",
    ):
        load_config(_config(tmp_path, {"gradient_accumulation_steps": 4}))
    with pytest.raises(ConfigError, match=r"ds\.json: train_batch_size=16 disagrees with train_batch_size=8"):
        load_config(_config(tmp_path, {"train_batch_size": 16}))
    # the same numbers, or "auto", pass
    cfg = load_config(
        _config(
            tmp_path,
            {"train_batch_size": 8, "train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3}},
        )
    )
    assert cfg.actor_rollout_ref.actor.deepspeed_config.zero_stage == 2  # the file's stage wins in the engine


def test_a_missing_or_broken_file_is_named(tmp_path):
    cfg = _config(tmp_path, {})
    cfg["actor_rollout_ref"]["actor"]["deepspeed_config"]["config_path"] = str(tmp_path / "nope.json")
    with pytest.raises(ConfigError, match=rf"{A}\.deepspeed_config\.config_path=.*nope\.json: no such file"):
        load_config(cfg)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DeepSpeedConfigError, match=r"bad\.json is not valid JSON"):
        load_user_config(str(tmp_path / "bad.json"))


def test_strategy_and_stage_values_are_named(tmp_path):
    with pytest.raises(ConfigError, match=rf"{A}\.strategy: 'megatron' is not one of 'fsdp', 'fsdp2', 'deepspeed'"):
        load_config(_config(tmp_path, strategy="megatron"))
    with pytest.raises(ConfigError, match=r"critic\.strategy: 'ddp' is not one of 'fsdp', 'fsdp2', 'deepspeed'"):
        load_config({**_config(tmp_path), "critic": {"strategy": "ddp"}})
    with pytest.raises(ConfigError, match=rf"{A}\.deepspeed_config\.zero_stage: 1 is not one of 2, 3"):
        load_config(_config(tmp_path, deepspeed_config={"zero_stage": 1}))


def test_fsdp_only_settings_are_refused_with_deepspeed(tmp_path):
    with pytest.raises(
        ConfigError,
        match=rf"{A}\.fsdp_config\.optimizer_offload=true is an FSDP setting.*"
        rf"{A}\.deepspeed_config\.offload_optimizer",
    ):
        load_config(_config(tmp_path, fsdp_config={"optimizer_offload": True}))
    with pytest.raises(ConfigError, match=rf"{A}\.use_torch_compile=true is not supported"):
        load_config(_config(tmp_path, use_torch_compile=True))


def test_a_moving_reference_is_refused_with_zero_3_whose_inference_engine_deepspeed_cannot_checkpoint(tmp_path):
    def synced(cfg):
        cfg["actor_rollout_ref"]["actor"]["use_kl_loss"] = True
        cfg["actor_rollout_ref"]["ref"] = {"sync_ref_model": True}
        return cfg

    with pytest.raises(ConfigError, match=r"sync_ref_model=true with DeepSpeed ZeRO-3 .*zero_stage=2 or strategy"):
        load_config(synced(_config(tmp_path, deepspeed_config={"zero_stage": 3})))
    with pytest.raises(ConfigError, match=r"sync_ref_model=true with DeepSpeed ZeRO-3"):  # stage 3 from the JSON
        load_config(synced(_config(tmp_path, user={"zero_optimization": {"stage": 3}})))
    assert load_config(synced(_config(tmp_path))).actor_rollout_ref.ref.sync_ref_model  # ZeRO-2


def test_the_factory_passes_the_deepspeed_keys_to_the_engine(tmp_path):
    from app.roles.factory import actor_engine_spec, critic_engine_spec, ref_engine_spec

    cfg = load_config(_config(tmp_path, {}, deepspeed_config={"zero_stage": 3, "offload_optimizer": True}))
    arr = cfg.actor_rollout_ref
    spec = actor_engine_spec(arr.model, arr.actor, seed=0, rollout_n=arr.rollout.n)
    assert spec.deepspeed.zero_stage == 3 and spec.deepspeed.offload_optimizer
    assert spec.deepspeed.train_batch_size == 8 and spec.deepspeed.config_path.endswith("ds.json")
    assert ref_engine_spec(arr.model, arr.ref, arr.actor).deepspeed.train_batch_size is None  # inference only
    critic = critic_engine_spec(cfg.critic, seed=0, rollout_n=2)
    assert critic.deepspeed.train_batch_size == 8 and critic.deepspeed.zero_stage == 2  # the critic's own section
