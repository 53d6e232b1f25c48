"""How much GRPO signal the untrained policy's samples carry, per sampling setting (diagnosis for `make run`).

For each setting (a temperature, optionally truncated by top-p or top-k) it samples `n` responses to the same
training prompts with vLLM (no Ray) and prints: the mean sampled reward next to the greedy reward, the share of
prompts whose group of `n` samples is *mixed* (not all the same score: only those give GRPO a non-zero advantage),
the share of samples cut at the token limit, and the mean
reward per difficulty level. Where the reward returns `formatted` and `acc` (the arithmetic task's), a second table
says how often the samples use the answer format and how often marked and unmarked samples are right: a format
that is sampled rarely, and right less often than plain answers, is what a run can lose (docs/experiments.md). A third
table says, per level, what the samples hold that greedy decoding does not: how often a sample is right, how often
the group's most common answer is (majority vote), and how often any of the `n` is. A trained policy whose greedy
answers sit well under its "right in any" share has right answers left to sharpen toward.

    python bench/sampling_signal.py [--data data/arithmetic/train.parquet] [--prompts 64] [--n 8]
        [--max-tokens 64] [--temperatures 1.0 0.7 0.5] [--samplings 0.7 0.7:p0.9 0.7:k20]

A setting of `--samplings` is a temperature, then `:pP` for top-p and `:kK` for top-k; `--temperatures` adds
untruncated ones.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "models" / "smollm2-135m-instruct")
    parser.add_argument("--data", type=Path, default=REPO / "data" / "arithmetic" / "train.parquet")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperatures", type=float, nargs="*", default=[])
    parser.add_argument("--samplings", type=SamplingSetting.parse, nargs="*", default=[])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    settings = [SamplingSetting(t) for t in args.temperatures] + args.samplings
    if not settings:
        settings = [SamplingSetting(t) for t in (1.0, 0.7, 0.5)]

    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from algos.rewards.default import default_compute_score
    from algos.rewards.gsm8k import extract_answer
    from app.config.schema import DataConfig
    from app.data import PromptDataOptions, load_prompt_dataset
    from app.engine.precision import cpu_has_native_bf16, resolve_auto_dtype
    from app.rewards.manager import split_score
    from serve.vllm_engine import cpu_bind_string

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    options = PromptDataOptions.from_mapping(DataConfig(max_prompt_length=512))
    records = list(load_prompt_dataset(str(args.data), tokenizer, options, max_samples=args.prompts))
    dtype = resolve_auto_dtype(False, cpu_has_native_bf16())[1]  # fp32 where bf16 would be emulated
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_bind_string(args.threads, 0)
    llm = LLM(
        model=str(args.model),
        dtype=dtype,
        enforce_eager=True,
        seed=0,
        kv_cache_memory_bytes=2 << 30,
        max_model_len=512 + args.max_tokens,
        disable_log_stats=True,
    )
    inputs = [TokensPrompt(prompt_token_ids=r.prompt_ids) for r in records]

    def run(params) -> list[list[Sample]]:
        """Every sample of every prompt, scored."""
        out = []
        for rec, result in zip(records, llm.generate(inputs, params, use_tqdm=False)):
            group = []
            for c in result.outputs:
                score, extra = split_score(
                    default_compute_score(rec.data_source, c.text, rec.ground_truth, rec.extra_info)
                )
                # the graded number, as the arithmetic and GSM8K rewards read it: the marked one, else the last
                answer = extract_answer(c.text, "strict") or extract_answer(c.text, "flexible")
                group.append(
                    Sample(score, c.finish_reason == "length", extra.get("formatted"), extra.get("acc"), answer)
                )
            out.append(group)
        return out

    greedy = run(SamplingParams(temperature=0.0, max_tokens=args.max_tokens))
    greedy_mean = statistics.mean(g[0].score for g in greedy)
    levels = sorted({r.extra_info.get("level") for r in records}, key=str)
    print(f"\n{len(records)} prompts from {args.data}, {args.n} samples each, {args.max_tokens} tokens at most")
    print(f"greedy: mean reward {greedy_mean:.3f}, cut {statistics.mean(g[0].cut for g in greedy):.0%}")
    header = f"{'sampling':>11}{'seconds':>9}{'mean reward':>13}{'mixed groups':>14}{'cut':>7}" + "".join(
        f"{'level ' + str(lv):>10}" for lv in levels
    )
    print(header)
    sampled = []  # (label, groups) per setting, in the order given
    for setting in settings:
        params = SamplingParams(
            temperature=setting.temperature,
            top_p=setting.top_p,
            top_k=setting.top_k,
            n=args.n,
            max_tokens=args.max_tokens,
        )
        start = time.perf_counter()
        groups = run(params)
        seconds = time.perf_counter() - start
        sampled.append((setting.label, groups))
        scores = [[s.score for s in g] for g in groups]
        mixed = statistics.mean(len(set(g)) > 1 for g in scores)
        cut = statistics.mean(s.cut for g in groups for s in g)
        per_level = defaultdict(list)
        for rec, g in zip(records, scores):
            per_level[rec.extra_info.get("level")].extend(g)
        print(
            f"{setting.label:>11}{seconds:>9.1f}"
            f"{statistics.mean(s for g in scores for s in g):>13.3f}{mixed:>14.0%}{cut:>7.0%}"
            + "".join(f"{statistics.mean(per_level[lv]):>10.3f}" for lv in levels)
        )
    if all(s.formatted is not None and s.acc is not None for g in greedy for s in g):
        print("\nthe answer format (the reward's `formatted`) and accuracy (`acc`) of marked and of unmarked samples:")
        print(format_table([("greedy", greedy), *sampled]))
        for label, groups in sampled:
            print(f"\nwhat the {args.n} samples at {label} hold, per level (accuracy):")
            problems = [
                (rec.extra_info.get("level"), rec.ground_truth, g[0], s) for rec, g, s in zip(records, greedy, groups)
            ]
            print(holdings_table(problems))
    return 0


@dataclass(frozen=True)
class SamplingSetting:
    temperature: float
    top_p: float = 1.0
    top_k: int = -1  # -1: off, as vLLM reads it

    @classmethod
    def parse(cls, spec: str) -> "SamplingSetting":
        """``"0.7"``, ``"0.7:p0.9"``, ``"0.7:k20"`` or ``"0.7:p0.9:k20"``."""
        temperature, *parts = spec.split(":")
        try:
            fields = {"temperature": float(temperature)}
            for part in parts:
                if part[:1] == "p":
                    fields["top_p"] = float(part[1:])
                elif part[:1] == "k":
                    fields["top_k"] = int(part[1:])
                else:
                    raise ValueError(part)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{spec!r}: expected a temperature, then :pTOP_P and/or :kTOP_K") from err
        return cls(**fields)

    @property
    def label(self) -> str:
        return (
            f"{self.temperature:.2f}"
            + (f" p{self.top_p:g}" if self.top_p < 1 else "")
            + (f" k{self.top_k}" if self.top_k > 0 else "")
        )


@dataclass(frozen=True)
class Sample:
    score: float
    cut: bool  # stopped at the token limit
    formatted: Optional[float]  # the reward's extras, where it returns them
    acc: Optional[float]
    answer: Optional[str] = None  # the graded number


def _share(values: list) -> str:
    return f"{statistics.mean(values):.3f}" if values else "-"


def format_table(rows: list[tuple[str, list[list[Sample]]]]) -> str:
    """Per sampling setting: the share of samples marked, of groups holding a marked sample and a marked right one,
    and the accuracy of marked and of unmarked samples."""
    lines = [
        "| sampling | marked | groups with a marked sample | with a right marked one | marked right | unmarked right |",
        "|---|---|---|---|---|---|",
    ]
    for name, groups in rows:
        samples = [s for g in groups for s in g]
        marked = [s.acc for s in samples if s.formatted]
        plain = [s.acc for s in samples if not s.formatted]
        lines.append(
            f"| {name} | {_share([s.formatted for s in samples])} "
            f"| {_share([any(s.formatted for s in g) for g in groups])} "
            f"| {_share([any(s.formatted and s.acc for s in g) for g in groups])} "
            f"| {_share(marked)} | {_share(plain)} |"
        )
    return "\n".join(lines)


def majority_right(samples: list[Sample], gold: str) -> bool:
    """Whether the group's most common graded number is right (numbers compared as the reward does; a tie goes to
    the answer drawn first; no number at all is an answer of its own)."""
    from algos.rewards.numbers import numbers_equal, parse_number

    def key(answer: Optional[str]):
        value = parse_number(answer) if answer is not None else None
        return value if value is not None else answer

    votes = Counter(key(s.answer) for s in samples)
    top = votes.most_common(1)[0][0]  # of equal counts, most_common keeps the one counted first
    return top is not None and numbers_equal(str(top), gold)


def holdings_table(problems: list[tuple[object, str, Sample, list[Sample]]]) -> str:
    """Per level (and all), from ``(level, gold, greedy sample, sampled group)`` per problem: greedy accuracy, the mean
    accuracy of the samples, majority-vote accuracy, and the share of problems with a right answer among the group."""
    by_level = defaultdict(list)
    for problem in problems:
        by_level[problem[0]].append(problem)
    lines = [
        "| level | problems | greedy | a sample | majority vote | right in any |",
        "|---|---|---|---|---|---|",
    ]
    for name, rows in [*sorted(by_level.items(), key=lambda kv: str(kv[0])), ("all", problems)]:
        lines.append(
            f"| {name} | {len(rows)} | {_share([g.acc for _, _, g, _ in rows])} "
            f"| {_share([statistics.mean(s.acc for s in group) for _, _, _, group in rows])} "
            f"| {_share([majority_right(group, gold) for _, gold, _, group in rows])} "
            f"| {_share([any(s.acc for s in group) for _, _, _, group in rows])} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
