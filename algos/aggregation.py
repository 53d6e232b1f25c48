"""Reduce a per-token loss matrix to a scalar, as selected by ``actor.loss_agg_mode`` (verl names).

Design: normalisation is global to the mini-batch, so micro-batching cannot change the gradient.

An optimizer step consumes one mini-batch, processed as several micro-batches whose gradients are summed. If each
micro-batch divided by its *own* token or sequence count, micro-batches with fewer tokens would weigh more and the
result would depend on how the mini-batch was cut. So every mode is written as

    loss = (sum over the kept entries of a per-micro-batch numerator) / normalizer

where the numerator is additive over rows and ``normalizer`` is a constant computed once from the whole
mini-batch's ``response_mask`` by ``loss_normalizer``. Summing the micro-batch losses then gives exactly the
whole-batch loss, and so the same gradient.

======================== ==================================================== ===============================
mode                     numerator (summed over rows)                          normalizer (whole mini-batch)
======================== ==================================================== ===============================
token-mean               sum of kept token losses                              number of kept tokens
seq-mean-token-sum       per row: sum of its kept token losses                 number of rows with a kept token
seq-mean-token-mean      per row: mean of its kept token losses                number of rows with a kept token
seq-mean-token-sum-norm  per row: sum of its kept token losses                 rows * loss_scale_factor
======================== ==================================================== ===============================

``seq-mean-token-mean``: a row's token mean only involves that row, and rows are never split across micro-batches,
so it is micro-batch invariant with the global row count. ``seq-mean-token-sum-norm`` (Dr. GRPO) divides by a
constant that does not depend on response lengths: ``loss_scale_factor`` (default: the padded ``response_len``)
times the number of rows. Rows that are entirely masked count in this mode (the constant is "batch size x max
length") but not in the seq-mean modes.

``agg_loss(..., normalizer=None)`` normalises over the batch it is given, i.e. treats it as the whole mini-batch.
Data parallel: if ranks' gradients are *averaged* (FSDP/DDP do), pass ``global_normalizer / world_size`` so the
average equals the sum over the global mini-batch divided by the global normalizer. Computing the global normalizer
(an all-reduce) is the caller's job; this module does no communication. Every normalizer is a sum over rows, so
the global one is the all-reduce SUM of each rank's ``loss_normalizer`` of its own rows.

A normalizer of 0 (nothing kept) is treated as 1, which yields a loss of exactly 0 instead of NaN.
"""

from __future__ import annotations

import torch

from algos.masked import masked_fill_zero

LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
_CONFIG_KEY = "actor.loss_agg_mode"


def _check_mode(loss_agg_mode: str) -> None:
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown {_CONFIG_KEY}={loss_agg_mode!r}; known modes: {', '.join(LOSS_AGG_MODES)}")


def _check_seq_shape(mask: torch.Tensor, loss_agg_mode: str) -> None:
    if loss_agg_mode != "token-mean" and mask.dim() != 2:
        raise ValueError(
            f"{_CONFIG_KEY}={loss_agg_mode!r} needs (batch, response_len) masks, got shape {tuple(mask.shape)}"
        )


def loss_normalizer(
    response_mask: torch.Tensor, loss_agg_mode: str, *, loss_scale_factor: float | None = None
) -> float:
    """The divisor for ``agg_loss`` computed from the *whole* mini-batch's ``response_mask`` ``(batch, response_len)``.

    token-mean: kept tokens; seq-mean-token-sum / seq-mean-token-mean: rows with at least one kept token;
    seq-mean-token-sum-norm: rows * (``loss_scale_factor`` or ``response_len``).
    """
    _check_mode(loss_agg_mode)
    _check_seq_shape(response_mask, loss_agg_mode)
    keep = response_mask.bool()
    if loss_agg_mode == "token-mean":
        return float(keep.sum().item())
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
        return float(keep.any(dim=-1).sum().item())
    scale = float(response_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    if scale <= 0:
        raise ValueError(f"actor.loss_scale_factor must be > 0, got {loss_scale_factor!r}")
    return float(response_mask.shape[0]) * scale


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    normalizer: float | None = None,
    *,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Scalar loss from ``loss_mat`` ``(batch, response_len)`` kept where ``loss_mask`` is 1.

    ``normalizer``: from ``loss_normalizer`` on the whole mini-batch; ``None`` computes it from this batch
    (``loss_scale_factor`` is only used then, by seq-mean-token-sum-norm).
    """
    _check_mode(loss_agg_mode)
    _check_seq_shape(loss_mask, loss_agg_mode)
    if loss_mat.shape != loss_mask.shape:
        raise ValueError(f"loss_mat shape {tuple(loss_mat.shape)} != loss_mask shape {tuple(loss_mask.shape)}")
    if normalizer is None:
        normalizer = loss_normalizer(loss_mask, loss_agg_mode, loss_scale_factor=loss_scale_factor)
    normalizer = float(normalizer)
    if normalizer < 0 or normalizer != normalizer:
        raise ValueError(f"loss normalizer must be a non-negative number, got {normalizer}")
    if normalizer == 0:
        normalizer = 1.0
    kept = masked_fill_zero(loss_mat, loss_mask)
    if loss_agg_mode == "seq-mean-token-mean":
        tokens_per_row = loss_mask.bool().sum(dim=-1).clamp(min=1).to(kept.dtype)
        numerator = (kept.sum(dim=-1) / tokens_per_row).sum()
    else:
        # token-mean, seq-mean-token-sum and seq-mean-token-sum-norm share the numerator: the sum of kept losses.
        numerator = kept.sum()
    return numerator / normalizer
