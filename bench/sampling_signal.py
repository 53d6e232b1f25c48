"""How much GRPO signal the untrained policy's samples carry, per sampling temperature (diagnosis for `make run`).

For each temperature it samples `n` responses to the same training prompts with vLLM (no Ray) and prints: the mean
sampled reward next to the greedy reward, the share of prompts whose group of `n` samples is *mixed* (not all the
same score: only those give GRPO a non-zero advantage), the share of samples cut at the token limit, and the mean
reward per difficulty level.

    python bench/sampling_signal.py [--data data/arithmetic/train.parquet] [--prompts 64] [--n 8]
        [--max-tokens 64] [--temperatures 1.0 0.7 0.5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "models" / "smollm2-135m-instruct")
    parser.add_argument("--data", type=Path, default=REPO / "data" / "arithmetic" / "train.parquet")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.7, 0.5])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from algos.rewards.default import default_compute_score
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

    def run(params) -> list[list[tuple[float, bool]]]:
        """(score, cut at the limit) for every sample of every prompt."""
        out = []
        for rec, result in zip(records, llm.generate(inputs, params, use_tqdm=False)):
            scored = [
                default_compute_score(rec.data_source, c.text, rec.ground_truth, rec.extra_info) for c in result.outputs
            ]
            out.append([(split_score(s)[0], c.finish_reason == "length") for s, c in zip(scored, result.outputs)])
        return out

    greedy = run(SamplingParams(temperature=0.0, max_tokens=args.max_tokens))
    greedy_mean = statistics.mean(g[0][0] for g in greedy)
    levels = sorted({r.extra_info.get("level") for r in records}, key=str)
    print(f"\n{len(records)} prompts from {args.data}, {args.n} samples each, {args.max_tokens} tokens at most")
    print(f"greedy: mean reward {greedy_mean:.3f}, cut {statistics.mean(g[0][1] for g in greedy):.0%}")
    header = f"{'temperature':>11}{'mean reward':>13}{'mixed groups':>14}{'cut':>7}" + "".join(
        f"{'level ' + str(lv):>10}" for lv in levels
    )
    print(header)
    for t in args.temperatures:
        groups = run(SamplingParams(temperature=t, n=args.n, max_tokens=args.max_tokens))
        scores = [[s for s, _ in g] for g in groups]
        mixed = statistics.mean(len(set(g)) > 1 for g in scores)
        cut = statistics.mean(c for g in groups for _, c in g)
        per_level = defaultdict(list)
        for rec, g in zip(records, scores):
            per_level[rec.extra_info.get("level")].extend(g)
        print(
            f"{t:>11.2f}{statistics.mean(s for g in scores for s in g):>13.3f}{mixed:>14.0%}{cut:>7.0%}"
            + "".join(f"{statistics.mean(per_level[lv]):>10.3f}" for lv in levels)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
