"""No needless dtype casts in a bf16 engine's forward + log-prob pass: every cast is counted and accounted for.

The engine keeps fp32 master weights (what AdamW steps) and computes in bf16. What may be cast, per forward:
- each FSDP-managed parameter once, fp32 -> bf16 (the mixed-precision gather);
- the model's own fp32 islands: every RMSNorm's input up and output down (2 per layer + the final norm), the rotary
  cos/sin down once each;
- the logits of the response positions up to fp32, once, chunk by chunk, for the log-softmax (the loss's precision).
Anything else (a second parameter cast, activations or the whole logits tensor in fp32) fails the test.
"""

from __future__ import annotations

import collections

import torch
from support import engine_spec
from torch.utils._python_dispatch import TorchDispatchMode

from app.engine import StepContext, make_engine
from app.engine.forward import PACKED_MULTIPLE

FLOATS = {torch.float32, torch.bfloat16, torch.float16, torch.float64}


class _CountCasts(TorchDispatchMode):
    """Every floating-point dtype change (``_to_copy`` or a ``copy_`` across dtypes): (from, to, shape) -> count."""

    def __init__(self) -> None:
        super().__init__()
        self.casts: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in ("_to_copy", "copy_"):
            src, dst = (args[1], args[0]) if name == "copy_" else (args[0], out)
            if isinstance(src, torch.Tensor) and src.dtype != dst.dtype and src.dtype in FLOATS and dst.dtype in FLOATS:
                self.casts[(src.dtype, dst.dtype, tuple(src.shape))] += 1
        return out


def test_forward_and_log_prob_pass_casts_only_what_it_must(tiny_llama_dir, make_rl_batch):
    engine = make_engine("fsdp2", engine_spec(tiny_llama_dir, param_dtype="bf16", model_dtype="fp32", device="cpu"))
    engine.init_model()
    batch = make_rl_batch([5, 3], [4, 2])
    with engine.eval_mode():
        engine.forward_backward_step(batch, StepContext(), forward_only=True)  # warm-up: lazy init, caches
        counter = _CountCasts()
        with counter:
            engine.forward_backward_step(batch, StepContext(), forward_only=True)
    casts = dict(counter.casts)
    config = engine.model.config
    # packed: one row of all real tokens and a filler, and the response positions' outputs, each rounded up
    tokens = -(-int(batch["attention_mask"].sum()) // PACKED_MULTIPLE) * PACKED_MULTIPLE
    response_tokens = -(-int(batch["response_mask"].sum()) // PACKED_MULTIPLE) * PACKED_MULTIPLE
    params = list(engine.model.parameters())

    def take(src, dst, shape):
        return casts.pop((src, dst, shape), 0)

    f32, bf16 = torch.float32, torch.bfloat16
    norms = 2 * config.num_hidden_layers + 1
    assert take(bf16, f32, (1, tokens, config.hidden_size)) == norms
    assert take(f32, bf16, (1, tokens, config.hidden_size)) == norms
    head_dim = config.hidden_size // config.num_attention_heads
    assert take(f32, bf16, (1, tokens, head_dim)) == 2  # rotary cos and sin
    # the response positions' logits, up to fp32 once (one chunk here); never the prompt's, never back down
    assert take(bf16, f32, (response_tokens, config.vocab_size)) == 1
    # what is left: the parameters, each once, as FSDP's flat shards (1-D)
    assert all(src == f32 and dst == bf16 and len(shape) == 1 for src, dst, shape in casts), casts
    assert sum(casts.values()) == len(params)
    assert sum(n * shape[0] for (_, _, shape), n in casts.items()) == sum(p.numel() for p in params)
