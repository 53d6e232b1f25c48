"""Large models load once: rank 0 reads the weights, the other ranks build an empty skeleton and receive their shards.

Two gloo ranks (torch.multiprocessing spawn, no Ray) load a ~190 MB fp32 model; each rank's peak resident memory
growth during ``init_model`` is compared with the model's size, and the gathered shards with the file's tensors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from support import engine_spec, optim_spec, synced_weights

from app.engine import StepContext, make_engine


@pytest.fixture(scope="module")
def mid_llama_dir(tmp_path_factory) -> Path:
    """16 layers of hidden 512: ~47M parameters (~190 MB fp32) in many tensors, the largest 8 MB, so that one
    tensor in flight is small next to the model (as for a real model's layers)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("mid-llama")
    config = LlamaConfig(
        vocab_size=4096,
        hidden_size=512,
        intermediate_size=1024,
        num_hidden_layers=16,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    return out


def _file_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    weights = {}
    for f in sorted(path.glob("*.safetensors")):
        weights.update(load_file(f))
    return weights


def _reset_peak_rss() -> None:
    """Restart this process's resident-memory high-water mark (VmHWM) from its current size (Linux >= 4.0). Not
    ru_maxrss: that keeps the pytest parent's peak, which a child started by spawn inherits across exec."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def _worker(rank, world, init_file, path, warm_up_path, out_dir, load_on_rank0=None):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        # a tiny model first, so that the libraries' import and first-use costs are not counted below
        make_engine("fsdp2", engine_spec(warm_up_path, optim=None, param_dtype="fp32", device="cpu")).init_model()
        spec = engine_spec(
            path, optim=None, param_dtype="fp32", model_dtype="fp32", device="cpu", load_on_rank0=load_on_rank0
        )
        engine = make_engine("fsdp2", spec)
        dist.barrier()
        _reset_peak_rss()
        before = _rss_bytes()
        engine.init_model()
        peak_growth = _peak_rss_bytes() - before
        local_bytes = sum(p.to_local().numel() * p.element_size() for p in engine.model.parameters())
        mismatched, compared = [], 0
        weights = _file_weights(Path(path))
        for name, p in engine.model.named_parameters():
            full = p.full_tensor()
            compared += 1
            if name not in weights or not torch.equal(full, weights[name]):
                mismatched.append(name)
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(
                {
                    "peak_growth": peak_growth,
                    "local_bytes": local_bytes,
                    "mismatched": mismatched,
                    "compared": compared,
                },
                f,
            )
    finally:
        dist.destroy_process_group()
    os._exit(0)  # as in test_fsdp_two_ranks: skip a teardown that can abort after the work is saved


def test_two_ranks_read_the_weights_once(mid_llama_dir, tiny_llama_dir, tmp_path):
    model_bytes = sum(t.numel() * t.element_size() for t in _file_weights(mid_llama_dir).values())
    assert model_bytes > 150e6  # large enough that a whole copy stands out from the noise of the allocator
    mp.spawn(
        _worker, args=(2, str(tmp_path / "pg_init"), str(mid_llama_dir), str(tiny_llama_dir), str(tmp_path)), nprocs=2
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r in ranks:
        assert r["mismatched"] == [] and r["compared"] > 100  # every shard is the file's tensor, bit for bit
        assert r["local_bytes"] == pytest.approx(model_bytes / 2, rel=0.01)  # each rank holds half
    # rank 1 never holds the model: its half plus one tensor in flight, well under one copy (loading on every rank
    # would cost it a whole copy plus its half, 1.5x)
    print({"model_bytes": model_bytes, "peak_growth": [r["peak_growth"] for r in ranks]})
    assert ranks[1]["peak_growth"] < 0.75 * model_bytes, (ranks[1]["peak_growth"], model_bytes)
    # rank 0 holds the one copy that is read, plus its half
    assert ranks[0]["peak_growth"] < 1.75 * model_bytes, (ranks[0]["peak_growth"], model_bytes)


def _loss(out, micro, ctx):
    keep = micro["response_mask"].bool()
    return -(out["log_probs"] * keep).sum() / float(keep.sum()), {}


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_one_rank_load_from_rank0_equals_plain_load(tiny_llama_dir, make_rl_batch, lora_rank):
    """``load_on_rank0=True`` on one rank (what the GPU check runs) gives the same model as the plain load: the same
    log-probs and, after one update, the same weights."""
    batch = make_rl_batch([5, 3], [4, 2], seed=1)
    results = []
    for load_on_rank0 in (False, True):
        spec = engine_spec(
            tiny_llama_dir,
            optim=optim_spec(lr=1e-2),
            param_dtype="fp32",
            device="cpu",
            lora_rank=lora_rank,
            load_on_rank0=load_on_rank0,
        )
        engine = make_engine("fsdp2", spec)
        engine.init_model()
        engine.set_loss_fn(_loss)
        with engine.eval_mode():
            logp = engine.forward_backward_step(batch, StepContext(), forward_only=True).outputs["log_probs"]
        with engine.train_mode():
            engine.optimizer_zero_grad()
            engine.forward_backward_step(batch, StepContext())
            engine.optimizer_step()
        results.append((logp, synced_weights(engine)))
    (logp_a, weights_a), (logp_b, weights_b) = results
    assert torch.equal(logp_a, logp_b)
    assert weights_a.keys() == weights_b.keys()
    for name in weights_a:
        assert torch.equal(weights_a[name], weights_b[name]), name
