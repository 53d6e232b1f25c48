"""Ulysses sequence parallelism over two gloo ranks (torch.multiprocessing spawn, no Ray) against the same two ranks
without it, in fp32: log-probs / values, loss and every gradient."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from support import engine_spec, optim_spec

from app.batch import TensorBatch
from app.engine import StepContext, make_engine
from app.engine.sequence_parallel import SequenceParallel, check_heads, prepare

VOCAB = 1024
# each rank's own samples, of other widths than the other rank's (pool re-pads them); rows 0 and 1 of each rank share
# their prompt (shared-prompt packing); every packed micro-batch of odd length, so it is padded to split over 2 ranks
RANK_ROWS = {0: ([6, 6, 5, 2], [4, 1, 3, 4]), 1: ([4, 4, 7, 3], [2, 5, 1, 6])}
# every sequence is at most 12 tokens: the per-rank token budget of the forward-only pass
BUDGET = 12


def _build_llama(out, heads: int, kv_heads: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(out, safe_serialization=True)
    return str(out)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """4 heads / 2 key-value heads (each rank gets one of each) and 2 / 1 (the key-value head is repeated)."""
    root = tmp_path_factory.mktemp("sp-models")
    return {"4h2kv": _build_llama(root / "4h2kv", 4, 2), "2h1kv": _build_llama(root / "2h1kv", 2, 1)}


def _rank_batch(rank: int, make_rl_batch) -> TensorBatch:
    prompts, responses = RANK_ROWS[rank]
    batch = make_rl_batch(prompts, responses, seed=10 + rank)
    ids = batch["input_ids"].clone()
    prompt_width = ids.shape[1] - batch["responses"].shape[1]
    ids[1, :prompt_width] = ids[0, :prompt_width]  # rows 0 and 1: the same prompt (same length, same padding)
    batch.tensors["input_ids"] = ids
    batch.tensors["weights"] = torch.randn(batch["responses"].shape, generator=torch.Generator().manual_seed(rank))
    return batch


def _loss(out, micro, ctx):
    """A loss on every output token, weighted so that each token's gradient differs."""
    value = out["log_probs"] if "log_probs" in out else out["values"]
    return (value * micro["weights"] * micro["response_mask"]).sum() / ctx.loss_normalizer, {}


# name -> (model, EngineSpec overrides)
CASES = {
    "shared_prompts": ("4h2kv", {}),
    "per_sequence_kv_repeat": ("2h1kv", {"share_prompt_prefix": False}),
    "lora_gradient_checkpointing": ("2h1kv", {"lora_rank": 4, "enable_gradient_checkpointing": True}),
    "value_model": ("4h2kv", {"model_kind": "value", "share_prompt_prefix": False}),
}


def _run(path, overrides, sp_size, batch, global_tokens):
    spec = engine_spec(
        path,
        optim=optim_spec(lr=1e-2),
        param_dtype="fp32",
        device="cpu",
        micro_batch_size_per_gpu=1,
        ulysses_sequence_parallel_size=sp_size,
        **overrides,
    )
    engine = make_engine("fsdp2", spec)
    engine.init_model()
    with engine.eval_mode():
        ctx = StepContext(use_dynamic_bsz=True, max_token_len=BUDGET, compute_sum_pi_squared=True)
        forward = engine.forward_backward_step(batch, ctx, forward_only=True).outputs
    engine.set_loss_fn(_loss)
    with engine.train_mode():
        engine.optimizer_zero_grad()
        result = engine.forward_backward_step(batch, StepContext(loss_normalizer=global_tokens / engine.dp_world_size))
    grads = {n: p.grad.full_tensor() for n, p in engine.model.named_parameters() if p.grad is not None}
    return {
        "attention": engine.model.config._attn_implementation,
        "outputs": forward.tensors,
        "loss": float(engine.all_reduce(torch.tensor([result.loss]), "sum")[0]),
        "grads": grads,
    }


def _worker(rank, world, init_file, paths, out_dir, batches):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        tokens = float(sum(b["response_mask"].sum() for b in batches.values()))
        results = {
            name: {sp: _run(paths[model], overrides, sp, batches[rank], tokens) for sp in (1, 2)}
            for name, (model, overrides) in CASES.items()
        }
        torch.save(results, os.path.join(out_dir, f"sp{rank}.pt"))  # each rank's outputs are its own rows
    finally:
        dist.destroy_process_group()
    os._exit(0)  # see test_fsdp_two_ranks.py: skip the interpreter's teardown once the results are saved


def test_sequence_parallel_matches_data_parallel(models, make_rl_batch, tmp_path):
    batches = {rank: _rank_batch(rank, make_rl_batch) for rank in RANK_ROWS}
    mp.spawn(_worker, args=(2, str(tmp_path / "pg_init"), models, str(tmp_path), batches), nprocs=2)
    ranks = [torch.load(tmp_path / f"sp{rank}.pt", weights_only=False) for rank in RANK_ROWS]
    for name, (model, overrides) in CASES.items():
        # a value model has no token distribution: the sum of squared probabilities is a causal LM's only
        outputs = {"values"} if "model_kind" in overrides else {"log_probs", "sum_pi_squared"}
        for rank, results in enumerate(ranks):
            one, two = results[name][1]["outputs"], results[name][2]["outputs"]
            assert one.keys() == two.keys() == outputs, name
            for output in outputs:
                # this rank's rows at its own width
                assert two[output].shape == batches[rank]["responses"].shape, name
                # the same sums in fp32; the projections run on chunks of the packed row instead of the whole row,
                # so rounding (not the math) may differ in the last bits
                torch.testing.assert_close(two[output], one[output], rtol=1e-5, atol=1e-6, msg=name)
                real = batches[rank]["response_mask"].bool()
                assert (one[output][real] != 0).all() and (one[output][~real] == 0).all(), name
        one, two = ranks[0][name][1], ranks[0][name][2]
        # the all-to-alls ran (the key/value heads repeated twice for the 2h1kv model), the packed attention inside
        assert two["attention"] == f"rayrl_ulysses2x{2 if model == '2h1kv' else 1}_{one['attention']}", name
        assert two["loss"] == pytest.approx(one["loss"], rel=1e-5), name
        assert one["grads"].keys() == two["grads"].keys() and one["grads"], name
        if "lora_rank" in overrides:
            assert all("lora_" in n for n in one["grads"]), name
        for param, g in one["grads"].items():
            # each rank's gradient is now its chunk's share, summed by FSDP's reduction in another order: fp32
            # rounding of cancelling sums, 1e-5 of the tensor's largest gradient
            torch.testing.assert_close(
                two["grads"][param], g, rtol=1e-5, atol=1e-5 * float(g.abs().max()), msg=f"{name}: {param}"
            )


@pytest.mark.parametrize(
    "heads, kv_heads, size, repeat",
    [(4, 2, 2, 1), (4, 1, 2, 2), (2, 1, 2, 2), (8, 2, 4, 2), (8, 8, 4, 1), (12, 4, 6, 3)],
)
def test_key_value_heads_are_repeated_until_the_group_divides_them(heads, kv_heads, size, repeat):
    sp = SequenceParallel(group=None, size=size, rank=0)
    check_heads(SimpleNamespace(num_attention_heads=heads, num_key_value_heads=kv_heads), sp)
    assert sp.kv_repeat == repeat
    # each rank then holds whole groups of query heads with the key/value heads they read
    assert (kv_heads * repeat) % size == 0 and heads % (kv_heads * repeat) == 0


def test_heads_the_group_does_not_divide_are_refused():
    sp = SequenceParallel(group=None, size=2, rank=0)
    with pytest.raises(ValueError, match=r"^ulysses_sequence_parallel_size=2: the model has 3 attention heads"):
        check_heads(SimpleNamespace(num_attention_heads=3, num_key_value_heads=1), sp)


def test_the_deepspeed_engine_refuses_sequence_parallelism(tiny_llama_dir):
    spec = engine_spec(tiny_llama_dir, device="cpu", ulysses_sequence_parallel_size=2)
    with pytest.raises(
        ValueError,
        match=r"^ulysses_sequence_parallel_size=2: strategy=deepspeed has no sequence "
        r"parallelism here; use strategy=fsdp2 or set it to 1",
    ):
        make_engine("deepspeed", spec)


def test_compiled_layers_are_refused_before_any_group_is_made():
    with pytest.raises(
        ValueError,
        match=r"^ulysses_sequence_parallel_size=2 runs the layers eagerly: set "
        r"use_torch_compile=false",
    ):
        prepare(2, "cpu", use_remove_padding=True, compile_layers=True, model_config=None, attention="sdpa")
    # without sequence parallelism nothing is made and the attention is the one given
    assert prepare(1, "cpu", use_remove_padding=False, compile_layers=True, model_config=None, attention="sdpa") == (
        None,
        "sdpa",
    )
