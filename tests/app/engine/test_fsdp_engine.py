"""FSDPEngine in one process (a private one-rank gloo group) on the tiny random Llama, fp32 unless stated."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from support import engine_spec, optim_spec
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM

from app.engine import StepContext, make_engine

PROMPTS, RESPONSES = [6, 3, 5, 2], [4, 1, 3, 4]


def _engine(path, **kwargs):
    spec = dict(optim=optim_spec(lr=1e-2, weight_decay=0.0), param_dtype="fp32", device="cpu")
    spec.update(kwargs)
    engine = make_engine("fsdp2", engine_spec(path, **spec))
    engine.init_model()
    return engine


def _sum_log_prob_loss(out, micro, ctx):
    """Token-mean of -log p over the whole batch: the per-micro-batch sums divided by the global token count."""
    keep = micro["response_mask"].bool()
    return -(out["log_probs"] * keep).sum() / ctx.loss_normalizer, {}


def _full(tensor):
    """A parameter's whole value: FSDP holds a DTensor, a one-rank LoRA model's frozen base a plain tensor."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _grads(engine):
    return {n: _full(p.grad).clone() for n, p in engine.model.named_parameters() if p.grad is not None}


def _params(engine):
    return {n: _full(p.detach()).clone() for n, p in engine.model.named_parameters()}


def _reference_log_probs(path, batch):
    """Each sequence alone through plain transformers: the ground truth for every engine path."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    resp_len = batch["responses"].shape[1]
    out = torch.zeros(batch["responses"].shape)
    with torch.no_grad():
        for i in range(len(batch)):
            keep = batch["attention_mask"][i].bool()
            ids = batch["input_ids"][i][keep]
            n_resp = int(batch["attention_mask"][i, -resp_len:].sum())
            logp = torch.log_softmax(model(input_ids=ids[None]).logits[0].float(), -1)
            start = len(ids) - n_resp  # first response token in the unpadded sequence
            out[i, :n_resp] = logp[start - 1 : len(ids) - 1].gather(-1, ids[start:, None])[:, 0]
    return out


def test_remove_padding_and_padded_paths_equal_unpadded_reference(tiny_llama_dir, make_rl_batch):
    batch = make_rl_batch(PROMPTS, RESPONSES, prompt_width=7, response_width=5)
    engine = _engine(tiny_llama_dir)
    expected = _reference_log_probs(tiny_llama_dir, batch)
    results = {}
    for remove_padding in (True, False):
        engine.spec.use_remove_padding = remove_padding  # read per call: one engine serves both paths
        with engine.eval_mode():
            results[remove_padding] = engine.forward_backward_step(
                batch, StepContext(compute_entropy=True, temperature=1.0), forward_only=True
            ).outputs
    for outputs in results.values():
        torch.testing.assert_close(outputs["log_probs"], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(results[True]["entropy"], results[False]["entropy"], rtol=1e-5, atol=1e-5)
    # padding positions are exactly 0
    assert (results[True]["log_probs"][batch["response_mask"] == 0] == 0).all()


def test_temperature_divides_logits(tiny_llama_dir, make_rl_batch):
    batch = make_rl_batch([3, 4], [2, 3])
    engine = _engine(tiny_llama_dir)
    with engine.eval_mode():
        hot = engine.forward_backward_step(batch, StepContext(temperature=2.0), forward_only=True).outputs
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    with torch.no_grad():  # row 1 has no padding: logits at columns P-1.. predict the response
        logits = model(input_ids=batch["input_ids"][1:2]).logits[0, 3:6] / 2.0
    expected = torch.log_softmax(logits, -1).gather(-1, batch["responses"][1, :, None])[:, 0]
    torch.testing.assert_close(hot["log_probs"][1], expected, rtol=1e-5, atol=1e-5)


def test_micro_batching_and_token_budget_give_the_same_gradient(tiny_llama_dir, make_rl_batch):
    batch = make_rl_batch(PROMPTS, RESPONSES)
    engine = _engine(tiny_llama_dir)
    engine.set_loss_fn(_sum_log_prob_loss)
    normalizer = float(batch["response_mask"].sum())
    grads, losses = [], []
    for ctx in (
        StepContext(loss_normalizer=normalizer),
        StepContext(loss_normalizer=normalizer, micro_batch_size=1),
        StepContext(loss_normalizer=normalizer, use_dynamic_bsz=True, max_token_len=10),
    ):
        with engine.train_mode():
            engine.optimizer_zero_grad()
            result = engine.forward_backward_step(batch, ctx)
        grads.append(_grads(engine))
        losses.append(result.loss)
    assert losses[1] == pytest.approx(losses[0], rel=1e-6) and losses[2] == pytest.approx(losses[0], rel=1e-6)
    for other in grads[1:]:
        assert other.keys() == grads[0].keys()
        for name in grads[0]:
            torch.testing.assert_close(other[name], grads[0][name], rtol=1e-5, atol=1e-7)


def test_bf16_compute_stays_close_to_fp32(tiny_llama_dir, make_rl_batch):
    batch = make_rl_batch(PROMPTS, RESPONSES)
    fp32 = _engine(tiny_llama_dir)
    bf16 = _engine(tiny_llama_dir, param_dtype="bf16")
    with fp32.eval_mode(), bf16.eval_mode():
        a = fp32.forward_backward_step(batch, forward_only=True).outputs["log_probs"]
        b = bf16.forward_backward_step(batch, forward_only=True).outputs["log_probs"]
    assert 0 < (a - b).abs().max() < 0.05  # bf16 really ran (not identical) and stays within ~1%
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())  # fp32 master weights


def test_checkpoint_round_trip_makes_the_next_step_identical(tiny_llama_dir, make_rl_batch, tmp_path):
    batch = make_rl_batch(PROMPTS, RESPONSES)
    ctx = StepContext(loss_normalizer=float(batch["response_mask"].sum()))
    optim = optim_spec(lr=1e-2, weight_decay=0.01, lr_warmup_steps=3)  # warm-up: the scheduler state matters

    def step(engine):
        with engine.train_mode():
            engine.optimizer_zero_grad()
            engine.forward_backward_step(batch, ctx)
            engine.optimizer_step()
        engine.lr_scheduler_step()

    first = _engine(tiny_llama_dir, optim=optim)
    first.set_loss_fn(_sum_log_prob_loss)
    step(first)
    first.save_checkpoint(str(tmp_path / "ckpt"))
    step(first)
    resumed = _engine(tiny_llama_dir, optim=optim)
    resumed.set_loss_fn(_sum_log_prob_loss)
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    assert resumed.get_lr() == pytest.approx(1e-2 / 3)  # scheduler restored: one warm-up step taken
    step(resumed)
    assert resumed.get_lr() == pytest.approx(first.get_lr())
    expected, got = _params(first), _params(resumed)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0)


def test_full_sync_stream_has_hf_names(tiny_llama_dir):
    engine = _engine(tiny_llama_dir, optim=None)
    tensors = dict(engine.get_per_tensor_param(dtype=torch.bfloat16))
    hf_names = set(AutoModelForCausalLM.from_pretrained(tiny_llama_dir).state_dict())
    assert set(tensors) <= hf_names and "model.layers.1.mlp.down_proj.weight" in tensors
    # the tiny Llama ties lm_head to the embedding: the receiver restores it, so it is not sent twice
    assert "lm_head.weight" not in tensors and "model.embed_tokens.weight" in tensors
    assert all(t.dtype == torch.bfloat16 and not hasattr(t, "placements") for t in tensors.values())
    with pytest.raises(RuntimeError, match="lora_adapter_state\\(\\) needs a LoRA engine"):
        engine.lora_adapter_state()


# ---------------------------------------------------------------------------------------------------- LoRA
def _lora_engine(path):
    # exclude layer 1's MLP (regex): only the other linear layers get adapters
    return _engine(
        path, lora_rank=4, lora_alpha=8, target_modules="all-linear", exclude_modules=r".*layers\.1\.mlp\..*"
    )


def test_one_rank_lora_keeps_the_frozen_base_out_of_fsdp(tiny_llama_dir):
    # FSDP would gather the frozen base into a second compute-dtype copy held through the whole update (0.27 GB for
    # SmolLM2-135M); on one rank there is nothing to shard, so only the adapters are FSDP's (DTensors)
    engine = _lora_engine(tiny_llama_dir)
    params = dict(engine.model.named_parameters())
    assert all(not isinstance(p, DTensor) for p in params.values() if not p.requires_grad)
    assert all(isinstance(p, DTensor) for p in params.values() if p.requires_grad)
    assert any(not p.requires_grad for p in params.values())


def test_lora_trains_only_adapters_and_disable_adapter_gives_the_base_model(tiny_llama_dir, make_rl_batch):
    batch = make_rl_batch(PROMPTS, RESPONSES)
    engine = _lora_engine(tiny_llama_dir)
    trainable = {n for n, p in engine.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert not any("layers.1.mlp" in n for n in trainable)  # exclude_modules honoured
    assert any("layers.1.self_attn.q_proj.lora_A" in n for n in trainable)
    before = _params(engine)
    engine.set_loss_fn(_sum_log_prob_loss)
    with engine.train_mode():
        engine.optimizer_zero_grad()
        engine.forward_backward_step(batch, StepContext(loss_normalizer=float(batch["response_mask"].sum())))
        engine.optimizer_step()
    after = _params(engine)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed and changed <= trainable
    with engine.eval_mode():
        adapted = engine.forward_backward_step(batch, forward_only=True).outputs["log_probs"]
        with engine.disable_adapter():
            base = engine.forward_backward_step(batch, forward_only=True).outputs["log_probs"]
    expected = _reference_log_probs(tiny_llama_dir, batch)
    torch.testing.assert_close(base, expected, rtol=1e-5, atol=1e-5)
    assert (adapted - expected).abs().max() > 1e-3  # the trained adapter does change the policy


def test_lora_sync_payload_and_merged_export(tiny_llama_dir, make_rl_batch, tmp_path):
    batch = make_rl_batch(PROMPTS, RESPONSES)
    engine = _lora_engine(tiny_llama_dir)
    engine.set_loss_fn(_sum_log_prob_loss)
    with engine.train_mode():  # one step so lora_B (zero at init) is non-zero and merging matters
        engine.optimizer_zero_grad()
        engine.forward_backward_step(batch, StepContext(loss_normalizer=float(batch["response_mask"].sum())))
        engine.optimizer_step()
    adapter_config, tensors = engine.lora_adapter_state()
    assert tensors and all(".lora_A.weight" in n or ".lora_B.weight" in n for n in tensors)
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in tensors
    assert adapter_config["r"] == 4 and adapter_config["lora_alpha"] == 8
    json.dumps(adapter_config)  # writable as adapter_config.json

    engine.export_hf(str(tmp_path / "merged"))
    # config.json records the weights' dtype (fp32 master weights here), which vLLM loads them in with dtype=auto
    assert json.loads((tmp_path / "merged" / "config.json").read_text())["dtype"] == "float32"
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32)
    assert not any("lora" in n for n in merged.state_dict())
    with engine.eval_mode():
        adapted = engine.forward_backward_step(batch, forward_only=True).outputs["log_probs"]
    # the merged folder, through plain transformers, reproduces the adapter model
    merged_engine = _engine(tmp_path / "merged", optim=None)
    with merged_engine.eval_mode():
        from_merged = merged_engine.forward_backward_step(batch, forward_only=True).outputs["log_probs"]
    torch.testing.assert_close(from_merged, adapted, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_reference_log_probs(tmp_path / "merged", batch), adapted, rtol=1e-5, atol=1e-5)
    # rollout.lora_sync=merged sends exactly the exported weights: HF names, LoRA folded in, no tied lm_head
    merged_sync = dict(engine.get_per_tensor_param(merge_lora=True))
    exported = load_file(tmp_path / "merged" / "model.safetensors")
    assert set(merged_sync) == set(exported) and "lm_head.weight" not in exported
    for name, tensor in exported.items():
        assert torch.equal(merged_sync[name], tensor), name


def test_value_model_packed_equals_padded(tiny_llama_dir, make_rl_batch):
    batch = make_rl_batch(PROMPTS, RESPONSES)
    engine = _engine(tiny_llama_dir, model_kind="value", optim=None)
    outputs = {}
    for remove_padding in (True, False):
        engine.spec.use_remove_padding = remove_padding
        with engine.eval_mode():
            outputs[remove_padding] = engine.forward_backward_step(batch, forward_only=True).outputs["values"]
    torch.testing.assert_close(outputs[True], outputs[False], rtol=1e-5, atol=1e-5)
    assert outputs[True].shape == batch["responses"].shape
    assert (outputs[True][batch["response_mask"] == 0] == 0).all() and outputs[True].abs().sum() > 0


def test_inference_only_engine_refuses_optimizer_calls(tiny_llama_dir):
    engine = _engine(tiny_llama_dir, optim=None)
    with pytest.raises(RuntimeError, match="no optimizer"):
        engine.optimizer_step()
    with pytest.raises(RuntimeError, match="LoRA"):
        with engine.disable_adapter():
            pass


def test_gradient_checkpointing_gives_the_same_gradient(tiny_llama_dir, make_rl_batch):
    batch = make_rl_batch(PROMPTS, RESPONSES)
    ctx = StepContext(loss_normalizer=float(batch["response_mask"].sum()))
    grads = []
    for checkpointing in (False, True):
        engine = _engine(tiny_llama_dir, enable_gradient_checkpointing=checkpointing)
        engine.set_loss_fn(_sum_log_prob_loss)
        with engine.train_mode():
            engine.optimizer_zero_grad()
            engine.forward_backward_step(batch, ctx)
        grads.append(_grads(engine))
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-5, atol=1e-7)


def test_compiled_layers_give_the_same_loss_and_gradients(tiny_llama_dir, make_rl_batch):
    # train mode only: each extra mode (eval, no-grad) is one more compile, ~30 s on a cold cache. Full fine-tuning:
    # the trained embedding makes every layer's input require grad, so all layers share one compiled graph (under
    # LoRA the first layer's input does not, which compiles a second one and doubles the test's ~60 s)
    batch = make_rl_batch(PROMPTS, RESPONSES)
    ctx = StepContext(loss_normalizer=float(batch["response_mask"].sum()))
    results = []
    for compiled in (False, True):
        engine = _engine(tiny_llama_dir, compile_layers=compiled)
        engine.set_loss_fn(_sum_log_prob_loss)
        with engine.train_mode():
            engine.optimizer_zero_grad()
            loss = engine.forward_backward_step(batch, ctx).loss
        results.append((loss, _grads(engine)))
    (eager_loss, eager_grads), (compiled_loss, compiled_grads) = results
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-6)
    assert compiled_grads.keys() == eager_grads.keys()
    for name in eager_grads:  # inductor may reorder fp32 sums: a looser (still 1e-4) tolerance
        torch.testing.assert_close(compiled_grads[name], eager_grads[name], rtol=1e-4, atol=1e-6)


def test_frozen_weights_are_stored_in_the_compute_dtype_and_trainable_ones_in_the_master_dtype(tiny_llama_dir):
    def dtypes(engine, trainable):
        return {p.dtype for p in engine.model.parameters() if p.requires_grad == trainable}

    lora = _engine(tiny_llama_dir, lora_rank=4, lora_alpha=8, param_dtype="bf16", model_dtype="fp32")
    # the LoRA base is never stepped: bf16 storage costs nothing (it is computed in bf16) and halves its memory
    assert dtypes(lora, trainable=False) == {torch.bfloat16}
    assert dtypes(lora, trainable=True) == {torch.float32}
    full = _engine(tiny_llama_dir, param_dtype="bf16", model_dtype="fp32")
    assert dtypes(full, trainable=True) == {torch.float32}  # full fine-tuning keeps fp32 master weights
    reference = _engine(tiny_llama_dir, param_dtype="bf16", optim=None)
    assert {p.dtype for p in reference.model.parameters()} == {torch.bfloat16}


def test_auto_compute_dtype_is_decided_for_the_device(tiny_llama_dir, monkeypatch):
    # an engine built from an unvalidated config (param_dtype "auto") computes in bf16 only where bf16 is native
    for native, expected in ((False, "fp32"), (True, "bf16")):
        monkeypatch.setattr("app.engine.precision.cpu_has_native_bf16", lambda: native)
        assert _engine(tiny_llama_dir, param_dtype="auto").spec.param_dtype == expected


def test_shared_prompts_give_the_same_log_probs_and_lora_gradients(tiny_llama_dir, make_rl_batch):
    # a GRPO batch: 2 prompts x 3 samples; micro-batches of 4 cut the second group in two, so a prompt is shared
    # within a micro-batch but recomputed in the next one
    batch = make_rl_batch([5, 5, 5, 3, 3, 3], [4, 1, 3, 2, 4, 4], prompt_width=6)
    for key in ("input_ids", "attention_mask", "position_ids"):
        batch[key][:, :6] = batch[key][[0, 0, 0, 3, 3, 3], :6]
    ctx = StepContext(loss_normalizer=float(batch["response_mask"].sum()), compute_entropy=True)
    results = {}
    for share in (False, True):
        engine = _engine(
            tiny_llama_dir, lora_rank=4, lora_alpha=8, share_prompt_prefix=share, micro_batch_size_per_gpu=4
        )
        engine.set_loss_fn(_sum_log_prob_loss)
        with engine.train_mode():
            engine.optimizer_zero_grad()
            out = engine.forward_backward_step(batch, ctx).outputs
        results[share] = (out, _grads(engine))
    assert engine._shares_prompts()
    torch.testing.assert_close(
        results[True][0]["log_probs"], _reference_log_probs(tiny_llama_dir, batch), rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(results[True][0]["entropy"], results[False][0]["entropy"], rtol=1e-5, atol=1e-5)
    assert results[True][1].keys() == results[False][1].keys() and len(results[True][1]) > 0
    for name, grad in results[False][1].items():
        torch.testing.assert_close(results[True][1][name], grad, rtol=1e-4, atol=1e-6, msg=name)
