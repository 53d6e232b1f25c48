"""Prompts plus their sampled responses → one training batch (verl's tensor names).

Row layout: the prompt left-padded to the longest prompt `P`, then the response right-padded to the longest response
`R`, so every response starts at column `P`. Rows are prompt-major: the `n` samples of prompt `i` are rows
`i*n .. i*n+n-1`, and they share the prompt's `uid` (the group GRPO-style estimators normalise over).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from app.batch import TensorBatch, concat_padded
from app.data import PromptBatch


@dataclass
class RolloutGroup:
    """Everything the loop keeps about the samples of one step on one rank, beside the tensors."""

    batch: TensorBatch
    uid: list[str]
    dataset_index: list[int]  # position of each sample's prompt in the training dataset
    data_source: list[str]
    ground_truth: list[Any]
    extra_info: list[dict[str, Any]]
    messages: list[list[dict[str, str]]]  # the prompt as chat messages (a reward model re-templates them)
    finish_reason: list[str]
    policy_version: int
    extras: dict[str, list[Any]] = field(default_factory=dict)


def build_rollout_batch(
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    rollout_log_probs: Sequence[Sequence[float]],
    pad_token_id: int,
) -> TensorBatch:
    """Tensors for rows of (prompt, response) token ids.

    Returns a TensorBatch with
        input_ids, attention_mask, position_ids: `(rows, P + R)`; attention_mask 1 = real token (keep);
        responses, response_mask, rollout_log_probs: `(rows, R)`; response_mask 1 = real response token (keep).
    An empty response gets one masked pad column so shapes stay valid; it contributes nothing to any loss.
    """
    if not (len(prompt_ids) == len(response_ids) == len(rollout_log_probs)):
        raise ValueError(
            f"build_rollout_batch: {len(prompt_ids)} prompts, {len(response_ids)} responses and "
            f"{len(rollout_log_probs)} log-prob rows must match"
        )
    rows = len(prompt_ids)
    p_len = max(len(p) for p in prompt_ids)
    r_len = max(1, max(len(r) for r in response_ids))
    input_ids = torch.full((rows, p_len + r_len), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((rows, p_len + r_len), dtype=torch.long)
    logp = torch.zeros((rows, r_len), dtype=torch.float32)
    for i, (prompt, response, lps) in enumerate(zip(prompt_ids, response_ids, rollout_log_probs)):
        if len(lps) != len(response):
            raise ValueError(f"row {i}: {len(response)} response tokens but {len(lps)} rollout log-probs")
        input_ids[i, p_len - len(prompt) : p_len] = torch.as_tensor(prompt, dtype=torch.long)
        attention_mask[i, p_len - len(prompt) : p_len] = 1
        if response:
            input_ids[i, p_len : p_len + len(response)] = torch.as_tensor(response, dtype=torch.long)
            attention_mask[i, p_len : p_len + len(response)] = 1
            logp[i, : len(response)] = torch.as_tensor(lps, dtype=torch.float32)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    return TensorBatch(
        {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "responses": input_ids[:, p_len:].clone(),
            "response_mask": attention_mask[:, p_len:].clone(),
            "rollout_log_probs": logp,
        }
    )


def sampled_group(
    prompts: PromptBatch, samples: Sequence[Any], version: int, pad_token_id: int, temperature: float
) -> RolloutGroup:
    """The group of the rollout service's `samples` (each names its `prompt_index` in `prompts`), made by policy
    `version` at sampling `temperature`."""
    prompt_ids = [prompts.raw_prompt_ids[s.prompt_index] for s in samples]
    batch = build_rollout_batch(
        prompt_ids, [s.response_token_ids for s in samples], [s.logprobs for s in samples], pad_token_id
    )
    batch.meta["temperature"] = temperature
    pick = [s.prompt_index for s in samples]
    return RolloutGroup(
        batch=batch,
        uid=[prompts.uid[i] for i in pick],
        dataset_index=[prompts.index[i] for i in pick],
        data_source=[prompts.data_source[i] for i in pick],
        ground_truth=[prompts.ground_truth[i] for i in pick],
        extra_info=[prompts.extra_info[i] for i in pick],
        messages=[prompts.raw_prompt[i] for i in pick],
        finish_reason=[s.finish_reason for s in samples],
        policy_version=version,
    )


def decode_responses(tokenizer: Any, batch: TensorBatch) -> list[str]:
    """Each row's response text (its real tokens only, special tokens left out)."""
    ids = [row[mask.bool()].tolist() for row, mask in zip(batch["responses"], batch["response_mask"])]
    return tokenizer.batch_decode(ids, skip_special_tokens=True)


# prefix of the per-sample fields a reward returned beside its score (`acc`, `formatted`, ...) in RolloutGroup.extras
REWARD_EXTRA = "reward_extra/"


def dump_rollouts(folder: str, step: int, rank: int, group: RolloutGroup, texts: list[str], log_overlong: bool) -> Path:
    """verl's `trainer.rollout_data_dir`: `group`'s samples (decoded `texts`, ground truth, score and the reward's
    other fields), a line each, written to `folder/<step>-rank<rank>.jsonl`; returns the file."""
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    scores = group.batch["token_level_scores"].sum(dim=1).tolist()
    log_overlong = log_overlong and "overlong_penalty" in group.extras
    out = path / f"{step}-rank{rank}.jsonl"
    with out.open("w") as f:
        for i, text in enumerate(texts):
            row = {
                "step": step,
                "uid": group.uid[i],
                "dataset_index": group.dataset_index[i],
                "prompt": group.messages[i],
                "response": text,
                "ground_truth": group.ground_truth[i],
                "score": scores[i],
                "finish_reason": group.finish_reason[i],
                "policy_version": group.policy_version,
            }
            # as verl's dumps: what the reward returned beside the score (acc, formatted, ...)
            row |= {k[len(REWARD_EXTRA) :]: v[i] for k, v in group.extras.items() if k.startswith(REWARD_EXTRA)}
            if log_overlong:
                row["overlong_penalty"] = group.extras["overlong_penalty"][i]
            f.write(json.dumps(row, default=str) + "\n")
    return out


def repeat_per_sample(values: Sequence[Any], n: int) -> list[Any]:
    """Prompt-level values repeated for the `n` samples of each prompt, prompt-major."""
    return [v for v in values for _ in range(n)]


def response_lengths(batch: TensorBatch) -> torch.Tensor:
    """`(rows,)` number of real response tokens per row."""
    return batch["response_mask"].sum(dim=1)


def select_rows(group: RolloutGroup, rows: Sequence[int]) -> RolloutGroup:
    """The samples `rows` of `group`, in that order (tensors, per-sample lists and per-sample extras alike)."""
    rows = list(rows)

    def pick(values):
        return values[torch.as_tensor(rows, dtype=torch.long)] if torch.is_tensor(values) else [values[i] for i in rows]

    return RolloutGroup(
        batch=group.batch.index(rows),
        uid=pick(group.uid),
        dataset_index=pick(group.dataset_index),
        data_source=pick(group.data_source),
        ground_truth=pick(group.ground_truth),
        extra_info=pick(group.extra_info),
        messages=pick(group.messages),
        finish_reason=pick(group.finish_reason),
        policy_version=group.policy_version,
        extras={k: pick(v) for k, v in group.extras.items()},
    )


def concat_groups(groups: Sequence[RolloutGroup], pad_token_id: int) -> RolloutGroup:
    """The samples of all `groups` in order, one batch re-padded to the longest prompt `P` and response `R`.

    Tensors as wide as prompt + response get left padding up to `P` and right padding up to `R`; tensors as wide as
    the response get right padding. The pad is `pad_token_id` for `input_ids` / `responses` and 0 elsewhere (masks 0 =
    padding), which is what `build_rollout_batch` writes.
    """
    if not groups:
        raise ValueError("concat_groups: no groups")
    versions = {g.policy_version for g in groups}
    if len(versions) != 1:
        raise ValueError(f"concat_groups: samples of policy versions {sorted(versions)} must not share a batch")
    extras = {}
    for key in groups[0].extras:
        parts = [g.extras[key] for g in groups]
        extras[key] = torch.cat(parts) if torch.is_tensor(parts[0]) else [v for part in parts for v in part]
    return RolloutGroup(
        batch=concat_padded([g.batch for g in groups], pad_token_id),
        uid=[u for g in groups for u in g.uid],
        dataset_index=[i for g in groups for i in g.dataset_index],
        data_source=[d for g in groups for d in g.data_source],
        ground_truth=[t for g in groups for t in g.ground_truth],
        extra_info=[e for g in groups for e in g.extra_info],
        messages=[m for g in groups for m in g.messages],
        finish_reason=[f for g in groups for f in g.finish_reason],
        policy_version=versions.pop(),
        extras=extras,
    )
