"""Greedy GSM8K accuracy of a Hugging Face model folder with vLLM (no Ray): the evaluation of bench/learn_gsm8k.py.

The first `--items` problems of a GSM8K JSONL file, in the prompt format `python -m app.prepare gsm8k` writes (the
chat template around the question and `--instruction`, by default the "#### <answer>" one), greedy decoding up to
`--max-tokens` new tokens, scored by the built-in `openai/gsm8k` rule two ways: strict (the number after `####`,
verl's rule) and flexible (the last number in the response).

    python bench/gsm8k_eval.py --model DIR [--data ../shared/data/gsm8k/test.jsonl] [--items 200] [--max-tokens 300]
        [--instruction TEXT] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.data.verl_rows import ANSWER_INSTRUCTION  # noqa: E402  (after the path: the bench runs as a script)


def evaluate(model: Path, data: Path, items: int, max_tokens: int, instruction: str, threads: int = 2) -> dict:
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from algos.rewards.gsm8k import compute_score
    from app.data.gsm8k_task import gsm8k_rows
    from app.data.prompts import render_prompts, tokenize_prompts
    from app.engine.precision import cpu_has_native_bf16, resolve_auto_dtype
    from serve.vllm_engine import cpu_bind_string

    rows = gsm8k_rows(str(data), "test", instruction)[:items]
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompt_ids = tokenize_prompts(tokenizer, render_prompts(tokenizer, [r["prompt"] for r in rows]))
    dtype = resolve_auto_dtype(False, cpu_has_native_bf16())[1]  # fp32 where bf16 would be emulated
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_bind_string(threads, 0)
    start = time.perf_counter()
    llm = LLM(
        model=str(model),
        dtype=dtype,
        enforce_eager=True,
        seed=0,
        kv_cache_memory_bytes=3 << 30,
        max_model_len=max(len(p) for p in prompt_ids) + max_tokens,
        max_num_seqs=256,
        disable_log_stats=True,
    )
    try:
        outputs = llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompt_ids],
            SamplingParams(temperature=0.0, max_tokens=max_tokens),
            use_tqdm=False,
        )
    finally:
        llm.llm_engine.engine_core.shutdown()  # stop vLLM's engine processes now, not at interpreter exit
    texts = [o.outputs[0].text for o in outputs]
    truth = [r["reward_model"]["ground_truth"] for r in rows]
    strict = [compute_score(t, g, method="strict") for t, g in zip(texts, truth)]
    flexible = [compute_score(t, g, method="flexible") for t, g in zip(texts, truth)]
    return {
        "model": str(model),
        "data": str(data),
        "items": len(rows),
        "max_tokens": max_tokens,
        "instruction": instruction,
        "strict": statistics.mean(strict),
        "flexible": statistics.mean(flexible),
        "cut_at_max_tokens": statistics.mean(o.outputs[0].finish_reason == "length" for o in outputs),
        "mean_response_tokens": statistics.mean(len(o.outputs[0].token_ids) for o in outputs),
        "seconds": time.perf_counter() - start,
        "examples": [
            {"question": r["extra_info"]["question"], "response": t, "answer": g}
            for r, t, g in list(zip(rows, texts, truth))[:3]
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl")
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=300)
    parser.add_argument(
        "--instruction",
        default=ANSWER_INSTRUCTION,
        help="line after each question, as `app.prepare gsm8k --instruction` writes it ('' for none)",
    )
    parser.add_argument("--json", type=Path, help="write the result here as well")
    args = parser.parse_args()
    result = evaluate(args.model, args.data, args.items, args.max_tokens, args.instruction)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    print(
        f"{args.model}: strict {result['strict']:.1%}, flexible {result['flexible']:.1%} on {result['items']} items "
        f"({result['cut_at_max_tokens']:.0%} cut at {args.max_tokens} tokens, {result['seconds']:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
