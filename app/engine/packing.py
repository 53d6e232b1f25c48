"""Model inputs for computing per-response-token outputs, padded or packed ("remove padding").

Row layout (verl): ``input_ids (b, P+R)`` with the prompt left-padded in columns ``[0, P)`` and the response
right-padded in ``[P, P+R)``. Response token ``j`` (column ``P+j``) is predicted by the model output at column
``P+j-1``, so the outputs we need sit at columns ``P-1 .. P+R-2``.

Packed: the real tokens of all rows are concatenated into one row ``(1, T)``; ``position_ids`` restart at each
sequence and ``cu_seqlens`` marks the boundaries for per-sequence attention. Only the ``K`` positions that predict
a real response token are sent through the LM head (``output_index``), which on a 49k vocabulary is a large saving.

Shared prompts (``share_prompts=True``): rows with the same prompt (a GRPO group) are packed as one copy of the
prompt followed by each row's response, ``[prompt][response 1]..[response n]``; ``prompt_layout`` tells the
attention (``app.engine.packed_attention``) where they are. The first response token of every row is predicted at
the shared last prompt token.

Rounded: with ``length_multiple`` the packed row ends in a filler sequence that brings its length to a multiple of
it (a prompt without responses in a shared layout); the filler attends only to itself and no kept output reads it.
With ``outputs_multiple``, ``output_index`` repeats its last position to bring the kept outputs to a multiple of it,
and ``scatter`` drops the repeats' values. Few distinct shapes let the kernels and the heap reuse what earlier
micro-batches built (``app.engine.forward``); sequence parallelism splits a row of a multiple of its ranks.

Padded: columns that are padding in every row are trimmed (leading prompt padding, trailing response padding).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PackedInputs:
    input_ids: torch.Tensor  # (1, T) real tokens of all rows, row after row
    position_ids: torch.Tensor  # (1, T) restarting at 0 for each row
    cu_seqlens: torch.Tensor  # (b+1,) int32 sequence boundaries in the packed row
    max_seqlen: int
    # (K',) packed positions whose output predicts a real response token: the first K (K = len(rows)); the rest,
    # with ``outputs_multiple``, repeat the last one
    output_index: torch.Tensor
    rows: torch.Tensor  # (K,) row of each kept output in the (b, R) response grid
    cols: torch.Tensor  # (K,) response column of each kept output
    labels: torch.Tensor  # (K',) the response token each position of output_index predicts
    batch_size: int
    response_len: int
    # shared prompts: (prompt length, (response lengths...)) per distinct prompt, in packed order; None: one
    # sequence per row, as cu_seqlens says
    prompt_layout: tuple[tuple[int, tuple[int, ...]], ...] | None = None

    def scatter(self, values: torch.Tensor) -> torch.Tensor:
        """``(K',)`` (or ``(K,)``) per-output values -> ``(b, R)`` grid, 0 where there is no real response token;
        the values of the repeated outputs are dropped."""
        out = values.new_zeros(self.batch_size, self.response_len)
        out[self.rows, self.cols] = values[: self.rows.numel()]
        return out


def pack_inputs(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_len: int,
    share_prompts: bool = False,
    length_multiple: int = 1,
    outputs_multiple: int = 1,
) -> PackedInputs:
    """Pack the real tokens (``attention_mask == 1``) of ``(b, P+R)`` rows into one row; with ``share_prompts``,
    rows with the same prompt share one copy of it. ``length_multiple`` / ``outputs_multiple``: round the packed
    length / the count of kept outputs up to a multiple of it (the module's docstring)."""
    for name, value in (("length_multiple", length_multiple), ("outputs_multiple", outputs_multiple)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    b, total = input_ids.shape
    prompt_len = total - response_len
    if prompt_len < 1:
        raise ValueError(f"input_ids has {total} columns but the response is {response_len} long: no prompt column")
    keep = attention_mask.bool()
    lens = keep.sum(dim=1)
    if (lens == 0).any():
        raise ValueError(
            f"rows {torch.nonzero(lens == 0).flatten().tolist()} have no real token (attention_mask all 0)"
        )
    if share_prompts:
        packed_index, source_rows, source_cols, layout = _shared_prompt_index(input_ids, keep, prompt_len)
        packed_ids = input_ids[source_rows, source_cols].unsqueeze(0)
        packed_pos = position_ids[source_rows, source_cols].unsqueeze(0)
        seg_lens = torch.tensor([n for prompt, responses in layout for n in (prompt, *responses)])
    else:
        flat_keep = keep.flatten()
        packed_ids = input_ids.flatten()[flat_keep].unsqueeze(0)
        packed_pos = position_ids.flatten()[flat_keep].unsqueeze(0)
        # packed position of every (row, column) that holds a real token
        packed_index = (torch.cumsum(flat_keep.long(), 0) - 1).view(b, total)
        layout, seg_lens = None, lens
    response_real = keep[:, prompt_len:]  # (b, R)
    rows, cols = torch.nonzero(response_real, as_tuple=True)
    source = packed_index[:, prompt_len - 1 : total - 1]  # (b, R): position whose output predicts column P+j
    output_index, labels = source[rows, cols], input_ids[:, prompt_len:][rows, cols]
    filler = -packed_ids.shape[1] % length_multiple
    if filler:  # a sequence of its own at the end of the row (a prompt without responses in a shared layout)
        packed_ids = torch.cat([packed_ids, packed_ids[:, -1:].expand(1, filler)], dim=1)
        packed_pos = torch.cat([packed_pos, torch.arange(filler, device=packed_pos.device).view(1, filler)], dim=1)
        seg_lens = torch.cat([seg_lens, seg_lens.new_tensor([filler])])
        if layout is not None:
            layout = (*layout, (filler, ()))
    repeats = -len(output_index) % outputs_multiple  # 0 for no outputs: nothing to repeat
    if repeats:
        output_index = torch.cat([output_index, output_index[-1:].expand(repeats)])
        labels = torch.cat([labels, labels[-1:].expand(repeats)])
    cu = torch.zeros(len(seg_lens) + 1, dtype=torch.int32, device=input_ids.device)
    cu[1:] = torch.cumsum(seg_lens, 0)
    return PackedInputs(
        input_ids=packed_ids,
        position_ids=packed_pos,
        cu_seqlens=cu,
        max_seqlen=int(seg_lens.max()),
        output_index=output_index,
        rows=rows,
        cols=cols,
        labels=labels,
        batch_size=b,
        response_len=response_len,
        prompt_layout=layout,
    )


def _shared_prompt_index(input_ids: torch.Tensor, keep: torch.Tensor, prompt_len: int):
    """For ``share_prompts``: the packed position of every real (row, column) (prompt columns of rows with the same
    prompt map to the same positions), the (row, column) each packed position is read from, and the layout."""
    b, total = input_ids.shape
    groups: dict[tuple[int, ...], list[int]] = {}
    for r in range(b):
        prompt = tuple(input_ids[r, :prompt_len][keep[r, :prompt_len]].tolist())
        if not prompt:
            raise ValueError(f"row {r} has no prompt token: its first response token would have nothing to predict it")
        groups.setdefault(prompt, []).append(r)
    packed_index = torch.full((b, total), -1, dtype=torch.long, device=input_ids.device)
    src_rows, src_cols, layout, pos = [], [], [], 0
    for members in groups.values():
        prompt_cols = torch.nonzero(keep[members[0], :prompt_len]).flatten()
        src_rows.append(torch.full_like(prompt_cols, members[0]))
        src_cols.append(prompt_cols)
        shared = torch.arange(pos, pos + len(prompt_cols), device=input_ids.device)
        for r in members:
            packed_index[r, prompt_cols] = shared
        pos += len(prompt_cols)
        response_lens = []
        for r in members:
            response_cols = torch.nonzero(keep[r, prompt_len:]).flatten() + prompt_len
            src_rows.append(torch.full_like(response_cols, r))
            src_cols.append(response_cols)
            packed_index[r, response_cols] = torch.arange(pos, pos + len(response_cols), device=input_ids.device)
            pos += len(response_cols)
            response_lens.append(len(response_cols))
        layout.append((len(prompt_cols), tuple(response_lens)))
    return packed_index, torch.cat(src_rows), torch.cat(src_cols), tuple(layout)


@dataclass
class PaddedInputs:
    input_ids: torch.Tensor  # (b, L') after trimming all-padding columns
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    kept_response_len: int  # response columns kept (R' <= R); outputs for the rest are 0
    response_len: int

    def pad_response(self, values: torch.Tensor) -> torch.Tensor:
        """``(b, R')`` -> ``(b, R)`` with zeros in the trimmed columns."""
        missing = self.response_len - values.shape[1]
        return torch.nn.functional.pad(values, (0, missing)) if missing else values


def trim_padding(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, response_len: int
) -> PaddedInputs:
    """Drop leading columns that are padding in every row, and response columns after the last real token."""
    total = input_ids.shape[1]
    prompt_len = total - response_len
    keep = attention_mask.bool()
    any_real = keep.any(dim=0)
    first = int(torch.nonzero(any_real[:prompt_len]).min()) if any_real[:prompt_len].any() else prompt_len - 1
    first = min(first, prompt_len - 1)  # the last prompt column predicts the first response token
    real_resp = torch.nonzero(any_real[prompt_len:])
    kept = int(real_resp.max()) + 1 if real_resp.numel() else 1
    end = prompt_len + kept
    return PaddedInputs(
        input_ids=input_ids[:, first:end],
        attention_mask=attention_mask[:, first:end],
        position_ids=position_ids[:, first:end],
        kept_response_len=kept,
        response_len=response_len,
    )
