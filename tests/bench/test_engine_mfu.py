"""bench/engine_mfu.py: the GPU presets' shapes and settings, the FLOP counting by hand, and a tiny run on the CPU so
the benchmark cannot rot between GPU runs."""

from __future__ import annotations

import pytest
import torch
from support import load_bench_script

from app.batch import TensorBatch

mfu = load_bench_script("engine_mfu")


@pytest.mark.parametrize("shape,billions", [("0.5b", 0.49), ("1b", 1.24), ("3b", 3.09), ("7b", 7.62)])
def test_preset_shapes_have_the_issue_sizes(shape, billions):
    assert round(mfu.count_parameters(shape) / 1e9, 2) == billions


def test_workload_presets_set_their_defaults_and_flags_still_win():
    args = mfu.parse_args(["--preset", "7b-lora"])
    assert (args.lora_rank, args.grad_ckpt, args.batch, args.dtypes, args.remove_padding) == (64, "1", 64, "bf16", "1")
    assert (args.prompt_len, args.prompt_spread, args.response_min, args.response_len) == (256, 64, 128, 512)
    assert mfu.parse_args(["--preset", "3b"]).grad_ckpt == "1" and mfu.parse_args(["--preset", "3b"]).lora_rank == 0
    assert mfu.parse_args(["--preset", "0.5b"]).grad_ckpt == "0"
    assert mfu.parse_args(["--preset", "1b", "--micro-batch-sizes", "8"]).micro_batch_sizes == "8"


def _tiny_model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(mfu.model_config("tiny"))


def _batch(lengths, responses, prompt_width=6, response_width=4):
    ids = torch.full((len(lengths), prompt_width + response_width), 5)
    mask = torch.zeros_like(ids)
    for i, (n, r) in enumerate(zip(lengths, responses)):
        mask[i, prompt_width - (n - r) : prompt_width + r] = 1
    return TensorBatch(
        {
            "input_ids": ids,
            "attention_mask": mask,
            "responses": ids[:, prompt_width:],
            "response_mask": mask[:, prompt_width:],
        }
    )


def test_flops_by_hand():
    # tiny: hidden 64, intermediate 128, 4 heads of 16 (2 kv heads), 2 layers, vocab 1024 (tied head)
    per_layer = 64 * 64 + 64 * 32 + 64 * 32 + 64 * 64 + 3 * 64 * 128  # q k v o, gate up down: multiply-adds/token
    lengths, responses = [7, 4], [3, 2]  # real tokens per row, of which response tokens
    tokens, response_tokens = sum(lengths), sum(responses)
    linear = 2 * (2 * per_layer * tokens + 64 * 1024 * response_tokens)  # the head only where log-probs are taken
    attention = 2 * sum(n * n for n in lengths) * 64 * 2  # causal: 2 s^2 d per layer (QK^T and PV, half each)
    forward = linear + attention
    head = 2 * 64 * 1024 * response_tokens
    plain = mfu.useful_flops(_tiny_model(), mfu.model_config("tiny"), _batch(lengths, responses), grad_ckpt=False)
    assert plain["forward"] == forward
    # full fine-tuning: backward = input gradients (1x) + weight gradients (1x) of every linear, 2x attention
    assert plain["forward_backward"] == plain["hardware_forward_backward"] == 3 * forward
    ckpt = mfu.useful_flops(_tiny_model(), mfu.model_config("tiny"), _batch(lengths, responses), grad_ckpt=True)
    assert ckpt["forward_backward"] == 3 * forward  # MFU: recompute not counted
    assert ckpt["hardware_forward_backward"] == 3 * forward + forward - head  # HFU: the layers' forward again


def test_tiny_run_on_cpu_reports_mfu_and_hfu(tmp_path):
    results = mfu.main(
        [
            "--preset",
            "tiny",
            "--device",
            "cpu",
            "--dtypes",
            "fp32",
            "--remove-padding",
            "1",
            "--batch",
            "4",
            "--prompt-len",
            "8",
            "--prompt-spread",
            "2",
            "--response-len",
            "6",
            "--micro-batch-sizes",
            "2",
            "--grad-ckpt",
            "1",
            "--lora-rank",
            "0",
            "--steps",
            "1",
            "--peak-size",
            "256",
            "--forward-pass",
            "0",
            "--cache",
            str(tmp_path),
            "--json",
            str(tmp_path / "out.jsonl"),
        ]
    )
    [r] = results
    assert r["parameters"] == mfu.count_parameters("tiny")
    assert 0 < r["mfu"] < r["hfu"]  # checkpointing: the hardware did more than the model needs
    assert r["hfu"] / r["mfu"] == pytest.approx(r["hardware_forward_backward_gflops"] / r["forward_backward_gflops"])
    assert (tmp_path / "out.jsonl").read_text().count("\n") == 1
