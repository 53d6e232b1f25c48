"""bench/checkpoint_average.py: the mean adapter update of a run's last checkpoints, merged into a model folder."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from checkpoint_average import main, parse_steps  # noqa: E402


def test_the_mean_of_the_chosen_steps_updates_is_added_to_the_base(tiny_model_dir, write_lora_run, tmp_path, capsys):
    from safetensors.torch import load_file

    run = tmp_path / "run"
    write_lora_run(run, steps=3)
    out = tmp_path / "avg"
    assert main([str(run), "--steps", "2-3", "--lora-alpha", str(write_lora_run.lora_alpha), "--output", str(out)]) == 0
    base, merged = load_file(str(tiny_model_dir / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert set(merged) == set(base)
    # steps 2 and 3 add 2 * 4 and 2 * 9 at [0, 0]: their mean is 13 (averaging A and B apart would give 2 * 2.5 *
    # 2.5 = 12.5); nothing else moves
    for name in base:
        expected = base[name].clone()
        if name.endswith("q_proj.weight"):
            expected[0, 0] += 13.0
        assert (merged[name] - expected).abs().max().item() < 1e-6, name
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    assert "steps 2-3 (2 checkpoints)" in capsys.readouterr().out


def test_a_wrong_lora_alpha_is_caught_against_the_runs_export(write_lora_run, tmp_path):
    run = tmp_path / "run"
    write_lora_run(run, steps=2)
    with pytest.raises(SystemExit, match="lora-alpha 8 is not the run's hf_model .*lora_alpha"):
        main([str(run), "--steps", "1-2", "--lora-alpha", "8", "--output", str(tmp_path / "avg")])


def test_a_step_without_a_checkpoint_is_named(write_lora_run, tmp_path):
    run = tmp_path / "run"
    write_lora_run(run, steps=2)
    with pytest.raises(SystemExit, match=r"no checkpoint of step 3 \(has \[1, 2\]\)"):
        main(
            [
                str(run),
                "--steps",
                "2-3",
                "--lora-alpha",
                str(write_lora_run.lora_alpha),
                "--output",
                str(tmp_path / "avg"),
            ]
        )


def test_steps_are_a_range_or_one_step():
    assert parse_steps("16-20") == (16, 20)
    assert parse_steps("7") == (7, 7)
    for bad in ("20-16", "0-3", "x"):
        with pytest.raises(SystemExit, match="--steps"):
            parse_steps(bad)
