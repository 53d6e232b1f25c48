"""bench/lora_fold_error.py: what folding an adapter's update into bf16 weights keeps of it, and the unfolded policy."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from checkpoint_average import apply_updates  # noqa: E402
from lora_fold_error import add_unfolded_updates, fold_error, main, set_weights  # noqa: E402


def test_the_fold_loses_an_update_under_half_a_bf16_step_and_rounds_a_larger_one():
    # bf16 keeps 8 significant bits: next to 1.0 a weight moves in steps of 2**-7 = 0.0078125.
    base = {"w": torch.tensor([[1.0, 1.0]], dtype=torch.bfloat16)}
    update = {"w": torch.tensor([[0.001, 0.01]])}
    changed, error = fold_error(base, apply_updates(base, update), update)
    # 1.001 rounds back to 1.0 (update lost); 1.01 rounds to 1.0078125 (folded update 0.0078125, off by 0.0021875)
    assert changed == 0.5
    expected = ((0.001**2 + 0.0021875**2) / (0.001**2 + 0.01**2)) ** 0.5
    assert error == pytest.approx(expected, rel=1e-5)


def test_an_update_folded_into_float32_weights_is_kept():
    base = {"w": torch.tensor([[1.0, -2.0]])}
    update = {"w": torch.tensor([[0.001, 0.01]])}
    changed, error = fold_error(base, apply_updates(base, update), update)
    assert changed == 1.0
    assert error < 1e-4  # float32's own rounding of 1.001 and -1.99, some 1e-7 against updates of 1e-3


def test_the_unfolded_updates_give_the_layer_of_the_summed_weights():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3, bias=True))
    update = 0.1 * torch.randn(3, 4)
    summed = torch.nn.Linear(4, 3, bias=True)
    summed.load_state_dict({"weight": model[0].weight + update, "bias": model[0].bias})
    x = torch.randn(5, 4)
    handles = add_unfolded_updates(model, {"0.weight": update})
    torch.testing.assert_close(model(x), summed(x))
    for handle in handles:
        handle.remove()
    assert not torch.allclose(model(x), summed(x))  # removed: the plain layer again


def test_a_weight_the_model_lacks_is_named():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with pytest.raises(SystemExit, match="no layer for the adapted weight 1.weight"):
        add_unfolded_updates(model, {"1.weight": torch.zeros(2, 2)})
    with pytest.raises(SystemExit, match="no weight 1.weight"):
        set_weights(model, {"1.weight": torch.zeros(2, 2)})


def test_set_weights_copies_into_the_models_own_tensors():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2, bias=False))
    set_weights(model, {"0.weight": torch.eye(2)})
    torch.testing.assert_close(model[0].weight.detach(), torch.eye(2))


def test_a_float32_run_keeps_its_update_and_both_policies_answer_alike(
    write_lora_run, small_arith_data, tmp_path, capsys
):
    run = tmp_path / "run"
    write_lora_run(run, steps=2)  # the tiny model is float32: its fold loses nothing
    data = ["--data", str(small_arith_data / "test.parquet"), "--max-tokens", "4"]
    assert main([str(run), "--lora-alpha", str(write_lora_run.lora_alpha), *data]) == 0
    out = capsys.readouterr().out
    assert "step 2: the fold to float32 changes" in out
    assert "the folded update differs from the adapter's by 0%" in out
    assert "greedy answers that differ: 0 of 2" in out


def test_a_wrong_lora_alpha_is_caught_against_the_runs_export(write_lora_run, small_arith_data, tmp_path):
    run = tmp_path / "run"
    write_lora_run(run, steps=1)
    with pytest.raises(SystemExit, match="lora-alpha 8 is not the run's hf_model"):
        main([str(run), "--lora-alpha", "8", "--data", str(small_arith_data / "test.parquet")])
