"""One model forward that yields per-response-token outputs ``(b, R)``: log-probs (+ entropy) or values.

Works on any Hugging Face causal LM / token-classification model (plain, peft-wrapped or FSDP-sharded): it only
calls the root module, so FSDP's hooks and peft's adapter switches apply. See ``app.engine.packing`` for the
column layout.
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch

from algos.logprobs import entropy_from_logits, log_probs_from_logits, sum_pi_squared_from_logits
from app.batch import TensorBatch
from app.engine.packed_attention import SHARED_PROMPT_LAYOUT
from app.engine.packing import pack_inputs, trim_padding


def position_ids_of(micro: TensorBatch) -> torch.Tensor:
    if "position_ids" in micro:
        return micro["position_ids"]
    # left-padded prompts: positions count real tokens, padding gets 0
    return (torch.cumsum(micro["attention_mask"].long(), dim=1) - 1).clamp(min=0)


# On a CPU torch allocates through glibc, which maps a large block afresh from the OS and unmaps it when it is freed
# (and trims a heap whose free top grows large), so each chunk's float32 temporaries fault their pages in again. At
# 1024 tokens x SmolLM2's 49k vocabulary (200 MB each) that was 1.2M page faults per update of `bench/step.py`, whose
# update took 13-17 s in a Ray worker against 11-12 s with 64-token chunks; blocks of at most 16 MiB are reused.
CPU_CHUNK_BYTES = 16 << 20
GPU_CHUNK_TOKENS = 1024  # torch's caching allocator reuses GPU blocks; larger chunks mean fewer kernel launches

# A packed micro-batch's length and its count of kept outputs are rounded up to a multiple of this. Each micro-batch
# packs another number of tokens, and on a CPU every new matmul shape costs oneDNN a new primitive and kernel and the
# heap blocks of a new size, which the train worker kept for the rest of the run (bench/actor_memory.py,
# docs/performance.md). A filler of fewer than 32 tokens is little beside a micro-batch of hundreds.
PACKED_MULTIPLE = 32


def logits_chunk_size(vocab_size: int, device: torch.device) -> int:
    """Tokens per chunk of the log-prob and entropy passes: on a CPU the largest power of two whose float32 chunk
    fits in ``CPU_CHUNK_BYTES`` (64 for a 49k vocabulary), else ``GPU_CHUNK_TOKENS``."""
    if device.type != "cpu":
        return GPU_CHUNK_TOKENS
    tokens = max(1, CPU_CHUNK_BYTES // (4 * vocab_size))
    return 1 << (tokens.bit_length() - 1)


def lm_outputs(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float,
    compute_entropy: bool,
    entropy_requires_grad: bool,
    chunk_size: Optional[int],
    compute_sum_pi_squared: bool = False,
) -> dict[str, torch.Tensor]:
    """logits ``(..., V)`` and labels ``(...)`` -> log-probs (and entropy, and the sum of squared probabilities)
    ``(...)`` float32. ``chunk_size`` None: ``logits_chunk_size`` of the vocabulary and device."""
    if chunk_size is None:
        chunk_size = logits_chunk_size(logits.shape[-1], logits.device)
    if temperature != 1.0:
        logits = logits / temperature
    out = {"log_probs": log_probs_from_logits(logits, labels, chunk_size)}
    if compute_entropy:
        if entropy_requires_grad:
            out["entropy"] = entropy_from_logits(logits, chunk_size)
        else:
            with torch.no_grad():
                out["entropy"] = entropy_from_logits(logits.detach(), chunk_size)
    if compute_sum_pi_squared:
        out["sum_pi_squared"] = sum_pi_squared_from_logits(logits.detach(), chunk_size)
    return out


def value_model_logits(model: torch.nn.Module, **inputs) -> torch.Tensor:
    """Logits ``(b, L, 1)`` of a value model. Its head returns a view, which FSDP warns about because an in-place op
    on it would skip a hook; we only read it out of place, so the warning is noise here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
        return model(use_cache=False, **inputs).logits


def response_outputs(
    model: torch.nn.Module,
    micro: TensorBatch,
    *,
    model_kind: str,
    remove_padding: bool,
    share_prompts: bool = False,
    temperature: float = 1.0,
    compute_entropy: bool = False,
    entropy_requires_grad: bool = False,
    chunk_size: Optional[int] = None,
    compute_sum_pi_squared: bool = False,
) -> dict[str, torch.Tensor]:
    """Run ``model`` on ``micro`` (needs ``input_ids``, ``attention_mask``, ``responses``; ``position_ids``
    optional) and return ``{"log_probs", ["entropy"], ["sum_pi_squared"]}`` (causal LM) or ``{"values"}`` (value
    model), each ``(b, R)`` float32 and 0 at padding. ``chunk_size``: tokens per chunk of the log-prob and entropy
    passes (None: ``logits_chunk_size``). ``share_prompts`` (packed only; needs the model to run
    ``app.engine.packed_attention``) computes each distinct prompt once for all its rows."""
    input_ids, attention_mask = micro["input_ids"], micro["attention_mask"]
    response_len = micro["responses"].shape[1]
    position_ids = position_ids_of(micro)
    lm_kwargs = dict(
        temperature=temperature,
        compute_entropy=compute_entropy,
        entropy_requires_grad=entropy_requires_grad,
        chunk_size=chunk_size,
        compute_sum_pi_squared=compute_sum_pi_squared,
    )
    if remove_padding:
        p = pack_inputs(
            input_ids,
            attention_mask,
            position_ids,
            response_len,
            share_prompts=share_prompts,
            length_multiple=PACKED_MULTIPLE,
            outputs_multiple=PACKED_MULTIPLE,
        )
        if p.prompt_layout is not None:
            varlen = {SHARED_PROMPT_LAYOUT: p.prompt_layout}
        else:
            varlen = dict(
                cu_seq_lens_q=p.cu_seqlens,
                cu_seq_lens_k=p.cu_seqlens,
                max_length_q=p.max_seqlen,
                max_length_k=p.max_seqlen,
            )
        if model_kind == "causal_lm":
            logits = model(
                input_ids=p.input_ids,
                position_ids=p.position_ids,
                logits_to_keep=p.output_index,
                use_cache=False,
                **varlen,
            ).logits[0]  # (K, V)
            return {k: p.scatter(v) for k, v in lm_outputs(logits, p.labels, **lm_kwargs).items()}
        values = value_model_logits(model, input_ids=p.input_ids, position_ids=p.position_ids, **varlen)
        return {"values": p.scatter(values[0, p.output_index, 0].float())}
    t = trim_padding(input_ids, attention_mask, position_ids, response_len)
    kept = t.kept_response_len
    labels = input_ids[:, -response_len:][:, :kept]
    if model_kind == "causal_lm":
        # the last kept+1 positions: P-1 .. P+kept-1; the very last predicts past the kept columns
        logits = model(
            input_ids=t.input_ids,
            attention_mask=t.attention_mask,
            position_ids=t.position_ids,
            logits_to_keep=kept + 1,
            use_cache=False,
        ).logits[:, :-1]
        outs = lm_outputs(logits, labels, **lm_kwargs)
    else:
        values = value_model_logits(
            model, input_ids=t.input_ids, attention_mask=t.attention_mask, position_ids=t.position_ids
        )
        outs = {"values": values[:, -kept - 1 : -1, 0].float()}
    real = attention_mask[:, -response_len:][:, :kept].bool()
    return {
        k: t.pad_response(torch.where(real, v, torch.zeros((), dtype=v.dtype, device=v.device)))
        for k, v in outs.items()
    }
