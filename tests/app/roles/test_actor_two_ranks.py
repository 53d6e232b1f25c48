"""The actor update on 2 gloo ranks (each holding half the batch) equals the update on 1 rank, in fp32.

This checks the global loss normaliser (``rank_normalizer``) and the all-rank metric reduction: ranks hold
different token counts, so per-rank means averaged naively would differ from the one-rank values.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from app.config.schema import ActorRolloutRefConfig
from app.roles.factory import build_actor

PROMPTS, RESPONSES = [5, 3, 6, 2], [4, 1, 4, 3]  # rank 0 gets 5 response tokens, rank 1 gets 7


def _config(model_dir):
    cfg = ActorRolloutRefConfig()
    cfg.model.path = str(model_dir)
    cfg.actor.ppo_mini_batch_size = 4  # the whole batch: one mini-batch, identical on 1 and 2 ranks
    cfg.actor.ppo_micro_batch_size_per_gpu = 1
    cfg.actor.ppo_epochs = 2
    cfg.actor.loss_agg_mode = "token-mean"
    cfg.actor.entropy_coeff = 0.01
    cfg.actor.optim.lr = 1e-2
    cfg.actor.fsdp_config.mixed_precision.param_dtype = "fp32"
    return cfg


def _update(model_dir, batch):
    actor = build_actor(_config(model_dir), device="cpu", seed=0)
    shard = actor.engine.shard_data(batch)
    shard.update(actor.compute_log_prob(shard))
    shard["advantages"] = (
        torch.tensor([1.0, -0.5, 0.3, -1.0]).chunk(actor.engine.dp_world_size)[actor.engine.dp_rank][:, None]
        * shard["response_mask"]
    )
    metrics = actor.update_policy(shard)
    after = actor.engine.unshard_data(actor.compute_log_prob(shard, calculate_entropy=False))
    return metrics, after["old_log_probs"]


def _worker(rank, world, init_file, model_dir, batch, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        result = _update(model_dir, batch)
        if rank == 0:
            torch.save(result, os.path.join(out_dir, "actor_two_ranks.pt"))
    finally:
        dist.destroy_process_group()


def test_actor_update_on_two_ranks_equals_one_rank(tiny_llama_dir, make_rl_batch, tmp_path):
    batch = make_rl_batch(PROMPTS, RESPONSES, seed=5)
    mp.spawn(_worker, args=(2, str(tmp_path / "pg_init"), str(tiny_llama_dir), batch, str(tmp_path)), nprocs=2)
    two_metrics, two_after = torch.load(tmp_path / "actor_two_ranks.pt", weights_only=False)
    one_metrics, one_after = _update(tiny_llama_dir, batch)
    assert two_metrics.keys() == one_metrics.keys()
    for name, value in one_metrics.items():
        assert abs(two_metrics[name] - value) <= 1e-5 * abs(value) + 1e-7, (name, two_metrics[name], value)
    # two Adam steps later the policies agree (Adam's sign-like first step allows ~1e-4 drift in log-probs)
    torch.testing.assert_close(two_after, one_after, rtol=0, atol=1e-4)
