"""Greedy validation: every rank decodes its share of the validation prompts; the mean reward per `data_source`, and
the samples verl's `trainer.log_val_generations` asks for."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Optional

import torch

from app.agents.rollout import AgentRollout, as_samples
from app.agents.trajectory import Trajectory
from app.trainer.collectives import RankGroup
from serve import release_free_heap


def validate(
    rollout: Any,
    scorer: Any,
    tokenizer: Any,
    val_dataset: Any,
    ranks: RankGroup,
    version: int,
    keep_samples: int = 0,
    dump_dir: Optional[str] = None,
    step: int = 0,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """`val-core/<source>/reward/mean`, `val-core/reward/mean` (all prompts) and `val-aux/response_length/mean`,
    from `rollout.generate(..., validation=True)` (the `val_kwargs` sampling; greedy by default) at `version`; and
    `val-aux/<source>/<field>/mean` for each numeric extra field of reward functions that return dicts (the built-in
    arithmetic reward's `acc` and `formatted`), so that a run shows which part of the reward moved. Multi-turn
    rollouts add `val-aux/multi_turn/<count>/mean` per trajectory (`validation_counts`), over all sources.

    Also returns, on rank 0 (empty elsewhere), `keep_samples` rows of {data_source, input, output, ground_truth,
    score}: the same prompts at every validation (a seeded draw), so a table shows one prompt's answers over steps.

    With `dump_dir` (verl's `trainer.validation_data_dir`) every rank writes each of its samples, with the reward's
    own fields, to `dump_dir/<step>-rank<rank>.jsonl`."""
    if val_dataset is None or len(val_dataset) == 0:
        return {}, []
    kept = set(random.Random(42).sample(range(len(val_dataset)), min(keep_samples, len(val_dataset))))
    rows: list[dict[str, Any]] = []
    indices = list(range(ranks.rank, len(val_dataset), ranks.world))
    records = [val_dataset[i] for i in indices]
    sources = sorted({r.data_source for r in val_dataset})
    sums = torch.zeros(len(sources) * 2 + 1, dtype=torch.float64)  # (reward, count) per source, response tokens
    fields: dict[str, list[float]] = {}  # "<source>/<field>" -> [sum, count] of this rank's numeric values
    release_free_heap()  # this process waits while the replicas generate: its free heap is of no use meanwhile
    if records:
        prompt_ids = [r.prompt_ids for r in records]
        turn_counts: list[dict[str, float]] = []  # per sample, multi-turn only
        if isinstance(rollout, AgentRollout):  # multi-turn: tools and interactions read the rows' kwargs
            trajs = rollout.trajectories(
                prompt_ids,
                expect_version=version,
                validation=True,
                extra_infos=[r.extra_info for r in records],
                prompt_messages=[r.messages for r in records],
            )
            samples = as_samples(trajs, len(prompt_ids), version)
            turn_counts = [validation_counts(t) for t in trajs]
        else:
            samples = rollout.generate(prompt_ids, validation=True, expect_version=version)
        texts = tokenizer.batch_decode([s.response_token_ids for s in samples], skip_special_tokens=True)
        picked = [records[s.prompt_index] for s in samples]
        scores, _, extra = scorer.score(
            texts,
            [r.data_source for r in picked],
            [r.ground_truth for r in picked],
            [r.extra_info for r in picked],
            [r.messages for r in picked],
        )
        if dump_dir is not None:
            dump_validation(
                dump_dir,
                step,
                ranks.rank,
                [indices[s.prompt_index] for s in samples],
                picked,
                texts,
                scores,
                extra,
                tokenizer,
            )
        for i, (rec, score, sample) in enumerate(zip(picked, scores, samples)):
            j = sources.index(rec.data_source)
            sums[2 * j] += score
            sums[2 * j + 1] += 1
            sums[-1] += len(sample.response_token_ids)
            if indices[sample.prompt_index] in kept:
                rows.append(
                    {
                        "index": indices[sample.prompt_index],
                        "data_source": rec.data_source,
                        "input": tokenizer.decode(rec.prompt_ids, skip_special_tokens=True),
                        "output": texts[i],
                        "ground_truth": str(rec.ground_truth),
                        "score": float(score),
                    }
                )
            for name, value in (turn_counts[i] if turn_counts else {}).items():
                _add_to_mean(fields, f"multi_turn/{name}", value)
            for name, values in extra.items():
                if isinstance(values[i], (int, float)):  # bool included; text fields (e.g. `pred`) are not averaged
                    _add_to_mean(fields, f"{rec.data_source}/{name}", float(values[i]))
    names = ranks.union(set(fields))  # every rank reduces the same fields, also those it did not see
    field_sums = torch.tensor([fields.get(n, [0.0, 0.0]) for n in names], dtype=torch.float64).reshape(-1)
    sums = ranks.engine.all_reduce(torch.cat([sums, field_sums]), "sum")
    sums, field_sums = sums[: len(sources) * 2 + 1], sums[len(sources) * 2 + 1 :].reshape(-1, 2)
    out, total, count = {}, 0.0, 0.0
    for j, source in enumerate(sources):
        if sums[2 * j + 1] > 0:
            out[f"val-core/{source}/reward/mean"] = float(sums[2 * j] / sums[2 * j + 1])
            total, count = total + float(sums[2 * j]), count + float(sums[2 * j + 1])
    if count:
        out["val-core/reward/mean"] = total / count
        out["val-aux/response_length/mean"] = float(sums[-1]) / count
    for name, (total, n) in zip(names, field_sums.tolist()):
        if n:
            out[f"val-aux/{name}/mean"] = total / n
    return out, _gather_rows(rows, ranks) if kept else []


def dump_validation(
    folder: str,
    step: int,
    rank: int,
    indices: list[int],
    records: list[Any],
    texts: list[str],
    scores: list[float],
    extra: dict[str, list[Any]],
    tokenizer: Any,
) -> Path:
    """One line per validation sample (its index in the validation set, data_source, input, output, ground truth,
    score and the reward's own fields) to `folder/<step>-rank<rank>.jsonl`; returns the file."""
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    out = path / f"{step}-rank{rank}.jsonl"
    with out.open("w") as f:
        for i, rec in enumerate(records):
            row = {
                "step": step,
                "index": indices[i],
                "data_source": rec.data_source,
                "input": tokenizer.decode(rec.prompt_ids, skip_special_tokens=True),
                "output": texts[i],
                "ground_truth": rec.ground_truth,
                "score": float(scores[i]),
            }
            row |= {name: values[i] for name, values in extra.items()}
            f.write(json.dumps(row, default=str) + "\n")
    return out


def _add_to_mean(fields: dict[str, list[float]], name: str, value: float) -> None:
    """One value into `fields[name]`, the [sum, count] its mean is reduced from."""
    total = fields.setdefault(name, [0.0, 0.0])
    total[0], total[1] = total[0] + value, total[1] + 1


def validation_counts(t: Trajectory) -> dict[str, float]:
    """A validation trajectory's counts: its model turns, tool calls and tool errors, and `tool_call_ok`, 1 when it
    called a tool and every call parsed, reached its tool and came back without an error (else 0)."""
    return {
        "assistant_turns": float(t.assistant_turns),
        "tool_calls": float(t.tool_calls),
        "tool_errors": float(t.tool_error_count),
        "tool_call_ok": float(t.tool_calls > 0 and t.tool_calls_ok == t.tool_calls),
    }


def _gather_rows(rows: list[dict[str, Any]], ranks: RankGroup) -> list[dict[str, Any]]:
    """Every rank's sample rows on rank 0, in validation-set order (each rank calls this: it is a collective)."""
    gathered = [row for text in ranks.gather_text(json.dumps(rows)) for row in json.loads(text)]
    if ranks.rank != 0:
        return []
    return [{k: v for k, v in row.items() if k != "index"} for row in sorted(gathered, key=lambda r: r["index"])]
