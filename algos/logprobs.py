"""Per-token log-probabilities, entropies and full-vocabulary KL from logits, in bounded memory.

Logits are ``(batch, seq, vocab)`` or packed ``(tokens, vocab)``, often bf16. A float32 softmax over the whole tensor
would be several GiB for a real vocabulary, so every function here walks the token dimension in chunks of
``chunk_size`` tokens, upcasting one chunk at a time to float32.

Autograd would normally keep every chunk's float32 intermediates alive until backward, defeating the chunking. So
each function is a ``torch.autograd.Function`` that saves only its inputs (in their own dtype) and recomputes the
chunk's softmax during backward. The gradient w.r.t. the logits is returned in the logits' dtype. Outputs have the
logits' leading shape and are float32 (float64 for float64 logits).
"""

from __future__ import annotations

import itertools
from typing import Iterator

import torch

DEFAULT_CHUNK_SIZE = 512  # tokens; x vocab 152k x 4 bytes = 300 MiB per float32 temporary

Index = tuple  # an index into the leading (non-vocab) dims of the logits


def _chunks(leading: torch.Size, chunk_size: int) -> Iterator[Index]:
    """Indices into the leading dims covering every token once, at most ``chunk_size`` tokens each, each a view.

    Outer leading dims are walked one position at a time and the innermost leading dim is sliced, so indexing never
    copies even for non-contiguous logits (e.g. ``logits[:, :-1]``). Callers flatten contiguous inputs to 2-D first,
    so the common case is a single sliced dim.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if len(leading) == 0:
        yield ()
        return
    *outer, inner = leading
    for prefix in itertools.product(*(range(n) for n in outer)):
        for start in range(0, inner, chunk_size):
            yield (*prefix, slice(start, min(start + chunk_size, inner)))


def _as_2d(t: torch.Tensor, trailing: int) -> torch.Tensor:
    """View ``t`` with its leading dims flattened, if that needs no copy; otherwise ``t`` itself."""
    lead = t.shape[: t.dim() - trailing]
    if len(lead) <= 1:
        return t
    try:
        return t.view(-1, *t.shape[t.dim() - trailing :])
    except RuntimeError:
        return t


def _compute_dtype(logits: torch.Tensor) -> torch.dtype:
    """float32 for half/bf16/fp32 logits; float64 stays float64."""
    return torch.promote_types(logits.dtype, torch.float32)


def _check_logits(logits: torch.Tensor) -> None:
    if logits.dim() < 2:
        raise ValueError(f"logits must be (..., vocab) with at least one token dim, got shape {tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got {logits.dtype}")


class _LogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, chunk_size: int) -> torch.Tensor:
        dt = _compute_dtype(logits)
        out = torch.empty(labels.shape, dtype=dt, device=logits.device)
        for idx in _chunks(labels.shape, chunk_size):
            z = logits[idx].to(dt)
            picked = z.gather(-1, labels[idx].unsqueeze(-1)).squeeze(-1)
            out[idx] = picked - torch.logsumexp(z, dim=-1)
        ctx.save_for_backward(logits, labels)
        ctx.chunk_size = chunk_size
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        logits, labels = ctx.saved_tensors
        grad = torch.empty_like(logits)
        dt = _compute_dtype(logits)
        for idx in _chunks(labels.shape, ctx.chunk_size):
            # d log p_y / d z = onehot(y) - softmax(z); built in place to keep one chunk-sized buffer.
            scale = grad_out[idx].to(dt).unsqueeze(-1)
            g = torch.softmax(logits[idx].to(dt), dim=-1).mul_(-scale)
            g.scatter_add_(-1, labels[idx].unsqueeze(-1), scale)
            grad[idx] = g
        return grad, None, None


class _Entropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, chunk_size: int) -> torch.Tensor:
        leading = logits.shape[:-1]
        dt = _compute_dtype(logits)
        out = torch.empty(leading, dtype=dt, device=logits.device)
        for idx in _chunks(leading, chunk_size):
            logp = torch.log_softmax(logits[idx].to(dt), dim=-1)
            out[idx] = -(logp.exp() * logp).sum(dim=-1)
        ctx.save_for_backward(logits, out)
        ctx.chunk_size = chunk_size
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        logits, entropy = ctx.saved_tensors
        grad = torch.empty_like(logits)
        dt = _compute_dtype(logits)
        for idx in _chunks(logits.shape[:-1], ctx.chunk_size):
            # H = -sum p log p  =>  dH/dz_j = -p_j * (log p_j + H)
            logp = torch.log_softmax(logits[idx].to(dt), dim=-1)
            g = logp.exp()
            g.mul_(logp.add_(entropy[idx].unsqueeze(-1))).mul_(-grad_out[idx].to(dt).unsqueeze(-1))
            grad[idx] = g
        return grad, None


class _FullKL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, ref_logits: torch.Tensor, chunk_size: int) -> torch.Tensor:
        leading = logits.shape[:-1]
        dt = _compute_dtype(logits)
        out = torch.empty(leading, dtype=dt, device=logits.device)
        for idx in _chunks(leading, chunk_size):
            logp = torch.log_softmax(logits[idx].to(dt), dim=-1)
            logq = torch.log_softmax(ref_logits[idx].to(dt), dim=-1)
            out[idx] = (logp.exp() * (logp - logq)).sum(dim=-1)
        ctx.save_for_backward(logits, ref_logits, out)
        ctx.chunk_size = chunk_size
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        logits, ref_logits, kl = ctx.saved_tensors
        need_p, need_q = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_p = torch.empty_like(logits) if need_p else None
        grad_q = torch.empty_like(ref_logits) if need_q else None
        dt = _compute_dtype(logits)
        for idx in _chunks(logits.shape[:-1], ctx.chunk_size):
            logp = torch.log_softmax(logits[idx].to(dt), dim=-1)
            logq = torch.log_softmax(ref_logits[idx].to(dt), dim=-1)
            p = logp.exp()
            scale = grad_out[idx].to(dt).unsqueeze(-1)
            if grad_p is not None:
                # KL = sum p (log p - log q)  =>  dKL/dz_j = p_j * (log p_j - log q_j - KL)
                grad_p[idx] = (p * (logp - logq - kl[idx].unsqueeze(-1)) * scale).to(grad_p.dtype)
            if grad_q is not None:
                # dKL/dw_j = q_j - p_j
                grad_q[idx] = ((logq.exp() - p) * scale).to(grad_q.dtype)
        return grad_p, grad_q, None


def _flatten_tokens(*big: torch.Tensor) -> tuple[list[torch.Tensor], bool]:
    """Views of ``(..., vocab)`` tensors as ``(tokens, vocab)`` when all allow it without a copy; else unchanged."""
    flat = [_as_2d(t, 1) for t in big]
    if all(f.dim() == 2 for f in flat):
        return flat, True
    return list(big), False


def log_probs_from_logits(
    logits: torch.Tensor, labels: torch.Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> torch.Tensor:
    """``log softmax(logits)[label]`` per token: logits ``(..., vocab)``, labels ``(...)`` int -> float32 ``(...)``.

    Differentiable w.r.t. ``logits``. Labels must be valid vocabulary ids (mask padding afterwards, don't use -100).
    """
    _check_logits(logits)
    if labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"labels shape {tuple(labels.shape)} must equal the logits shape without vocab {tuple(logits.shape[:-1])}"
        )
    (z,), flat = _flatten_tokens(logits)
    # Labels are small; a copy to make them match the flattened logits is cheap.
    y = labels.reshape(-1).long() if flat else labels.long()
    return _LogProbs.apply(z, y, chunk_size).view(labels.shape)


def entropy_from_logits(logits: torch.Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` per token: ``(..., vocab)`` -> float32 ``(...)``. Differentiable."""
    _check_logits(logits)
    (z,), _ = _flatten_tokens(logits)
    return _Entropy.apply(z, chunk_size).view(logits.shape[:-1])


@torch.no_grad()
def sum_pi_squared_from_logits(logits: torch.Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE) -> torch.Tensor:
    """``sum_v softmax(logits)_v ** 2`` per token (how concentrated the next-token distribution is: 1 for a sure
    token, 1/V for a uniform one): ``(..., vocab)`` -> float32 ``(...)``, as ``exp(logsumexp(2z) - 2 logsumexp(z))``.
    Without gradient: the optimal token baseline reads it as a property of the sampling policy."""
    _check_logits(logits)
    (z,), _ = _flatten_tokens(logits)
    leading = z.shape[:-1]
    dt = _compute_dtype(z)
    out = torch.empty(leading, dtype=dt, device=z.device)
    for idx in _chunks(leading, chunk_size):
        chunk = z[idx].to(dt)
        out[idx] = torch.exp(torch.logsumexp(2 * chunk, dim=-1) - 2 * torch.logsumexp(chunk, dim=-1))
    return out.view(logits.shape[:-1])


def full_kl_from_logits(
    logits: torch.Tensor, ref_logits: torch.Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> torch.Tensor:
    """Exact ``KL(softmax(logits) || softmax(ref_logits))`` per token over the whole vocabulary -> float32 ``(...)``.

    Differentiable w.r.t. both inputs (normally only ``logits`` requires grad).
    """
    _check_logits(logits)
    if ref_logits.shape != logits.shape:
        raise ValueError(f"ref_logits shape {tuple(ref_logits.shape)} != logits shape {tuple(logits.shape)}")
    (z, w), _ = _flatten_tokens(logits, ref_logits)
    return _FullKL.apply(z, w, chunk_size).view(logits.shape[:-1])
