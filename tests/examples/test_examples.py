"""Every script in examples/ runs as written: its commands load through the same checks as the entry points (config
loader, sweep parser, argparse), and the custom reward and loss do what their docstrings say."""

from __future__ import annotations

import pytest
import torch
from command_check import REPO, check_call, load_train_config, record_calls

from algos.catalog import POLICY_LOSSES, policy_loss_traits
from algos.policy_loss_config import PolicyLossConfig
from app.rewards.custom import RewardFnSpec, load_reward_fn

EXAMPLES = REPO / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.sh"))


def test_every_example_is_listed_in_the_examples_readme():
    listed = (EXAMPLES / "README.md").read_text()
    for path in [*SCRIPTS, *EXAMPLES.glob("*.py")]:
        assert f"({path.name})" in listed, path.name
    assert len(SCRIPTS) >= 9


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_the_scripts_commands_load(script, tmp_path, monkeypatch):
    calls = record_calls(script.read_text(), tmp_path / "calls")
    verbs = [check_call(call, monkeypatch) for call in calls]
    assert "app.train" in verbs or "app.sweep" in verbs, verbs


def test_extra_arguments_reach_the_trainer_as_overrides(tmp_path):
    [call] = record_calls(
        (EXAMPLES / "lora.sh").read_text(), tmp_path / "calls", args=("trainer.total_training_steps=3",)
    )
    cfg = load_train_config(call[3:])
    assert cfg.trainer.total_training_steps == 3 and cfg.actor_rollout_ref.model.lora_rank == 32


def test_the_gpu_example_trains_on_the_gpus_of_one_node(tmp_path):
    calls = record_calls((EXAMPLES / "gsm8k_grpo_gpu.sh").read_text(), tmp_path / "calls")
    cfg = load_train_config(calls[-1][3:])
    assert cfg.trainer.n_gpus_per_node == 8 and cfg.trainer.nnodes == 1
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.actor_rollout_ref.model.lora_rank == 0


def test_the_custom_reward_scores_as_documented():
    fn = load_reward_fn(RewardFnSpec(path=str(EXAMPLES / "custom_reward.py")))
    assert fn("x", "so 3 + 4 = 7\n#### 7", "7", None) == {"score": 1.0, "formatted": 1.0}
    assert fn("x", "#### 1,000", "1000", None)["score"] == 1.0
    assert fn("x", "#### 8", "7", None) == {"score": 0.2, "formatted": 1.0}
    assert fn("x", "the answer is 7", "7", None) == {"score": 0.0, "formatted": 0.0}


def test_the_custom_loss_is_found_by_module_and_function_and_weights_by_the_clipped_ratio(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    loss_fn = POLICY_LOSSES.get("examples.custom_loss:clipped_pg")
    assert policy_loss_traits("examples.custom_loss:clipped_pg").linear_in_advantage
    config = PolicyLossConfig(
        clip_ratio=0.2,
        clip_ratio_low=None,
        clip_ratio_high=None,
        clip_ratio_c=3.0,
        clip_cov_ratio=0.0002,
        clip_cov_lb=1.0,
        clip_cov_ub=5.0,
        kl_cov_ratio=0.0002,
        ppo_kl_coef=0.1,
    )
    old = torch.zeros(1, 2)
    log_prob = torch.tensor([[0.0, 0.5]], requires_grad=True)  # ratios 1 and e^0.5 = 1.65, clipped to 1.2
    advantages, mask = torch.ones(1, 2), torch.ones(1, 2)
    loss, metrics = loss_fn(old, log_prob, advantages, mask, loss_agg_mode="token-mean", config=config)
    loss.backward()
    # token-mean of -w * A * log_prob: d/dlog_prob = -w / 2 per token, w = 1 and 1.2
    assert torch.allclose(log_prob.grad, torch.tensor([[-0.5, -0.6]]))
    assert float(metrics["pg_clipfrac"]) == 0.5
