"""bench/bf16_gradient_error.py: the bf16 policy gradient against the fp32 one, on a validation dump's answers."""

import json
import re
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bf16_gradient_error import answer_batch, gradient_error, main, policy_gradient  # noqa: E402

ROWS = [
    {"input": "user\nWhat is 2 + 3?\nassistant\n", "output": "2 + 3 = 5\n#### 5"},
    {"input": "user\nWhat is 10 - 4?\nassistant\n", "output": "#### 6"},
    {"input": "user\nSam has 3 bags of 4 apples. How many apples?\nassistant\n", "output": "3 x 4 = 12 apples."},
]


def test_the_error_is_relative_to_the_whole_reference_and_the_cosines_are_per_matrix():
    # reference norm sqrt(3^2 + 4^2) = 5; other differs only in b, by (0, -8): error 8 / 5. Cosines: a 1, b -1.
    reference = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([0.0, 4.0])}
    other = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([0.0, -4.0])}
    relative, mean_cos, low_cos = gradient_error(reference, other)
    assert relative == pytest.approx(1.6)
    assert (mean_cos, low_cos) == pytest.approx((0.0, -1.0))


def test_gradients_of_different_parameters_are_refused():
    with pytest.raises(ValueError, match=r"\['b', 'c'\]"):
        gradient_error({"a": torch.ones(1), "b": torch.ones(1)}, {"a": torch.ones(1), "c": torch.ones(1)})


def test_the_answer_mask_marks_each_answers_tokens_and_nothing_else(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids, attention, answer_mask = answer_batch(tokenizer, ROWS)
    for row, (ids_row, attention_row, mask_row) in enumerate(zip(ids, attention, answer_mask)):
        prompt = tokenizer(ROWS[row]["input"], add_special_tokens=False)["input_ids"]
        answer = tokenizer(ROWS[row]["output"], add_special_tokens=False)["input_ids"]
        length = len(prompt) + len(answer)
        assert ids_row[:length].tolist() == prompt + answer
        assert attention_row.tolist() == [1] * length + [0] * (ids.shape[1] - length)
        assert mask_row.nonzero().flatten().tolist() == list(range(len(prompt), length))


def test_the_same_dtype_twice_gives_the_same_gradient(tiny_model_dir):
    from transformers import AutoTokenizer

    batch = answer_batch(AutoTokenizer.from_pretrained(tiny_model_dir), ROWS)
    advantages = torch.tensor([1.0, -0.5, 0.25])
    loss_a, grads_a, _ = policy_gradient(str(tiny_model_dir), torch.float32, batch, advantages)
    loss_b, grads_b, _ = policy_gradient(str(tiny_model_dir), torch.float32, batch, advantages)
    assert loss_a == loss_b
    assert len(grads_a) == 2 * 7  # two layers of q, k, v, o, gate, up, down projections
    relative, mean_cos, low_cos = gradient_error(grads_a, grads_b)
    assert relative == 0.0
    assert (mean_cos, low_cos) == pytest.approx((1.0, 1.0), abs=1e-6)  # a float32 cosine of a vector with itself


def test_main_prints_a_small_nonzero_bf16_error(tiny_model_dir, tmp_path, capsys):
    dump = tmp_path / "0-rank0.jsonl"
    dump.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    main(["--model", str(tiny_model_dir), "--data", str(dump), "--rows", "2"])
    out = capsys.readouterr().out
    assert "2 answers, 14 projection matrices" in out
    relative, mean_cos = map(float, re.search(r"error ([\d.]+), cosine mean ([\d.]+)", out).groups())
    # bf16 keeps 8 bits of mantissa: its rounding moves a gradient by a few percent, not by nothing nor by all of it
    assert 0.0 < relative < 0.2
    assert mean_cos > 0.98
