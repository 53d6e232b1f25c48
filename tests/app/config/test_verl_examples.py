"""verl's own example run scripts load and validate unchanged, with only the model and data paths replaced.

Each file in verl_scripts/ holds the arguments a verl script passes to `python3 -m verl.trainer.main_ppo`, copied from
the file of github.com/volcengine/verl and the commit its first lines cite (shell variables expanded, the trailing `$@`
dropped). The test splits them as the shell does (line continuations, quote removal), composes them with Hydra onto
configs/ppo_trainer.yaml as `python -m app.train` does, and validates the result. `{model}`, `{train}`, `{test}` and
`{ckpt}` are stand-ins the test creates; load_config does not open them (app.train's data check does, later).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest
import torch
from support import compose_verl as compose
from support import verl_script_args, verl_script_paths

from app.config import ConfigError, load_config
from app.config.schema import OverlongBufferConfig
from app.roles.factory import actor_engine_spec, ref_engine_spec

SCRIPTS = Path(__file__).resolve().parent / "verl_scripts"  # one file per verl script, its source on its first lines

GRPO = "grpo_run_qwen2-7b"
GRPO_OLD_NAMES = "grpo_run_qwen2-7b_old_names"  # an older version, with the global micro-batch names
PPO = "ppo_run_deepseek7b_llm"
RLOO = "rloo_run_qwen2-7b"
REINFORCE_PP = "reinforce_plus_plus_run_qwen2-7b_math_rf"
REMAX = "remax_run_qwen2.5-3b_seq_balance"
GSPO = "gspo_test_gspo_3b_math"
GRPO_LORA = "grpo_run_qwen2_5-3b_gsm8k_grpo_lora"
DAPO = "dapo_test_dapo_7b_math"  # the DAPO recipe: reward_manager=dapo with reward_kwargs
DAPO_AS_PUBLISHED = dict(
    sp_size=4, fsdp_size=32, override="+actor_rollout_ref.model.override_config.max_position_embeddings=32768"
)
DAPO_SUPPORTED = dict(sp_size=1, fsdp_size=-1, override="")  # the plainest layout: checks of other keys use it
GMPO = "gmpo_test_dapo_7b_math"  # the DAPO recipe with GMPO's geometric-mean loss, the same three stand-ins
PPO_SP2 = "ppo_run_deepseek7b_llm_sp2"  # PPO with Ulysses sequence parallelism 2 (actor and critic)
GRPO_SGLANG = "grpo_run_qwen2-7b_seq_balance"  # rollout.name=sglang, token-budget micro-batches
GRPO_QWEN3 = "grpo_run_qwen3-1.7b"  # 1024 prompts in mini-batches of 80: a smaller last mini-batch
GPG = "gpg_run_qwen2-7b_math"  # GPG's estimator and loss
SYNC_REF = "grpo_run_qwen2-7b_sync_ref_model"  # a reference that moves toward the actor (TR-DPO)
OTB = "otb_run_qwen2_5-7b"  # the optimal token baseline


@pytest.fixture
def paths(tmp_path) -> dict[str, str]:
    """Local stand-ins for the scripts' Hugging Face model and GSM8K / MATH parquet files."""
    return verl_script_paths(tmp_path, "Qwen2.5-3B-Instruct")


def overrides(script: str, paths: dict[str, str], **extra: str) -> list[str]:
    """The script's arguments as the shell hands them over: line continuations joined, quotes removed."""
    return verl_script_args(SCRIPTS / f"{script}.txt", **paths, **extra)


def run_script(script: str, paths: dict[str, str], *more: str, **extra: str):
    """What `python -m app.train <the script's arguments> <more>` validates."""
    return load_config(compose(overrides(script, paths, **extra) + list(more)))


# ---------------------------------------------------------------- the scripts load, and keys keep verl's meaning
def test_grpo_script(paths):
    cfg = run_script(GRPO, paths)
    arr = cfg.actor_rollout_ref
    assert cfg.algorithm.adv_estimator == "grpo" and arr.rollout.n == 5
    assert cfg.data.train_files == paths["train"] and arr.model.path == paths["model"]
    assert cfg.trainer.logger == ["console", "wandb"]  # parsed; wandb itself is the tracking code's business
    assert arr.rollout.log_prob_micro_batch_size_per_gpu == arr.ref.log_prob_micro_batch_size_per_gpu == 40
    # verl's interpolations: the log-prob passes batch like the actor (fixed sizes here)
    assert arr.rollout.log_prob_use_dynamic_bsz is False and arr.ref.log_prob_use_dynamic_bsz is False
    assert arr.rollout.log_prob_max_token_len_per_gpu == arr.actor.ppo_max_token_len_per_gpu == 16384
    assert arr.ref.fsdp_config.param_offload is True and arr.actor.fsdp_config.param_offload is False


def test_old_global_micro_batch_names_become_per_rank_sizes(paths):
    cfg = run_script(GRPO_OLD_NAMES, paths)  # 128 samples over the script's 8 GPUs (n_gpus_per_node=8, nnodes=1)
    arr = cfg.actor_rollout_ref
    assert cfg.trainer.num_workers == 8
    assert arr.actor.ppo_micro_batch_size_per_gpu == 16
    assert arr.rollout.log_prob_micro_batch_size_per_gpu == 16
    assert arr.ref.log_prob_micro_batch_size_per_gpu == 16
    cfg = run_script(GRPO_OLD_NAMES, paths, "trainer.n_gpus_per_node=4")
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 32
    assert cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu == 32
    # both names for the same setting: fine when they agree, refused when they do not
    same = run_script(GRPO_OLD_NAMES, paths, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16")
    assert same.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 16
    with pytest.raises(
        ConfigError,
        match=r"actor_rollout_ref\.actor\.ppo_micro_batch_size=128 means 16 per rank "
        r"over 8 ranks \(trainer\.n_gpus_per_node=8 × trainer\.nnodes=1\), but "
        r"actor_rollout_ref\.actor\.ppo_micro_batch_size_per_gpu=32",
    ):
        run_script(GRPO_OLD_NAMES, paths, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32")
    with pytest.raises(
        ConfigError,
        match=r"actor_rollout_ref\.rollout\.log_prob_micro_batch_size=128 .*does not "
        r"split over 3 ranks \(trainer\.n_gpus_per_node=3",
    ):
        run_script(
            GRPO_OLD_NAMES,
            paths,
            "trainer.n_gpus_per_node=3",
            "trainer.placement=split",
            "actor_rollout_ref.actor.ppo_micro_batch_size=null",
        )


def test_gpu_jobs_are_sized_by_gpus_per_node_times_nodes_as_in_verl(paths):
    assert run_script(GRPO, paths, "trainer.nnodes=2").trainer.num_workers == 16
    assert run_script(GRPO, paths, "trainer.num_workers=8").trainer.num_workers == 8  # agreeing is fine
    with pytest.raises(
        ConfigError,
        match=r"trainer\.num_workers=2 contradicts trainer\.n_gpus_per_node=8 × "
        r"trainer\.nnodes=1 = 8 GPU ranks",
    ):
        run_script(GRPO, paths, "trainer.num_workers=2")
    # on CPU (no GPUs per node) trainer.num_workers counts the ranks; nnodes has no meaning there
    cpu = run_script(
        GRPO,
        paths,
        "trainer.n_gpus_per_node=0",
        "data.train_batch_size=8",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    )
    assert cpu.trainer.num_workers == 2
    with pytest.raises(ConfigError, match=r"trainer\.nnodes=2 with trainer\.n_gpus_per_node=0: on CPU the ranks"):
        run_script(GRPO, paths, "trainer.n_gpus_per_node=0", "trainer.nnodes=2")


def test_ppo_script_with_a_critic(paths):
    from app.roles.factory import actor_engine_spec, critic_engine_spec

    cfg = run_script(PPO, paths, "critic.model.fsdp_config.param_offload=True", "critic.ppo_micro_batch_size=256")
    assert cfg.algorithm.adv_estimator == "gae" and cfg.critic.model.path == paths["model"]
    assert cfg.critic.ppo_micro_batch_size_per_gpu == 32  # 256 over the script's 8 GPUs, as its own per-GPU key says
    assert cfg.trainer.logger == ["console", "wandb"] and cfg.trainer.use_legacy_worker_impl == "auto"
    # critic.model.fsdp_config is the critic's engine's FSDP setting (and not the actor's)
    arr = cfg.actor_rollout_ref
    assert critic_engine_spec(cfg.critic, seed=0, rollout_n=arr.rollout.n).param_offload is True
    assert actor_engine_spec(arr.model, arr.actor, seed=0, rollout_n=arr.rollout.n).param_offload is False


def test_rloo_script(paths):
    cfg = run_script(RLOO, paths)
    assert cfg.algorithm.adv_estimator == "rloo" and cfg.algorithm.use_kl_in_reward
    assert cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu == 160


def test_reinforce_plus_plus_script(paths):
    cfg = run_script(REINFORCE_PP, paths)
    assert cfg.algorithm.adv_estimator == "reinforce_plus_plus"
    assert cfg.data.train_files == [paths["train"], paths["train2"]]
    assert cfg.actor_rollout_ref.actor.kl_loss_type == "mse"


def test_remax_script_log_prob_passes_follow_the_actors_token_budget(paths):
    cfg = run_script(REMAX, paths)
    arr = cfg.actor_rollout_ref
    assert cfg.algorithm.adv_estimator == "remax"
    for section in (arr.rollout, arr.ref):
        assert section.log_prob_use_dynamic_bsz is True and section.log_prob_max_token_len_per_gpu == 30000


def test_qwen3_script_whose_mini_batch_does_not_divide_the_batch(paths):
    from app.batch import TensorBatch
    from app.roles.common import iter_mini_batches, samples_per_rank

    cfg = run_script(GRPO_QWEN3, paths)
    arr = cfg.actor_rollout_ref
    assert (cfg.data.train_batch_size, arr.actor.ppo_mini_batch_size, arr.rollout.n) == (1024, 80, 3)
    # as verl splits it: each of the 8 ranks holds 1024 x 3 / 8 = 384 samples, in mini-batches of 80 x 3 / 8 = 30,
    # so twelve of 30 and a last one of 24
    mini = samples_per_rank("actor.ppo_mini_batch_size", 80, 3, cfg.trainer.num_workers)
    rows = TensorBatch({"x": torch.arange(384)})
    sizes = [len(m) for m in iter_mini_batches(rows, mini, shuffle=False, seed=0)]
    assert sizes == [30] * 12 + [24]
    assert arr.model.use_liger and arr.model.use_fused_kernels  # verl's GPU kernels: accepted, no effect here


def test_gpg_script(paths):
    from algos.catalog import estimator_traits

    cfg = run_script(GPG, paths)
    arr = cfg.actor_rollout_ref
    assert cfg.algorithm.adv_estimator == "gpg" and arr.actor.policy_loss.loss_mode == "gpg"
    assert estimator_traits("gpg").needs_groups and not arr.actor.use_kl_loss


def test_sync_ref_model_script(paths):
    cfg = run_script(SYNC_REF, paths)
    ref = cfg.actor_rollout_ref.ref
    assert (ref.sync_ref_model, ref.ref_model_sync_steps, ref.ref_model_mixup_alpha) == (True, 128, 0.9)
    assert ref.fsdp_config.param_offload and cfg.actor_rollout_ref.actor.use_kl_loss
    with pytest.raises(ConfigError, match=r"sync_ref_model=true with LoRA"):
        run_script(SYNC_REF, paths, "actor_rollout_ref.model.lora_rank=32")


def test_optimal_token_baseline_script(paths):
    cfg = run_script(OTB, paths)
    assert cfg.algorithm.adv_estimator == "optimal_token_baseline"
    assert cfg.actor_rollout_ref.actor.calculate_sum_pi_squared and cfg.actor_rollout_ref.rollout.n == 8


def test_gspo_script(paths):
    cfg = run_script(GSPO, paths)
    arr = cfg.actor_rollout_ref
    assert arr.actor.policy_loss.loss_mode == "gspo" and arr.actor.loss_agg_mode == "seq-mean-token-mean"
    assert arr.actor.ppo_max_token_len_per_gpu == 20480
    assert arr.ref.log_prob_max_token_len_per_gpu == arr.rollout.log_prob_max_token_len_per_gpu == 30720
    assert arr.rollout.mode == "async" and cfg.data.return_raw_chat and arr.actor.entropy_checkpointing
    assert cfg.reward_model.reward_manager == "prime" and cfg.trainer.log_val_generations == 2
    assert cfg.trainer.default_local_dir == paths["ckpt"]


def test_grpo_lora_script(paths):
    cfg = run_script(GRPO_LORA, paths)
    arr = cfg.actor_rollout_ref
    assert (arr.model.lora_rank, arr.model.lora_alpha) == (64, 32)
    assert arr.rollout.load_format == "safetensors" and arr.rollout.layered_summon is True
    assert cfg.trainer.logger == ["console", "wandb"]


def test_dapo_script_reward_kwargs_become_the_overlong_buffer(paths):
    cfg = run_script(DAPO, paths, **DAPO_SUPPORTED)
    assert cfg.reward_model.reward_manager == "dapo"
    assert cfg.reward_model.overlong_buffer == OverlongBufferConfig(
        enable=True, len=4096, penalty_factor=1.0, log=False
    )
    # max_resp_len names the budget the buffer ends at, which here is the rollout's response length
    with pytest.raises(
        ConfigError,
        match=r"reward_model\.reward_kwargs\.max_resp_len=8192: .*"
        r"actor_rollout_ref\.rollout\.response_length=4096",
    ):
        run_script(DAPO, paths, "actor_rollout_ref.rollout.response_length=4096", **DAPO_SUPPORTED)
    with pytest.raises(
        ConfigError,
        match=r"reward_kwargs\.overlong_buffer_cfg .* and reward_model\.overlong_buffer "
        r".* disagree",
    ):
        run_script(
            DAPO,
            paths,
            "reward_model.overlong_buffer.enable=true",
            "reward_model.overlong_buffer.len=16",
            **DAPO_SUPPORTED,
        )
    with pytest.raises(ConfigError, match=r"unknown key reward_model\.reward_kwargs\.max_resp_length "):
        run_script(DAPO, paths, "+reward_model.reward_kwargs.max_resp_length=8192", **DAPO_SUPPORTED)


def test_dapo_script_loads_as_published(paths):
    cfg = run_script(DAPO, paths, **DAPO_AS_PUBLISHED)
    arr = cfg.actor_rollout_ref
    # the actor's fsdp_size=32 over 64 ranks: hybrid sharding, two groups of 32 (four nodes of 8 GPUs each); the
    # script leaves the reference's at -1
    assert cfg.trainer.num_workers == 64
    assert (arr.actor.fsdp_config.fsdp_size, arr.ref.fsdp_config.fsdp_size) == (32, -1)
    spec = actor_engine_spec(arr.model, arr.actor, seed=0, rollout_n=arr.rollout.n)
    assert spec.fsdp_size == 32  # what the engine reads
    # its model config override: the trainer's engines, the reference and vLLM set it on the model's config
    assert arr.model.override_config == {"max_position_embeddings": 32768}
    assert spec.model_overrides == {"max_position_embeddings": 32768}
    assert ref_engine_spec(arr.model, arr.ref, arr.actor).model_overrides == {"max_position_embeddings": 32768}


def test_gmpo_script_with_sequence_parallelism_off(paths):
    cfg = run_script(GMPO, paths, **DAPO_SUPPORTED)
    arr = cfg.actor_rollout_ref
    assert arr.actor.policy_loss.loss_mode == "geo_mean" and cfg.algorithm.adv_estimator == "grpo"
    assert (arr.actor.clip_ratio_low, arr.actor.clip_ratio_high) == (0.4, 0.4)
    assert arr.actor.checkpoint.save_contents == ["model", "optimizer", "extra"]  # the shell's quoted list
    assert cfg.reward_model.overlong_buffer == OverlongBufferConfig(
        enable=True, len=4096, penalty_factor=1.0, log=False
    )
    assert cfg.trainer.num_workers == 64 and cfg.trainer.logger == ["console", "wandb"]


def test_gmpo_script_loads_as_published(paths):
    cfg = run_script(GMPO, paths, **DAPO_AS_PUBLISHED)
    arr = cfg.actor_rollout_ref
    assert arr.actor.ulysses_sequence_parallel_size == arr.ref.ulysses_sequence_parallel_size == 4
    assert arr.actor.fsdp_config.fsdp_size == 32
    assert arr.model.override_config == {"max_position_embeddings": 32768}


def test_fsdp_size_must_divide_the_ranks_and_fsdp_layout_keys_are_fsdp_only(paths, caplog):
    # 64 ranks: 48 does not divide them; 0 is no group
    for size in (48, 0):
        with pytest.raises(
            ConfigError,
            match=rf"^critic\.model\.fsdp_config\.fsdp_size={size}: give -1 \(one copy sharded over all 64 ranks "
            r"\(trainer\.n_gpus_per_node=8 × trainer\.nnodes=8\)\) or a divisor of 64",
        ):
            run_script(GMPO, paths, f"critic.model.fsdp_config.fsdp_size={size}", **DAPO_SUPPORTED)
    with caplog.at_level(logging.INFO, logger="app.config.validate"):
        cfg = run_script(GMPO, paths, "actor_rollout_ref.actor.fsdp_config.fsdp_size=128", **DAPO_SUPPORTED)
    assert cfg.actor_rollout_ref.actor.fsdp_config.fsdp_size == 128  # as in verl: all 64 ranks shard one copy
    assert "actor_rollout_ref.actor.fsdp_config.fsdp_size=128 is more than the 64 ranks" in caplog.text
    deepspeed = (
        "actor_rollout_ref.actor.strategy=deepspeed",
        "actor_rollout_ref.ref.strategy=deepspeed",
        "actor_rollout_ref.actor.fsdp_config.param_offload=false",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
        "actor_rollout_ref.ref.fsdp_config.param_offload=false",
        "actor_rollout_ref.actor.use_torch_compile=false",
    )
    with pytest.raises(
        ConfigError,
        match=r"^actor_rollout_ref\.ref\.fsdp_config\.reshard_after_forward=false is an FSDP setting and "
        r"actor_rollout_ref\.actor\.strategy=deepspeed ignores it",
    ):
        run_script(
            GMPO, paths, *deepspeed, "actor_rollout_ref.ref.fsdp_config.reshard_after_forward=false", **DAPO_SUPPORTED
        )
    cfg = run_script(GMPO, paths, "actor_rollout_ref.actor.fsdp_config.reshard_after_forward=false", **DAPO_SUPPORTED)
    arr = cfg.actor_rollout_ref
    assert actor_engine_spec(arr.model, arr.actor, seed=0, rollout_n=arr.rollout.n).reshard_after_forward is False
    with pytest.raises(
        ConfigError,
        match=r"^actor_rollout_ref\.actor\.fsdp_config\.fsdp_size=8 is FSDP's hybrid sharding and "
        r"actor_rollout_ref\.actor\.strategy=deepspeed ignores it",
    ):
        run_script(GMPO, paths, *deepspeed, "actor_rollout_ref.actor.fsdp_config.fsdp_size=8", **DAPO_SUPPORTED)


def test_ppo_sp2_script_loads_as_published_and_with_sequence_parallelism_off(paths):
    for sp_size in (2, 1):
        cfg = run_script(PPO_SP2, paths, sp_size=sp_size)
        assert cfg.algorithm.adv_estimator == "gae" and cfg.critic.model.path == paths["model"]
        assert cfg.critic.ppo_micro_batch_size_per_gpu == 64
        assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 32
        assert cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size == sp_size
        assert cfg.critic.ulysses_sequence_parallel_size == sp_size


def test_sglang_script_loads_as_published_and_vllm_serves_it(paths, caplog):
    with caplog.at_level(logging.WARNING, logger="app.config.verl_compat"):
        cfg = run_script(GRPO_SGLANG, paths)
    arr = cfg.actor_rollout_ref
    assert arr.rollout.name == "vllm" and "rollout.name=sglang: vLLM is the rollout engine here" in caplog.text
    assert arr.actor.use_dynamic_bsz is True and arr.actor.ppo_max_token_len_per_gpu == 24000
    assert arr.rollout.log_prob_use_dynamic_bsz is True and arr.rollout.log_prob_max_token_len_per_gpu == 24000
    assert (arr.rollout.n, arr.rollout.tensor_model_parallel_size, arr.rollout.mode) == (5, 2, "async")


def test_logger_given_as_one_name_becomes_a_list_and_unknown_names_are_named(paths, tmp_path):
    from app.trainer.tracking import Tracking

    assert run_script(GRPO, paths, "trainer.logger=console").trainer.logger == ["console"]
    cfg = run_script(GRPO, paths, "trainer.logger=consle")
    assert cfg.trainer.logger == ["consle"]
    with pytest.raises(ValueError, match=r"trainer\.logger: unknown logger 'consle'"):
        Tracking(cfg.trainer.logger, tmp_path, total_steps=1, start_step=0, project="p", experiment="e")


def test_a_sweep_trial_keeps_a_one_name_logger_and_adds_jsonl(tmp_path):
    from app.tuning.trial import TrialContext, built_config, trial_config_tree

    base = {"trainer": {"logger": "console"}}
    ctx = TrialContext(
        sweep_name="s",
        sweep_dir=str(tmp_path),
        project_name="p",
        base=base,
        base_cfg=built_config(base),
        metric="val-core/reward/mean",
        total_steps=1,
    )
    assert trial_config_tree(ctx, {}, "t0")["trainer"]["logger"] == ["console", "jsonl"]


def test_grpo_with_one_sample_per_prompt_loads_with_a_warning(paths, caplog):
    with caplog.at_level(logging.WARNING, logger="app.config.validate"):
        # 256 prompts x 1 sample over 2 ranks: the script's micro-batch of 40 no longer divides a rank's share
        cfg = run_script(
            GRPO, paths, "actor_rollout_ref.rollout.n=1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32"
        )
    assert cfg.actor_rollout_ref.rollout.n == 1
    assert "actor_rollout_ref.rollout.n=1" in caplog.text and "its own score" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="app.config.validate"):
        run_script(GRPO, paths)
    assert "rollout.n=1" not in caplog.text


def test_defaults_and_equivalent_values_of_unsupported_features_are_accepted(paths):
    cfg = run_script(
        GRPO,
        paths,
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1",
        "critic.ulysses_sequence_parallel_size=1",
        "actor_rollout_ref.actor.fsdp_config.fsdp_size=8",
        "critic.model.fsdp_config.fsdp_size=-1",
        "actor_rollout_ref.model.override_config={}",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        "actor_rollout_ref.actor.checkpoint.save_contents=[extra,model,optimizer,hf_model]",
        "actor_rollout_ref.rollout.max_model_len=1536",
        "actor_rollout_ref.rollout.mode=sync",
        "trainer.logger=[console,jsonl]",
        "trainer.log_val_generations=4",
        "trainer.use_legacy_worker_impl=disable",
    )
    arr = cfg.actor_rollout_ref
    assert arr.actor.fsdp_config.fsdp_size == 8  # all the ranks (8 GPUs): the one layout there is
    # verl: ${.save_contents}; the hf_model copy is never loaded
    assert arr.actor.checkpoint.load_contents == ["extra", "model", "optimizer", "hf_model"]


# ---------------------------------------------------------------- refusals name the key, the value and why
@pytest.mark.parametrize(
    "override, message",
    [
        (
            "reward_model.ulysses_sequence_parallel_size=2",
            r"reward_model\.ulysses_sequence_parallel_size=2: the reward model runs without sequence parallelism here",
        ),
        (
            "critic.model.fsdp_config.ulysses_sequence_parallel_size=2",
            r"critic\.model\.fsdp_config\.ulysses_sequence_parallel_size=2 disagrees with "
            r"critic\.ulysses_sequence_parallel_size=1, the key read here",
        ),
        (
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=3",
            r"actor_rollout_ref\.actor\.ulysses_sequence_parallel_size=3: 8 ranks \(trainer\.n_gpus_per_node=8 × "
            r"trainer\.nnodes=1\) do not split into groups of 3 ranks",
        ),
        (
            "actor_rollout_ref.actor.fsdp_config.fsdp_size=3",
            r"actor_rollout_ref\.actor\.fsdp_config\.fsdp_size=3: give -1 \(one copy sharded over all 8 ranks "
            r"\(trainer\.n_gpus_.* or a divisor of 8",
        ),
        ("critic.model.fsdp_config.fsdp_size=-2", r"critic\.model\.fsdp_config\.fsdp_size=-2: give -1"),
        (
            "actor_rollout_ref.rollout.multi_turn.tool_config_path=/no/such/tools.yaml",
            r"actor_rollout_ref\.rollout\.multi_turn\.tool_config_path='/no/such/tools.yaml': no such file",
        ),
        (
            "actor_rollout_ref.actor.checkpoint.save_contents=[model,hf_model]",
            r"actor_rollout_ref\.actor\.checkpoint\.save_contents=\['model', 'hf_model'\]: "
            r"checkpoints here always hold .* give all three \(hf_model adds a Hugging Face copy of the policy\)",
        ),
        (
            "critic.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
            r"critic\.checkpoint\.save_contents=\['model', 'optimizer', 'extra', 'hf_model'\]: .* give all three, or",
        ),
        ("critic.checkpoint.load_contents=[model]", r"critic\.checkpoint\.load_contents=\['model'\]"),
        (
            "reward_model.reward_manager=batch",
            r"reward_model\.reward_manager='batch' calls a custom compute_score once .*"
            r"set custom_reward_function\.path",
        ),
        ("reward_model.reward_manager=remote", r"reward_model\.reward_manager: 'remote' is not one of 'naive'"),
        (
            "+reward_model.reward_kwargs.max_resp_len=1024",
            r"reward_model\.reward_kwargs=\{'max_resp_len': 1024\} .* only reward_model\.reward_manager=dapo",
        ),
        ("trainer.log_val_generations=-1", r"trainer\.log_val_generations=-1 must be >= 0"),
        (
            "actor_rollout_ref.rollout.max_model_len=1000",
            r"actor_rollout_ref\.rollout\.max_model_len=1000 is shorter than a prompt and its response .* = 1536",
        ),
        ("actor_rollout_ref.rollout.mode=offline", r"actor_rollout_ref\.rollout\.mode: 'offline' is not one of"),
        (
            "actor_rollout_ref.rollout.load_format=gguf",
            r"actor_rollout_ref\.rollout\.load_format: 'gguf' is not one of",
        ),
    ],
)
def test_unsupported_settings_are_refused_naming_the_key(paths, override, message):
    with pytest.raises(ConfigError, match=message):
        run_script(GRPO, paths, override)


def test_validation_samples_go_to_table_loggers_as_in_verl(paths):
    cfg = run_script(GSPO, paths, "trainer.logger=[console,tensorboard]")  # refused before the tables existed
    assert cfg.trainer.log_val_generations == 2 and cfg.trainer.logger == ["console", "tensorboard"]


def test_log_prob_budget_must_hold_one_sequence(paths):
    with pytest.raises(
        ConfigError,
        match=r"actor_rollout_ref\.ref\.log_prob_max_token_len_per_gpu=8000 is smaller "
        r"than one sequence .* = 10240",
    ):
        run_script(GSPO, paths, "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=8000")


# ---------------------------------------------------------------- the log-prob keys reach the passes
class RecordingEngine:
    """Stands in for the FSDP engine: records the StepContext of each forward."""

    has_adapter = False

    def __init__(self, *_: object) -> None:
        self.contexts = []

    def init_model(self) -> None:
        pass

    @contextlib.contextmanager
    def eval_mode(self):
        yield

    def forward_backward_step(self, batch, ctx, forward_only=False):
        from app.batch import TensorBatch
        from app.engine import StepResult

        self.contexts.append(ctx)
        shape = batch["responses"].shape
        return StepResult(TensorBatch({"log_probs": torch.zeros(shape), "entropy": torch.zeros(shape)}), {}, 0.0)


def log_prob_contexts(arr):
    """The StepContexts of the actor's old-log-prob pass and the reference pass, as app.roles.factory builds them."""
    from app.batch import TensorBatch
    from app.roles import factory

    batch = TensorBatch(
        {
            "input_ids": torch.ones(2, 5, dtype=torch.long),
            "attention_mask": torch.ones(2, 5),
            "responses": torch.ones(2, 2, dtype=torch.long),
        }
    )
    actor, reference = factory.build_actor(arr, seed=0), factory.build_reference(arr)
    actor.compute_log_prob(batch)
    reference.compute_ref_log_prob(batch)
    (old,), (ref,) = actor.engine.contexts, reference.engine.contexts
    return old, ref


def test_log_prob_batching_keys_reach_the_actor_and_reference_passes(paths, monkeypatch):
    from app.roles import factory

    monkeypatch.setattr(factory, "make_engine", RecordingEngine)
    cfg = run_script(GSPO, paths, "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=40000")
    old, ref = log_prob_contexts(cfg.actor_rollout_ref)
    assert (old.use_dynamic_bsz, old.max_token_len) == (True, 30720)
    assert (ref.use_dynamic_bsz, ref.max_token_len) == (True, 40000)
    cfg = run_script(GRPO_OLD_NAMES, paths, "actor_rollout_ref.ref.log_prob_micro_batch_size=32")
    old, ref = log_prob_contexts(cfg.actor_rollout_ref)
    assert (old.use_dynamic_bsz, old.micro_batch_size) == (False, 16)  # 128 over 8 ranks
    assert (ref.use_dynamic_bsz, ref.micro_batch_size) == (False, 4)  # 32 over 8 ranks


def test_newer_verl_lr_scheduler_type_is_warmup_style(paths):
    cfg = run_script(GRPO, paths, "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine")
    assert cfg.actor_rollout_ref.actor.optim.warmup_style == "cosine"
    assert cfg.critic.optim.warmup_style == "constant"  # only the section that named it
    from app.engine import OptimSpec

    assert OptimSpec.from_config(cfg.actor_rollout_ref.actor.optim).warmup_style == "cosine"  # what the engine reads
    with pytest.raises(
        ConfigError,
        match=r"critic\.optim\.lr_scheduler_type='constant' and critic\.optim\."
        r"warmup_style='cosine' name the same setting",
    ):
        run_script(GRPO, paths, "critic.optim.lr_scheduler_type=constant", "critic.optim.warmup_style=cosine")


def test_newer_verl_optim_clip_grad_is_the_roles_grad_clip(paths):
    from app.roles.factory import actor_engine_spec

    cfg = run_script(GRPO, paths, "actor_rollout_ref.actor.optim.clip_grad=0.5")
    arr = cfg.actor_rollout_ref
    assert (arr.actor.grad_clip, cfg.critic.grad_clip) == (0.5, 1.0)  # only the role that named it
    assert actor_engine_spec(arr.model, arr.actor, seed=0, rollout_n=arr.rollout.n).grad_clip == 0.5  # the engine's
    with pytest.raises(
        ConfigError, match=r"^critic\.optim\.clip_grad=0\.5 and critic\.grad_clip=2\.0 name the same setting"
    ):
        run_script(GRPO, paths, "critic.optim.clip_grad=0.5", "critic.grad_clip=2.0")


def test_verl_truncated_importance_sampling_cap_is_token_level_rollout_correction(paths):
    off = run_script(GRPO, paths).algorithm.rollout_correction
    assert (off.rollout_is, off.rollout_is_threshold) == (None, 2.0)  # -1, verl's default: no weights
    rc = run_script(GRPO, paths, "actor_rollout_ref.actor.tis_imp_ratio_cap=3.0").algorithm.rollout_correction
    assert (rc.rollout_is, rc.rollout_is_threshold, rc.bypass_mode) == ("token", 3.0, False)
    assert (
        run_script(GRPO, paths, "actor_rollout_ref.actor.tis_imp_ratio_cap=0").algorithm.rollout_correction.rollout_is
        is None
    )
    same = run_script(
        GRPO,
        paths,
        "actor_rollout_ref.actor.tis_imp_ratio_cap=3.0",
        "algorithm.rollout_correction.rollout_is=token",
        "algorithm.rollout_correction.rollout_is_threshold=3.0",
    ).algorithm.rollout_correction
    assert (same.rollout_is, same.rollout_is_threshold) == ("token", 3.0)
    with pytest.raises(
        ConfigError,
        match=r"^actor_rollout_ref\.actor\.tis_imp_ratio_cap=3\.0 is algorithm\.rollout_correction\.rollout_is=token "
        r"with rollout_is_threshold=3\.0, but rollout_correction sets rollout_is=sequence with "
        r"rollout_is_threshold=2\.0",
    ):
        run_script(
            GRPO,
            paths,
            "actor_rollout_ref.actor.tis_imp_ratio_cap=3.0",
            "algorithm.rollout_correction.rollout_is=sequence",
        )
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.actor\.tis_imp_ratio_cap=3\.0 .*bypass_mode=true"):
        run_script(
            GRPO,
            paths,
            "actor_rollout_ref.actor.tis_imp_ratio_cap=3.0",
            "algorithm.rollout_correction.bypass_mode=true",
        )
    # the checks of rollout_correction apply to the mapped setting: the sampler's log-probs of a truncated distribution
    with pytest.raises(ConfigError, match=r"^algorithm\.rollout_correction\.rollout_is=token reads the sampler's"):
        run_script(GRPO, paths, "actor_rollout_ref.actor.tis_imp_ratio_cap=3.0", "actor_rollout_ref.rollout.top_p=0.9")


# ---------------------------------------------------------------- --dry-run: each script's layout on the GPUs it names
@pytest.mark.parametrize(
    "script, extra",
    [
        (GRPO, {}),
        (GRPO_OLD_NAMES, {}),
        (PPO, {}),
        (RLOO, {}),
        (REINFORCE_PP, {}),
        (REMAX, {}),
        (GSPO, {}),
        (GRPO_LORA, {}),
        (DAPO, DAPO_SUPPORTED),
        (GMPO, DAPO_SUPPORTED),
        (PPO_SP2, dict(sp_size=1)),
        (GRPO_SGLANG, {}),
    ],
)
def test_dry_run_places_each_script_on_the_gpus_it_names(paths, script, extra):
    from app.dry_run import DryRun, run_dry

    cfg = run_script(script, paths, **extra)
    t, r = cfg.trainer, cfg.actor_rollout_ref.rollout
    text = run_dry(cfg, DryRun(nodes=t.nnodes, gpus_per_node=t.n_gpus_per_node))
    ranks, tp = t.n_gpus_per_node * t.nnodes, r.tensor_model_parallel_size
    # verl's hybrid engine: the rollout shares the training GPUs, one replica per tensor-parallel group
    assert f"trainer.device=cuda, trainer.placement=colocated, {ranks} training ranks" in text
    assert f"rollout replica x{ranks // tp}: " in text and f"train worker x{ranks}: " in text
    assert f"in all: {ranks * t.cpus_per_worker + ranks // tp * r.cpus_per_replica:g} CPU, {ranks:g} GPU" in text
    assert text.endswith("nothing was started (--dry-run)")
    # one node fewer (or half the GPUs of a one-node script): refused, naming what is short
    fewer = (
        DryRun(nodes=t.nnodes - 1, gpus_per_node=t.n_gpus_per_node)
        if t.nnodes > 1
        else DryRun(nodes=1, gpus_per_node=t.n_gpus_per_node // 2)
    )
    with pytest.raises(
        ConfigError,
        match=rf"the run needs .*{ranks:g} GPU .*but the described cluster .* GPU is "
        rf"short by {ranks // 2 if t.nnodes == 1 else t.n_gpus_per_node:g}",
    ):
        run_dry(cfg, fewer)


# ---------------------------------------------------------------- Ulysses sequence parallelism: verl's batch meaning
def test_sequence_parallel_groups_make_the_data_parallel_size_ranks_over_the_group_size(paths):
    # 256 samples per mini-batch; 8 ranks in groups of 2: 4 data-parallel groups of 64 samples each, which a
    # micro-batch of 64 divides (per group, as in verl); without sequence parallelism each rank holds 32
    micro = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64"
    assert run_script(PPO_SP2, paths, micro, sp_size=2).actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 64
    with pytest.raises(
        ConfigError,
        match=r"^each worker gets 32 samples per mini-batch .*"
        r"ppo_micro_batch_size_per_gpu=64 does not divide",
    ):
        run_script(PPO_SP2, paths, micro, sp_size=1)
    with pytest.raises(
        ConfigError,
        match=r"^each group of actor_rollout_ref\.actor\.ulysses_sequence_parallel_size=2 "
        r"ranks \(data parallel size 4\) gets 64 samples per mini-batch "
        r"\(ppo_mini_batch_size=256 × rollout\.n=1 / 4\), which "
        r"actor_rollout_ref\.actor\.ppo_micro_batch_size_per_gpu=48 does not divide",
    ):
        run_script(PPO_SP2, paths, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=48", sp_size=2)


def test_old_global_micro_batch_sizes_are_divided_by_the_data_parallel_size(paths):
    old = [
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null",
        "actor_rollout_ref.actor.ppo_micro_batch_size=128",
        "critic.ppo_micro_batch_size_per_gpu=null",
        "critic.ppo_micro_batch_size=128",
    ]
    for sp_size, per_group in ((2, 32), (1, 16)):  # 128 over 8 ranks / sp_size
        cfg = run_script(PPO_SP2, paths, *old, sp_size=sp_size)
        assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == per_group
        assert cfg.critic.ppo_micro_batch_size_per_gpu == per_group
    with pytest.raises(
        ConfigError,
        match=r"critic\.ppo_micro_batch_size=6 .* does not split over 4 data-parallel "
        r"groups \(8 ranks .* / critic\.ulysses_sequence_parallel_size=2\)",
    ):
        run_script(
            PPO_SP2, paths, "critic.ppo_micro_batch_size_per_gpu=null", "critic.ppo_micro_batch_size=6", sp_size=2
        )


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "critic.strategy=deepspeed",
            r"^critic\.ulysses_sequence_parallel_size=2: strategy=deepspeed has no sequence "
            r"parallelism here; use strategy=fsdp2 for it or set ulysses_sequence_parallel_size "
            r"to 1",
        ),
        (
            "critic.model.use_remove_padding=false",
            r"^critic\.ulysses_sequence_parallel_size=2 splits packed sequences "
            r"across ranks: it needs critic\.model\.use_remove_padding=true",
        ),
        (
            "critic.use_torch_compile=true",
            r"^critic\.ulysses_sequence_parallel_size=2 runs the layers eagerly \(compiled "
            r"layers are not checked around its all-to-alls\): set critic\.use_torch_compile"
            r"=false or ulysses_sequence_parallel_size to 1",
        ),
        (
            "actor_rollout_ref.actor.use_torch_compile=true",
            r"^actor_rollout_ref\.actor\.ulysses_sequence_parallel_size=2 runs the layers eagerly",
        ),
        (
            "actor_rollout_ref.model.use_remove_padding=false",
            r"^actor_rollout_ref\.actor\.ulysses_sequence_parallel_size=2 .* needs actor_rollout_ref\.model\."
            r"use_remove_padding=true",
        ),
    ],
)
def test_what_sequence_parallelism_cannot_run_with_is_refused(paths, override, message):
    with pytest.raises(ConfigError, match=message):
        run_script(PPO_SP2, paths, override, sp_size=2)


def test_a_model_whose_heads_the_group_does_not_divide_is_refused_before_any_worker_starts(paths):
    (Path(paths["model"]) / "config.json").write_text('{"num_attention_heads": 30, "num_key_value_heads": 2}')
    assert run_script(PPO_SP2, paths, sp_size=2).critic.ulysses_sequence_parallel_size == 2
    with pytest.raises(
        ConfigError,
        match=r"^actor_rollout_ref\.actor\.ulysses_sequence_parallel_size=4: the model "
        r"at .* has 30 attention heads, which 4 ranks cannot share evenly",
    ):
        run_script(PPO_SP2, paths, sp_size=4)


def test_pf_ppo_keys_are_read_and_checked(paths):
    cfg = run_script(GRPO, paths, "algorithm.use_pf_ppo=true", "algorithm.pf_ppo.reweight_method=max_random")
    assert cfg.algorithm.use_pf_ppo and cfg.algorithm.pf_ppo.reweight_method == "max_random"
    with pytest.raises(ConfigError, match=r"^algorithm\.pf_ppo\.weight_pow=-1\.0 must be >= 0"):
        run_script(GRPO, paths, "algorithm.use_pf_ppo=true", "algorithm.pf_ppo.weight_pow=-1")
    with pytest.raises(ConfigError, match=r"algorithm\.pf_ppo\.reweight_method: 'median' is not one of"):
        run_script(GRPO, paths, "algorithm.use_pf_ppo=true", "algorithm.pf_ppo.reweight_method=median")
