"""The DeepSpeed engine (ZeRO-2 and ZeRO-3, CPU accelerator, one rank) against the FSDP2 engine, in fp32.

Why tight tolerances hold: both engines run the same Hugging Face model through the same forward code
(app/engine/forward.py) on the same fp32 weights, so the losses are equal to rounding (1e-6 relative). The gradients
are the same sums; ZeRO only flattens them into buffers and sums the norm in another order, which moves an fp32 norm
by ~1e-7 relative, so 1e-5 leaves margin without admitting a wrong scaling (a loss divided twice by the 2
micro-batches would be off by 2x, a missed micro-batch by ~50%).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from safetensors.torch import load_file
from support import engine_spec, optim_spec
from transformers import AutoModelForCausalLM

from app.engine import DeepSpeedSpec, StepContext, make_engine

pytest.importorskip("deepspeed")

PROMPTS, RESPONSES = [6, 3, 5, 2], [4, 1, 3, 4]


def _spec(path, strategy, stage=2, offload_optimizer=False, **kwargs):
    spec = dict(
        optim=optim_spec(lr=1e-2, weight_decay=0.01),
        param_dtype="fp32",
        device="cpu",
        micro_batch_size_per_gpu=2,
        grad_clip=1.0,
    )
    if strategy == "deepspeed":
        # 4 samples per step on one rank, micro-batches of 2: DeepSpeed accumulates over 2 backward passes
        spec["deepspeed"] = DeepSpeedSpec(
            zero_stage=stage, offload_optimizer=offload_optimizer, config_path=None, train_batch_size=4
        )
    spec.update(kwargs)
    return engine_spec(path, **spec)


def _engine(path, strategy, stage=2, **kwargs):
    engine = make_engine(strategy, _spec(path, strategy, stage, **kwargs))
    engine.init_model()
    engine.set_loss_fn(_token_mean_nll)
    return engine


def _token_mean_nll(out, micro, ctx):
    keep = micro["response_mask"].bool()
    return -(out["log_probs"] * keep).sum() / ctx.loss_normalizer, {}


def _step(engine, batch):
    ctx = StepContext(loss_normalizer=float(batch["response_mask"].sum()))
    with engine.train_mode():
        engine.optimizer_zero_grad()
        loss = engine.forward_backward_step(batch, ctx).loss
        grad_norm = engine.optimizer_step()
    engine.lr_scheduler_step()
    return loss, grad_norm


def _log_probs(engine, batch):
    with engine.eval_mode():
        return engine.forward_backward_step(batch, forward_only=True).outputs["log_probs"]


@contextlib.contextmanager
def _counting_gathers(engine):
    """Record how many parameters each gather holds and how many gathers are open at once."""
    original, seen = engine._gathered, {"open": 0, "max_open": 0, "max_params": 0}

    @contextlib.contextmanager
    def gathered(params):
        seen["open"] += 1
        seen["max_open"] = max(seen["max_open"], seen["open"])
        seen["max_params"] = max(seen["max_params"], len(params))
        with original(params) as whole:
            yield whole
        seen["open"] -= 1

    engine._gathered = gathered
    try:
        yield seen
    finally:
        engine._gathered = original


@pytest.mark.parametrize("stage, offload_optimizer", [(2, False), (3, False), (2, True)])
def test_two_steps_match_fsdp(tiny_llama_dir, make_rl_batch, stage, offload_optimizer):
    batch = make_rl_batch(PROMPTS, RESPONSES, seed=5)
    fsdp = _engine(tiny_llama_dir, "fsdp2")
    ds = _engine(tiny_llama_dir, "deepspeed", stage, offload_optimizer=offload_optimizer)
    assert ds.ds.zero_optimization_stage() == stage and ds.ds.gradient_accumulation_steps() == 2
    # offload: DeepSpeed keeps the fp32 master weights and AdamW's state on the CPU and steps them there
    assert bool(ds.ds.zero_cpu_offload()) is offload_optimizer
    for step in range(2):  # the second step's loss shows the first AdamW update (clipped at 1.0) was the same
        (fsdp_loss, fsdp_norm), (ds_loss, ds_norm) = _step(fsdp, batch), _step(ds, batch)
        assert ds_loss == pytest.approx(fsdp_loss, rel=1e-6), step
        assert ds_norm == pytest.approx(fsdp_norm, rel=1e-5), step
    assert ds.get_lr() == fsdp.get_lr()
    torch.testing.assert_close(_log_probs(ds, batch), _log_probs(fsdp, batch), rtol=1e-5, atol=1e-5)


def test_a_non_finite_gradient_skips_the_step(tiny_llama_dir, make_rl_batch):
    batch = make_rl_batch(PROMPTS, RESPONSES)
    engine = _engine(tiny_llama_dir, "deepspeed", 2)
    before = dict(engine.get_per_tensor_param())
    engine.set_loss_fn(lambda out, micro, ctx: ((out["log_probs"] * micro["response_mask"]).sum() * float("nan"), {}))
    assert not _step(engine, batch)[1] < float("inf")  # the norm says so (inf or nan) ...
    for name, tensor in engine.get_per_tensor_param():  # ... and no weight moved
        assert torch.equal(tensor, before[name]), name


@pytest.mark.parametrize("stage", [2, 3])
def test_checkpoint_resume_takes_the_same_next_step(tiny_llama_dir, make_rl_batch, tmp_path, stage):
    batch = make_rl_batch(PROMPTS, RESPONSES, seed=1)
    optim = optim_spec(lr=1e-2, weight_decay=0.01, lr_warmup_steps=3)  # warm-up: the scheduler state matters
    first = _engine(tiny_llama_dir, "deepspeed", stage, optim=optim)
    _step(first, batch)
    first.save_checkpoint(str(tmp_path / "ckpt"))
    expected_loss, _ = _step(first, batch)
    resumed = _engine(tiny_llama_dir, "deepspeed", stage, optim=optim)
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    assert resumed.get_lr() == pytest.approx(1e-2 / 3)  # scheduler restored: one warm-up step taken
    loss, _ = _step(resumed, batch)
    assert loss == expected_loss  # same weights, same Adam moments: the very same numbers
    assert resumed.get_lr() == pytest.approx(first.get_lr())
    expected = dict(first.get_per_tensor_param())
    for name, tensor in resumed.get_per_tensor_param():
        assert torch.equal(tensor, expected[name]), name
    with pytest.raises(FileNotFoundError, match="not an engine checkpoint"):
        resumed.load_checkpoint(str(tmp_path))


@pytest.mark.parametrize("strategy,stage", [("fsdp2", None), ("deepspeed", 2), ("deepspeed", 3)])
def test_per_tensor_stream_is_the_sync_state_one_parameter_at_a_time(
    tiny_llama_dir, make_rl_batch, tmp_path, strategy, stage
):
    """The stream equals the engine's other ways out (FSDP2: torch's state-dict API): the LoRA adapter state, or
    the exported Hugging Face weights (LoRA merged), tensor for tensor in the same dtype."""
    batch = make_rl_batch(PROMPTS, RESPONSES)
    for lora in ({}, {"lora_rank": 4, "lora_alpha": 8}):
        engine = _engine(tiny_llama_dir, strategy, stage, **lora)
        _step(engine, batch)  # LoRA's B starts at zero: one step makes the merge matter
        for merge in (False, True):
            with _counting_gathers(engine) as seen:
                streamed = list(engine.get_per_tensor_param(dtype=torch.bfloat16, merge_lora=merge))
            names = [n for n, _ in streamed]
            if lora and not merge:
                adapter_config, expected = engine.lora_adapter_state(dtype=torch.bfloat16)
                assert names == list(expected) and all(".lora_A.weight" in n or ".lora_B.weight" in n for n in names)
                assert adapter_config["r"] == 4
            else:
                export = tmp_path / f"{bool(lora)}_{merge}"
                engine.export_hf(str(export), dtype=torch.bfloat16)
                expected = load_file(export / "model.safetensors")
                assert sorted(names) == sorted(expected) and "lm_head.weight" not in expected  # tied: not sent twice
                assert "model.layers.1.mlp.down_proj.weight" in expected
            assert len(set(names)) == len(names)
            for name, tensor in streamed:
                assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, expected[name]), name
            # one parameter gathered at a time (a merged LoRA linear: its base weight, A and B)
            assert seen["max_open"] == 1 and seen["max_params"] == (3 if lora and merge else 1)


def test_fresh_stream_equals_the_model_file(tiny_llama_dir):
    on_disk = load_file(tiny_llama_dir / "model.safetensors")
    for stage in (2, 3):
        engine = _engine(tiny_llama_dir, "deepspeed", stage, optim=None)  # inference only: ZeRO-3 still partitions
        streamed = dict(engine.get_per_tensor_param())
        assert set(streamed) == set(on_disk) - {"lm_head.weight"}
        for name, tensor in streamed.items():
            assert torch.equal(tensor, on_disk[name]), name


def test_lora_export_loads_in_transformers_with_the_trained_weights(tiny_llama_dir, make_rl_batch, tmp_path):
    batch = make_rl_batch(PROMPTS, RESPONSES)
    engine = _engine(tiny_llama_dir, "deepspeed", 3, lora_rank=4, lora_alpha=8)
    _step(engine, batch)
    adapted = _log_probs(engine, batch)
    with engine.eval_mode(), engine.disable_adapter():
        base = engine.forward_backward_step(batch, forward_only=True).outputs["log_probs"]
    assert (adapted - base).abs().max() > 1e-3  # the step changed the policy, so the export must carry it
    engine.export_hf(str(tmp_path / "hf"))
    exported = load_file(tmp_path / "hf" / "model.safetensors")
    merged_sync = dict(engine.get_per_tensor_param(merge_lora=True))
    assert set(exported) == set(merged_sync) and not any("lora" in n for n in exported)
    for name, tensor in exported.items():
        assert torch.equal(tensor, merged_sync[name]), name
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32)
    loaded = model.state_dict()
    for name, tensor in exported.items():
        assert torch.equal(loaded[name], tensor), name
    assert torch.equal(loaded["lm_head.weight"], exported["model.embed_tokens.weight"])  # tied, restored
    reloaded = _engine(tmp_path / "hf", "fsdp2", optim=None)
    torch.testing.assert_close(_log_probs(reloaded, batch), adapted, rtol=1e-5, atol=1e-5)


def test_deepspeed_is_not_imported_by_the_fsdp_path():
    import subprocess
    import sys

    code = (
        "import sys, app.engine, app.engine.fsdp_engine, app.roles.factory; "
        "assert 'deepspeed' not in sys.modules, 'deepspeed imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_value_model_critic_takes_the_fsdp_step(tiny_llama_dir, make_rl_batch):
    # the critic's engine: a fresh score head (seeded alike on both engines) and a squared-value loss
    batch = make_rl_batch(PROMPTS, RESPONSES, seed=2)

    def loss(out, micro, ctx):
        return (out["values"] ** 2 * micro["response_mask"]).sum() / ctx.loss_normalizer, {}

    results = []
    for strategy in ("fsdp2", "deepspeed"):
        engine = _engine(tiny_llama_dir, strategy, 2, model_kind="value")
        engine.set_loss_fn(loss)
        results.append(_step(engine, batch))
    (fsdp_loss, fsdp_norm), (ds_loss, ds_norm) = results
    assert fsdp_loss > 0 and ds_loss == pytest.approx(fsdp_loss, rel=1e-6)
    assert ds_norm == pytest.approx(fsdp_norm, rel=1e-5)


@pytest.mark.parametrize("stage", [2, 3])
def test_an_inference_only_reference_gives_the_fsdp_log_probs(tiny_llama_dir, make_rl_batch, stage):
    # the reference of a full fine-tuning run: no optimizer, so ZeRO-2 runs unpartitioned and ZeRO-3 still splits it
    batch = make_rl_batch(PROMPTS, RESPONSES, seed=3)
    reference = {"optim": None, "grad_clip": None}
    fsdp = _engine(tiny_llama_dir, "fsdp2", **reference)
    ds = _engine(tiny_llama_dir, "deepspeed", stage, **reference)
    assert ds.ds.zero_optimization_stage() == (3 if stage == 3 else 0)
    torch.testing.assert_close(_log_probs(ds, batch), _log_probs(fsdp, batch), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("stage", [2, 3])
def test_local_weights_are_the_pieces_the_model_computes_from(tiny_llama_dir, stage):
    # ZeRO-2: every rank holds each whole parameter; ZeRO-3: a flat partition of it (on one rank, all of it), which
    # the parameter is gathered from. Writing into a piece changes what the model computes with.
    engine = _engine(tiny_llama_dir, "deepspeed", stage)
    params = dict(engine.model.named_parameters())
    pieces = list(engine.local_weights())
    assert [name for name, _ in pieces] == list(params)
    name, piece = next((n, p) for n, p in pieces if n.endswith("q_proj.weight"))
    with engine._gathered([params[name]]) as (full,):
        whole = full.detach().clone()
    assert piece.numel() >= whole.numel() and torch.equal(piece.reshape(-1)[: whole.numel()], whole.reshape(-1))
    with torch.no_grad():
        piece.zero_()
    with engine._gathered([params[name]]) as (full,):
        assert not full.any()
