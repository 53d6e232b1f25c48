"""Side by side, in one run: the engine's two CPU kernel choices against what they replace.

    .venv/bin/python bench/engine_kernels.py [--tokens-per-seq 170] [--seqs 32] [--repeats 5]

1. Attention backward: PyTorch's flash-attention backward (what ``F.scaled_dot_product_attention`` autograd runs)
   against ``app.engine.packed_attention``'s flash forward + matmul backward, per packed sequence, bf16, with
   SmolLM2-135M's heads (9 query, 3 kv, head_dim 64). Prints forward+backward ms over all sequences of one layer.
2. LoRA linear: peft's ``result + lora_B(lora_A(x)) * scaling`` against ``app.engine.lora_fast_path``'s fused
   forward, forward+backward of SmolLM2's seven projections of one layer (r=16, bf16).

3. Packed attention, forward only (what a log-prob pass runs): ``app.engine.packed_attention``'s per-sequence sdpa
   against one FlexAttention call with the document-causal block mask (``--flex compiled``: ``torch.compile``d, the
   fused kernel; ``eager``: the reference implementation that materialises every score), fp32 (the CPU's fast dtype
   without native bf16), same heads. FlexAttention has no CPU backward, so only the forward can be compared here.

Each pair alternates within a repeat, so load from other users of the machine hits both; the median is printed,
with the ratio old/new (above 1: the engine's choice is faster). Multiply the saving by 30 layers for SmolLM2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine.lora_fast_path import use_fused_lora_forward  # noqa: E402
from app.engine.packed_attention import _FlashThenMathAttention  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, HIDDEN, INTERMEDIATE = 9, 3, 64, 576, 1536


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def attention_case(lengths: list[int]):
    total = sum(lengths)
    g = torch.Generator().manual_seed(0)
    q0, k0, v0 = (
        torch.randn(1, h, total, HEAD_DIM, generator=g).to(torch.bfloat16) for h in (HEADS, KV_HEADS, KV_HEADS)
    )
    grad = torch.randn(1, HEADS, total, HEAD_DIM, generator=g).to(torch.bfloat16)

    def run(per_sequence):
        q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
        parts = [
            per_sequence(a, b, c) for a, b, c in zip(q.split(lengths, 2), k.split(lengths, 2), v.split(lengths, 2))
        ]
        torch.cat(parts, 2).backward(grad)

    flash = lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True)
    ours = lambda a, b, c: _FlashThenMathAttention.apply(a, b, c, HEAD_DIM**-0.5)
    return ("attention fwd+bwd (flash bwd | matmul bwd)", lambda: run(flash), lambda: run(ours))


def flex_case(lengths: list[int], mode: str):
    from app.engine.packed_attention import flex_packed_attention, packed_sdpa_attention

    total = sum(lengths)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, total, HEAD_DIM, generator=g) for h in (HEADS, KV_HEADS, KV_HEADS))
    layer = torch.nn.Module().eval()

    def per_sequence():
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        with torch.no_grad():
            packed_sdpa_attention(layer, q, k, v, None, cu_seq_lens_q=cu)

    def flex():
        # a new cu tensor per call, as per forward: the block mask is rebuilt each time (once per forward, shared
        # by the layers; its cost is in the figure)
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        with torch.no_grad():
            flex_packed_attention(q, k, v, cu, None, compiled=mode == "compiled")

    return (f"packed attention fwd fp32 (per-seq | flex {mode})", per_sequence, flex)


class _Projections(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        shapes = {
            "q_proj": (HIDDEN, HIDDEN),
            "k_proj": (HIDDEN, KV_HEADS * HEAD_DIM),
            "v_proj": (HIDDEN, KV_HEADS * HEAD_DIM),
            "o_proj": (HIDDEN, HIDDEN),
            "gate_proj": (HIDDEN, INTERMEDIATE),
            "up_proj": (HIDDEN, INTERMEDIATE),
            "down_proj": (INTERMEDIATE, HIDDEN),
        }
        for name, (fan_in, fan_out) in shapes.items():
            setattr(self, name, torch.nn.Linear(fan_in, fan_out, bias=False))

    def forward(self, x, mlp_in):
        return [
            self.q_proj(x),
            self.k_proj(x),
            self.v_proj(x),
            self.o_proj(x),
            self.gate_proj(x),
            self.up_proj(x),
            self.down_proj(mlp_in),
        ]


def lora_case(tokens: int):
    from peft import LoraConfig, get_peft_model

    def build():
        torch.manual_seed(0)
        model = get_peft_model(_Projections(), LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
        return model.to(torch.bfloat16)

    peft_model, fused_model = build(), build()
    assert use_fused_lora_forward(fused_model) == 7
    g = torch.Generator().manual_seed(1)
    x0 = torch.randn(tokens, HIDDEN, generator=g).to(torch.bfloat16)
    mlp0 = torch.randn(tokens, INTERMEDIATE, generator=g).to(torch.bfloat16)

    grads = [
        torch.randn(tokens, n, generator=g).to(torch.bfloat16)
        for n in (HIDDEN, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, HIDDEN, INTERMEDIATE, INTERMEDIATE, HIDDEN)
    ]

    def run(model):
        x, mlp = x0.clone().requires_grad_(), mlp0.clone().requires_grad_()
        torch.autograd.backward(model(x, mlp), grads)

    return ("LoRA r=16, 7 projections fwd+bwd (peft | fused)", lambda: run(peft_model), lambda: run(fused_model))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", type=int, default=32)
    parser.add_argument("--tokens-per-seq", type=int, default=170)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--flex", default="compiled,eager", help="FlexAttention modes to time: compiled, eager")
    parser.add_argument("--cases", default="attention,lora,flex", help="which of attention, lora, flex to run")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(2)
    spread = args.tokens_per_seq // 5
    lengths = torch.randint(
        args.tokens_per_seq - spread, args.tokens_per_seq + spread + 1, (args.seqs,), generator=g
    ).tolist()
    print(
        f"{args.seqs} sequences, {sum(lengths)} tokens, {torch.get_num_threads()} threads; "
        f"median of {args.repeats} alternating repeats, one layer"
    )
    print(f"{'case':<52}{'old ms':>9}{'new ms':>9}{'old/new':>9}", flush=True)
    chosen = args.cases.split(",")
    cases = [attention_case(lengths)] if "attention" in chosen else []
    cases += [lora_case(sum(lengths))] if "lora" in chosen else []
    cases += [flex_case(lengths, mode) for mode in args.flex.split(",") if mode and "flex" in chosen]
    for label, old, new in cases:
        old(), new()  # warm-up
        times = {"old": [], "new": []}
        for _ in range(args.repeats):
            times["old"].append(_timed(old))
            times["new"].append(_timed(new))
        o, n = statistics.median(times["old"]), statistics.median(times["new"])
        print(f"{label:<52}{o * 1e3:>9.1f}{n * 1e3:>9.1f}{o / n:>9.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
