"""FSDP2 layouts from verl's fsdp_config keys, on four gloo ranks: hybrid sharding (fsdp_size=2: two shard groups of
two) and weights kept gathered from forward to backward (reshard_after_forward=false) train as four ranks sharding one
copy do, and a checkpoint written with groups loads into full sharding."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from support import engine_spec, optim_spec, synced_weights, token_mean_update
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor, Replicate, Shard

from app.engine import make_engine
from app.engine.fsdp_engine import sharding_mesh

PROMPTS, RESPONSES = [6, 3, 5, 2, 4, 6, 2, 3], [4, 1, 3, 4, 2, 2, 4, 1]
WORLD = 4


def _engine(path, fsdp_size, reshard_after_forward=True, **kwargs):
    spec = engine_spec(
        path,
        optim=optim_spec(lr=1e-2, weight_decay=0.01),
        param_dtype="fp32",
        device="cpu",
        micro_batch_size_per_gpu=1,
        fsdp_size=fsdp_size,
        reshard_after_forward=reshard_after_forward,
        **kwargs,
    )
    engine = make_engine("fsdp2", spec)
    engine.init_model()
    return engine


def _one_step(engine, batch):
    loss, grad_norm = token_mean_update(engine, batch)
    return {"loss": loss, "grad_norm": grad_norm, "weights": synced_weights(engine)}


def _layout(engine):
    """(mesh shape, placements) of the first trained parameter."""
    param = next(p for p in engine.model.parameters() if p.requires_grad)
    return tuple(param.device_mesh.shape), tuple(param.placements)


def _gathered_after_forward(engine, batch):
    """Whether a decoder layer's weights are still gathered (plain tensors, not shards) once a forward that a backward
    will follow has run."""
    layer = next(m for m in engine.model.modules() if type(m).__name__.endswith("LlamaDecoderLayer"))
    engine.model(input_ids=batch["input_ids"][:1])
    gathered = not any(isinstance(p, DTensor) for p in layer.parameters())
    for module in engine.model.modules():  # no backward follows here: free what the forward kept
        if isinstance(module, FSDPModule):
            module.reshard()
    return gathered


def _worker(rank, init_file, path, batch, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        results = {}
        for kind, kwargs in (("full", {}), ("lora", {"lora_rank": 4})):
            hybrid = _engine(path, 2, **kwargs)
            layout = _layout(hybrid)
            hybrid_step = _one_step(hybrid, batch)
            hybrid.save_checkpoint(os.path.join(out_dir, f"ckpt_{kind}"))
            sharded = _engine(path, -1, **kwargs)
            sharded_layout = _layout(sharded)
            sharded_gathered = _gathered_after_forward(sharded, batch)
            sharded_step = _one_step(sharded, batch)
            kept = _engine(path, -1, reshard_after_forward=False, **kwargs)
            kept_gathered = _gathered_after_forward(kept, batch)
            kept_step = _one_step(kept, batch)
            # a resume in the other layout: an untrained fully sharded engine loads the hybrid engine's checkpoint
            resumed = _engine(path, -1, **kwargs)
            resumed.load_checkpoint(os.path.join(out_dir, f"ckpt_{kind}"))
            results[kind] = {
                "layouts": (layout, sharded_layout),
                "hybrid": hybrid_step,
                "sharded": sharded_step,
                "kept": kept_step,
                "gathered after forward": (sharded_gathered, kept_gathered),
                "resumed": synced_weights(resumed),
            }
        if rank == 0:
            torch.save(results, os.path.join(out_dir, "results.pt"))
    finally:
        dist.destroy_process_group()
    os._exit(0)  # as in test_fsdp_two_ranks: skip a teardown that can abort after the work is saved


def test_layouts_train_as_one_sharded_copy_and_checkpoints_load_across_them(tiny_llama_dir, make_rl_batch, tmp_path):
    batch = make_rl_batch(PROMPTS, RESPONSES, seed=5)
    mp.spawn(_worker, args=(str(tmp_path / "pg_init"), str(tiny_llama_dir), batch, str(tmp_path)), nprocs=WORLD)
    results = torch.load(tmp_path / "results.pt", weights_only=False)
    for kind, r in results.items():
        hybrid, sharded = r["hybrid"], r["sharded"]
        # two groups of two ranks, each holding half of a parameter (row-wise) and the groups the same halves
        assert r["layouts"] == (((2, 2), (Replicate(), Shard(0))), ((4,), (Shard(0),))), kind
        assert abs(hybrid["loss"] - sharded["loss"]) < 1e-5 * abs(sharded["loss"]), kind
        # the gradient is reduced in another order (within the groups, then across them): fp32 rounding only
        assert abs(hybrid["grad_norm"] - sharded["grad_norm"]) < 1e-5 * sharded["grad_norm"], kind
        assert hybrid["weights"].keys() == sharded["weights"].keys()
        for name, w in sharded["weights"].items():
            # Adam's first step amplifies rounding in gradients near eps (test_fsdp_two_ranks says why): fewer than
            # 1% of entries may differ by more than 1e-6, none by a tenth of an lr step
            diff = (hybrid["weights"][name] - w).abs()
            assert diff.max() < 1e-3 and (diff > 1e-6).float().mean() < 0.01, (kind, name, diff.max())
        for name, w in hybrid["weights"].items():
            torch.testing.assert_close(r["resumed"][name], w, rtol=0, atol=0)  # the checkpoint's own numbers
        # reshard_after_forward=false: the layer stays gathered after its forward, and the step is the same step (the
        # same reductions in the same order: only when the weights are gathered differs)
        assert r["gathered after forward"] == (False, True), kind
        kept = r["kept"]
        assert (kept["loss"], kept["grad_norm"]) == (sharded["loss"], sharded["grad_norm"]), kind
        for name, w in sharded["weights"].items():
            torch.testing.assert_close(kept["weights"][name], w, rtol=0, atol=0)


@pytest.mark.parametrize("fsdp_size, shape", [(-1, (4,)), (4, (4,)), (8, (4,)), (2, (2, 2)), (1, (4, 1))])
def test_the_mesh_shards_over_every_rank_unless_fsdp_size_divides_them(fsdp_size, shape, monkeypatch):
    calls = []
    monkeypatch.setattr("app.engine.fsdp_engine.init_device_mesh", lambda device, dims, **kw: calls.append(dims))
    sharding_mesh("cpu", 4, fsdp_size)
    assert calls == [shape]


@pytest.mark.parametrize("fsdp_size", [0, 3])
def test_a_size_that_does_not_divide_the_ranks_is_refused(fsdp_size):
    with pytest.raises(ValueError, match=rf"fsdp_size={fsdp_size} must be -1 or divide the 4 ranks"):
        sharding_mesh("cpu", 4, fsdp_size)
