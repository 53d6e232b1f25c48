"""Greedy accuracy of exported models on the arithmetic task, per difficulty level.

Validation logs one figure per data source. Two runs of the quickstart can end at the same accuracy through different
levels, or at different accuracies through one level; this splits the figure by the level each problem was generated
at (`extra_info.level`, 1-4: app/data/arithmetic_task.py) and prints, per model, how many problems of each level it
answered right (`acc`), right with the `#### N` line (`strict`) and with the line at all (`formatted`), beside the
mean reward (`reward`, the quickstart's validation figure), and how many mark two different numbers (`marks differ`:
the reward grades the last, so a right answer followed by another marked number counts as wrong).

    python bench/arithmetic_levels.py MODEL_DIR [MODEL_DIR ...] [--data data/arithmetic/test.parquet]
        [--max-samples 128] [--max-tokens 48] [--answers FILE.jsonl]

MODEL_DIR is a Hugging Face folder: the imported base model or a run's `hf_model`. The defaults are the quickstart's
validation: its first 128 problems, 48 new tokens. `--answers` writes every answer, one JSON line each (model, level,
ground truth, answer), to read what a model got wrong. Generation is greedy with transformers (bf16 where the CPU has
native bf16, else fp32), not vLLM, so a total can differ from the run's logged validation by an answer or two.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from algos.rewards.arithmetic import compute_score  # noqa: E402
from algos.rewards.gsm8k import marked_answers  # noqa: E402
from algos.rewards.numbers import parse_number  # noqa: E402

FIELDS = ("acc", "strict", "formatted", "marks differ")  # shares of answers; the reward's mean comes first


@dataclass(frozen=True)
class Problem:
    messages: list[dict]
    ground_truth: str
    level: int


def load_problems(paths: str | Path | Sequence[str | Path], max_samples: int | None = None) -> list[Problem]:
    """The first `max_samples` rows (None: all) of prepared arithmetic files (app.prepare arithmetic; parquet or
    JSONL, one path or several, read in order). SystemExit naming the file for a row of another task."""
    import pandas as pd

    problems = []
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        frame = pd.read_json(path, lines=True) if str(path).endswith(".jsonl") else pd.read_parquet(path)
        for row in frame.itertuples():
            if row.data_source != "arithmetic":
                raise SystemExit(f"{path}: data_source {row.data_source!r}; only the arithmetic task has levels")
            messages = [dict(m) for m in row.prompt]
            problems.append(Problem(messages, str(row.reward_model["ground_truth"]), int(row.extra_info["level"])))
    return problems[:max_samples]


def generate_batch(model, prompts: Sequence[list[int]], config, pad: int, eos: int) -> list[list[int]]:
    """Each token-id prompt's answer from one left-padded `model.generate` call with a transformers `GenerationConfig`:
    its tokens up to and including the first `eos`, at most the config's budget. Left padding puts every prompt's
    last token where generation starts."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attention = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        attention[row, width - len(prompt) :] = 1
    device = next(model.parameters()).device
    with torch.no_grad():
        out = model.generate(input_ids=ids.to(device), attention_mask=attention.to(device), generation_config=config)
    answers = []
    for row in out[:, width:].tolist():
        answers.append(row[: row.index(eos) + 1] if eos in row else row)
    return answers


def load_model(model_dir: Path):
    """`model_dir`'s tokenizer and model, in bf16 where the CPU has native bf16, else fp32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from app.engine.precision import cpu_has_native_bf16

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    dtype = torch.bfloat16 if cpu_has_native_bf16() else torch.float32
    return tokenizer, AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()


def greedy_continuations(tokenizer, model, texts: Sequence[str], max_tokens: int, batch_size: int = 32) -> list[str]:
    """Each already-templated text's greedy continuation (special tokens dropped), `batch_size` texts a call."""
    from transformers import GenerationConfig

    from app.data.prompts import tokenize_prompts

    prompts = tokenize_prompts(tokenizer, texts)  # the trainer's tokenization
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    config = GenerationConfig(max_new_tokens=max_tokens, do_sample=False, eos_token_id=eos, pad_token_id=pad)
    answers = []
    for start in range(0, len(prompts), batch_size):
        answers.extend(generate_batch(model, prompts[start : start + batch_size], config, pad, eos))
    return tokenizer.batch_decode(answers, skip_special_tokens=True)


def greedy_answers(model_dir: Path, problems: Sequence[Problem], max_tokens: int) -> list[str]:
    """Each problem's greedy response (special tokens dropped), through the model's chat template."""
    from app.data.prompts import render_prompts

    tokenizer, model = load_model(model_dir)
    texts = render_prompts(tokenizer, [p.messages for p in problems])  # the trainer's templating
    return greedy_continuations(tokenizer, model, texts, max_tokens)


def level_table(problems: Sequence[Problem], answers: Sequence[str]) -> str:
    """A markdown table: per level and in all, the problem count, the mean reward and the share of answers with each of
    FIELDS."""
    if len(problems) != len(answers):
        raise ValueError(f"{len(answers)} answers for {len(problems)} problems")
    by_level: dict[int, list[dict[str, float]]] = {}
    for problem, answer in zip(problems, answers):
        marks = {parse_number(mark) for mark in marked_answers(answer)}
        scored = compute_score(answer, problem.ground_truth) | {"marks differ": float(len(marks) > 1)}
        by_level.setdefault(problem.level, []).append(scored)
    rows = [(f"level {level}", by_level[level]) for level in sorted(by_level)]
    rows.append(("all", [score for scores in by_level.values() for score in scores]))
    lines = ["| level | problems | reward | " + " | ".join(FIELDS) + " |", "|---|---|---|" + "---|" * len(FIELDS)]
    for name, scores in rows:
        reward = sum(s["score"] for s in scores) / len(scores)
        shares = " | ".join(f"{sum(s[field] for s in scores) / len(scores):.2f}" for field in FIELDS)
        lines.append(f"| {name} | {len(scores)} | {reward:.3f} | {shares} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path, help="Hugging Face model folders")
    parser.add_argument("--data", type=Path, default=REPO / "data/arithmetic/test.parquet")
    parser.add_argument("--max-samples", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--answers", type=Path, help="write every answer here as JSON lines")
    args = parser.parse_args(argv)
    problems = load_problems(args.data, args.max_samples)
    dumped = []
    for model_dir in args.models:
        answers = greedy_answers(model_dir, problems, args.max_tokens)
        print(f"{model_dir}\n\n{level_table(problems, answers)}\n")
        dumped += [
            {"model": str(model_dir), "level": p.level, "ground_truth": p.ground_truth, "answer": a}
            for p, a in zip(problems, answers)
        ]
    if args.answers:
        args.answers.write_text("".join(json.dumps(row) + "\n" for row in dumped))


if __name__ == "__main__":
    main()
