"""Greedy validation: every rank decodes its share of the validation prompts; the mean reward per `data_source`."""
from __future__ import annotations

from typing import Any

import torch

from app.trainer.collectives import RankGroup


def validate(rollout: Any, scorer: Any, tokenizer: Any, val_dataset: Any, ranks: RankGroup,
             version: int) -> dict[str, float]:
    """`val-core/<source>/reward/mean`, `val-core/reward/mean` (all prompts) and `val-aux/response_length/mean`,
    from `rollout.generate(..., validation=True)` (the `val_kwargs` sampling; greedy by default) at `version`."""
    if val_dataset is None or len(val_dataset) == 0:
        return {}
    records = [val_dataset[i] for i in range(ranks.rank, len(val_dataset), ranks.world)]
    sources = sorted({r.data_source for r in val_dataset})
    sums = torch.zeros(len(sources) * 2 + 1, dtype=torch.float64)  # (reward, count) per source, response tokens
    if records:
        samples = rollout.generate([r.prompt_ids for r in records], validation=True, expect_version=version)
        texts = tokenizer.batch_decode([s.response_token_ids for s in samples], skip_special_tokens=True)
        picked = [records[s.prompt_index] for s in samples]
        scores, _, _ = scorer.score(texts, [r.data_source for r in picked], [r.ground_truth for r in picked],
                                    [r.extra_info for r in picked], [r.messages for r in picked])
        for rec, score, sample in zip(picked, scores, samples):
            j = sources.index(rec.data_source)
            sums[2 * j] += score
            sums[2 * j + 1] += 1
            sums[-1] += len(sample.response_token_ids)
    sums = ranks.engine.all_reduce(sums, "sum")
    out, total, count = {}, 0.0, 0.0
    for j, source in enumerate(sources):
        if sums[2 * j + 1] > 0:
            out[f"val-core/{source}/reward/mean"] = float(sums[2 * j] / sums[2 * j + 1])
            total, count = total + float(sums[2 * j]), count + float(sums[2 * j + 1])
    if count:
        out["val-core/reward/mean"] = total / count
        out["val-aux/response_length/mean"] = float(sums[-1]) / count
    return out
