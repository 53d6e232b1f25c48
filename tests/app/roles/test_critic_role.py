from __future__ import annotations

import pytest
import torch

from app.config.schema import CriticConfig
from app.roles.factory import build_critic


def test_critic_update_lowers_the_value_loss(tiny_llama_dir, make_rl_batch):
    cfg = CriticConfig()
    cfg.model.path = str(tiny_llama_dir)
    cfg.ppo_mini_batch_size = 4
    cfg.ppo_epochs = 1
    cfg.cliprange_value = 100.0  # effectively unclipped: the loss can keep falling over several updates
    cfg.optim.lr = 1e-2
    cfg.optim.weight_decay = 0.0
    critic = build_critic(cfg, rollout_n=1, device="cpu", seed=0)
    batch = make_rl_batch([5, 3, 6, 2], [4, 2, 4, 3])
    values = critic.compute_values(batch)["values"]
    assert values.shape == batch["responses"].shape
    assert (values[batch["response_mask"] == 0] == 0).all()
    batch["values"] = values
    batch["returns"] = torch.tensor([1.0, -1.0, 0.5, 2.0])[:, None] * batch["response_mask"]
    losses = [critic.update_critic(batch)["critic/vf_loss"] for _ in range(6)]
    metrics = critic.update_critic(batch)
    assert {"critic/vf_loss", "critic/vf_clipfrac", "critic/grad_norm", "critic/lr"} <= metrics.keys()
    assert metrics["critic/vf_clipfrac"] == 0.0  # a clip range of 100 never binds
    assert losses[-1] < 0.5 * losses[0], losses
    # the reported loss is the clipped value loss of the batch before the step: 0.5 * token-mean squared error
    fresh = critic.compute_values(batch)["values"]
    mask = batch["response_mask"].bool()
    expected = 0.5 * ((fresh - batch["returns"])[mask] ** 2).mean()
    assert abs(critic.update_critic(batch)["critic/vf_loss"] - float(expected)) < 1e-3 * float(expected) + 1e-6


def test_seq_mean_token_sum_norm_divides_by_the_response_budget(tiny_llama_dir, make_rl_batch):
    # the critic has no key for it: verl's divides by the horizon it pads to, data.max_response_length, given here as
    # response_budget; 8 is twice the padded width of these answers (4), so the gradient halves
    norms = {}
    for budget in (None, 8):  # None: the padded width
        cfg = CriticConfig()
        cfg.model.path = str(tiny_llama_dir)
        cfg.ppo_mini_batch_size = 4
        cfg.ppo_epochs = 1
        cfg.loss_agg_mode = "seq-mean-token-sum-norm"
        cfg.model.fsdp_config.mixed_precision.param_dtype = "fp32"
        critic = build_critic(cfg, rollout_n=1, device="cpu", seed=0, response_budget=budget)
        batch = make_rl_batch([5, 3, 6, 2], [4, 2, 4, 3])
        batch["values"] = critic.compute_values(batch)["values"]
        batch["returns"] = torch.tensor([1.0, -1.0, 0.5, 2.0])[:, None] * batch["response_mask"]
        norms[budget] = critic.update_critic(batch)["critic/grad_norm"]
    assert norms[8] == pytest.approx(norms[None] / 2, rel=1e-5)


@pytest.mark.parametrize("strategy", ["fsdp2", "deepspeed"])
def test_critic_lora_trains_adapters_and_the_value_head_and_resumes(strategy, tiny_llama_dir, make_rl_batch, tmp_path):
    # verl's critic.model.lora_rank: adapters on the value model, the fresh value head trained whole
    def critic_of():
        cfg = CriticConfig(strategy=strategy)
        cfg.model.path, cfg.model.lora_rank, cfg.model.lora_alpha = str(tiny_llama_dir), 8, 16
        cfg.ppo_mini_batch_size, cfg.ppo_epochs, cfg.cliprange_value = 4, 1, 100.0
        cfg.optim.lr, cfg.optim.weight_decay = 1e-2, 0.0
        return build_critic(cfg, rollout_n=1, device="cpu", seed=0)

    critic = critic_of()
    trained = {n for n, p in critic.engine.model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n or ".score." in n for n in trained), sorted(trained)
    assert any(".score." in n for n in trained) and any("lora_A" in n for n in trained)
    frozen = [n for n, p in critic.engine.model.named_parameters() if not p.requires_grad]
    assert any("q_proj.base_layer" in n for n in frozen)  # the base weights stay as loaded
    batch = make_rl_batch([5, 3, 6, 2], [4, 2, 4, 3])
    batch["values"] = critic.compute_values(batch)["values"]
    batch["returns"] = torch.tensor([1.0, -1.0, 0.5, 2.0])[:, None] * batch["response_mask"]
    losses = [critic.update_critic(batch)["critic/vf_loss"] for _ in range(6)]
    assert losses[-1] < 0.5 * losses[0], losses
    critic.engine.save_checkpoint(str(tmp_path / "critic"))
    resumed = critic_of()
    resumed.engine.load_checkpoint(str(tmp_path / "critic"))
    torch.testing.assert_close(resumed.compute_values(batch)["values"], critic.compute_values(batch)["values"])
