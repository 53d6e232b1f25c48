"""How far a bf16 policy gradient lies from the fp32 one on this machine, and what each costs.

    .venv/bin/python bench/bf16_gradient_error.py --model models/smollm2-135m-instruct \
        --data OUT/val/0-rank0.jsonl [--rows 32] [--seed 0]

`--data` is a validation dump (`trainer.validation_data_dir`): each row's `input` (the rendered prompt) and `output`
(the answer). One loss, the policy-gradient sum -A * log p(answer token) with a fixed random advantage per answer
averaged over the answers, runs forward and backward once with the model in fp32 and once in bf16 (what the trainer
computes in where `auto` picks bf16). Printed: both losses, the relative L2 error of the bf16 gradients of the linear
projections against fp32's, the mean and lowest cosine between the two per matrix, and each pass's seconds.

A CPU's bf16 kernels differ by ISA (AVX512-BF16 or AMX; `ONEDNN_MAX_CPU_ISA` caps oneDNN's choice), so this tells
whether one machine kind trains on noisier gradients than another.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from algos.logprobs import log_probs_from_logits  # noqa: E402  the trainer's log-probs and their backward

PARAMETER_MARK = "proj"  # the attention and MLP projections, the matrices LoRA adapts


def gradient_error(reference: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> tuple[float, float, float]:
    """(relative L2 error over all matrices, mean cosine per matrix, lowest cosine) of `other` against `reference`."""
    if reference.keys() != other.keys():
        raise ValueError(f"gradients of different parameters: {sorted(reference.keys() ^ other.keys())}")
    squared_error = sum(float(((other[name] - grad) ** 2).sum()) for name, grad in reference.items())
    squared_norm = sum(float((grad**2).sum()) for grad in reference.values())
    cosines = [
        float(torch.nn.functional.cosine_similarity(other[name].flatten(), grad.flatten(), dim=0))
        for name, grad in reference.items()
    ]
    return (squared_error / squared_norm) ** 0.5, sum(cosines) / len(cosines), min(cosines)


def answer_batch(tokenizer, rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input ids, attention mask, answer-token mask), right-padded: each row's prompt then its answer."""
    sequences, answer_marks = [], []
    for row in rows:
        prompt = tokenizer(row["input"], add_special_tokens=False)["input_ids"]
        answer = tokenizer(row["output"], add_special_tokens=False)["input_ids"]
        sequences.append(prompt + answer)
        answer_marks.append([0] * len(prompt) + [1] * len(answer))
    width = max(map(len, sequences))
    pad = tokenizer.pad_token_id or 0
    ids = torch.tensor([seq + [pad] * (width - len(seq)) for seq in sequences])
    attention = torch.tensor([[1] * len(seq) + [0] * (width - len(seq)) for seq in sequences])
    answer_mask = torch.tensor([marks + [0] * (width - len(marks)) for marks in answer_marks], dtype=torch.float32)
    return ids, attention, answer_mask


def policy_gradient(model_dir: str, dtype: torch.dtype, batch, advantages: torch.Tensor):
    """(loss, {projection name: fp32 gradient}, seconds of the forward and backward) with the model in `dtype`."""
    from transformers import AutoModelForCausalLM

    ids, attention, answer_mask = batch
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    start = time.perf_counter()
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
    token_logprobs = log_probs_from_logits(logits, ids[:, 1:])
    loss = -(advantages[:, None] * token_logprobs * answer_mask[:, 1:]).sum() / len(ids)
    loss.backward()
    seconds = time.perf_counter() - start
    grads = {
        name: param.grad.float()
        for name, param in model.named_parameters()
        if PARAMETER_MARK in name and param.grad is not None
    }
    return float(loss.detach()), grads, seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a Hugging Face model folder")
    parser.add_argument("--data", required=True, help="a validation dump (JSONL rows with input and output)")
    parser.add_argument("--rows", type=int, default=32, help="answers in the batch, the first of the file")
    parser.add_argument("--seed", type=int, default=0, help="seeds the advantages")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    lines = Path(args.data).read_text().splitlines()[: args.rows]
    rows = [json.loads(line) for line in lines if line.strip()]
    if not rows:
        raise SystemExit(f"{args.data}: no rows")
    batch = answer_batch(AutoTokenizer.from_pretrained(args.model), rows)
    advantages = torch.randn(len(rows), generator=torch.Generator().manual_seed(args.seed))
    loss32, grads32, seconds32 = policy_gradient(args.model, torch.float32, batch, advantages)
    loss16, grads16, seconds16 = policy_gradient(args.model, torch.bfloat16, batch, advantages)
    relative, mean_cos, low_cos = gradient_error(grads32, grads16)
    print(f"{len(rows)} answers, {len(grads32)} projection matrices")
    print(f"loss: fp32 {loss32:.5f}, bf16 {loss16:.5f}")
    print(
        f"bf16 gradients against fp32: relative L2 error {relative:.4f}, "
        f"cosine mean {mean_cos:.4f}, lowest {low_cos:.4f}"
    )
    print(f"forward+backward: fp32 {seconds32:.1f} s, bf16 {seconds16:.1f} s")


if __name__ == "__main__":
    main()
