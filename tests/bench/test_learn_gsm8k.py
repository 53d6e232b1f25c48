"""bench/learn_gsm8k.py trains on the GSM8K problems with few calculations; the evaluation items are never filtered."""

import json
from pathlib import Path

import pytest
from support import load_bench_script


def load_bench():
    return load_bench_script("learn_gsm8k")


def line(question: str, answer: str) -> str:
    return json.dumps({"question": question, "answer": answer})


def test_easy_problems_keeps_solutions_with_at_most_k_calculations_in_file_order():
    bench = load_bench()
    zero = line("How many legs has a cat?", "A cat has 4 legs.\n#### 4")
    two = line("q2", "She sold 48/2 = <<48/2=24>>24 in May and 48+24 = <<48+24=72>>72 in all.\n#### 72")
    three = line("q3", "<<2*3=6>>6, then <<6+1=7>>7, then <<7*2=14>>14\n#### 14")
    one = line("q1", "He earns 12/60 = <<12/60=0.2>>0.2 a minute.\n#### 10")
    lines = [three, zero, two, one]
    assert bench.easy_problems(lines, 2) == [zero, two, one]  # the three-calculation problem is the one dropped
    assert bench.easy_problems(lines, 0) == [zero]
    assert bench.easy_problems(lines, 3) == lines


def write_gsm8k(folder: Path, train: list[str], test: list[str]) -> Path:
    folder.mkdir()
    (folder / "train.jsonl").write_text("\n".join(train) + "\n\n")  # a blank last line, as files often end
    (folder / "test.jsonl").write_text("\n".join(test) + "\n")
    return folder


def test_heldout_items_are_the_last_training_lines_and_never_trained_on(tmp_path):
    bench = load_bench()
    train = [line(f"t{i}", f"<<1+{i}={1 + i}>>{1 + i}\n#### {1 + i}") for i in range(5)]
    hard = line("hard", "<<1+1=2>>2 <<2+1=3>>3 <<3+1=4>>4\n#### 4")
    gsm8k = write_gsm8k(tmp_path / "gsm8k", [hard, *train], [line("test", "#### 1")])
    source = tmp_path / "source"
    assert bench.write_gsm8k_source(gsm8k, source, "heldout", 2, max_calc_steps=1) == (3, 4)
    assert (source / "test.jsonl").read_text().splitlines() == train[3:]
    assert (source / "train.jsonl").read_text().splitlines() == train[:3]  # `hard` filtered, the held-out 2 left out


def test_test_items_are_copied_whole_whatever_the_training_filter(tmp_path):
    bench = load_bench()
    hard_test = line("hard test", "<<1+1=2>>2 <<2+1=3>>3 <<3+1=4>>4\n#### 4")
    gsm8k = write_gsm8k(tmp_path / "gsm8k", [line("t", "#### 1")], [hard_test, line("easy test", "#### 2")])
    source = tmp_path / "source"
    assert bench.write_gsm8k_source(gsm8k, source, "test", 200, max_calc_steps=0) == (1, 1)
    assert (source / "test.jsonl").read_text().splitlines() == [hard_test, line("easy test", "#### 2")]
    assert (source / "train.jsonl").read_text().splitlines() == [line("t", "#### 1")]


def test_a_filter_that_keeps_no_training_problem_is_refused_naming_the_file(tmp_path):
    bench = load_bench()
    gsm8k = write_gsm8k(tmp_path / "gsm8k", [line("t", "<<1+1=2>>2\n#### 2")], [line("test", "#### 1")])
    with pytest.raises(
        ValueError, match=r"--max-calc-steps 0 leaves none of the 1 training problems of .*train\.jsonl"
    ):
        bench.write_gsm8k_source(gsm8k, tmp_path / "source", "test", 200, max_calc_steps=0)


def test_a_malformed_row_is_named_by_its_file_and_line_before_anything_is_written(tmp_path):
    bench = load_bench()
    gsm8k = write_gsm8k(tmp_path / "gsm8k", [line("t", "#### 1"), '{"question": "no answer"'], [line("x", "#### 1")])
    source = tmp_path / "source"
    with pytest.raises(ValueError, match=r"gsm8k/train\.jsonl line 2"):
        bench.write_gsm8k_source(gsm8k, source, "test", 200, max_calc_steps=2)
    assert not source.exists()
    gsm8k = write_gsm8k(tmp_path / "gsm8k_bad_test", [line("t", "#### 1")], ['{"question": "no answer"}'])
    with pytest.raises(ValueError, match=r"gsm8k_bad_test/test\.jsonl line 1: missing answer"):
        bench.write_gsm8k_source(gsm8k, source, "test", 200, max_calc_steps=None)
    assert not source.exists()


def test_the_training_settings_load_as_app_train_reads_them_and_the_user_overrides_win(tmp_path):
    """The overrides the bench hands `python -m app.train --config-name grpo_trainer` compose with Hydra and pass the
    schema's checks (a mistyped key in TRAINING would stop the run only after the base model's evaluation)."""
    from app.config import compose_run_config

    bench = load_bench()
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    train = [tmp_path / "train.parquet", tmp_path / "arithmetic.parquet"]
    args = bench.training_overrides(model, train, tmp_path / "run", 42, ["actor_rollout_ref.actor.kl_loss_coef=0.05"])
    cfg = compose_run_config("grpo_trainer", args)
    actor = cfg.actor_rollout_ref.actor
    assert actor.use_kl_loss and actor.kl_loss_type == "low_var_kl"
    assert actor.kl_loss_coef == 0.05  # the user's override, given last, beats TRAINING's 0.1
    assert [str(p) for p in cfg.data.train_files] == [str(p) for p in train]
    assert cfg.trainer.total_training_steps == 42 and cfg.trainer.default_local_dir == str(tmp_path / "run")
    assert Path(cfg.custom_reward_function.path).is_file()


def test_the_training_reward_pays_a_well_formed_wrong_answer_format_and_step_credit():
    reward = load_bench_script("gsm8k_train_reward")
    info = {
        "question": "Natalia sold clips to 48 friends in April, and half as many in May. How many in all?",
        "answer": "In May she sold 48/2 = <<48/2=24>>24 clips.\nIn all 48+24 = <<48+24=72>>72 clips.\n#### 72",
    }
    wrong = "In May she sold 48 / 2 = 24 clips.\nIn all 24 + 24 = 48 clips.\n#### 48"
    # well formed (work with a computed result, then a last `#### N` line): 0.2; of the reference's two results,
    # 24 and 72, it computes 24: 0.5 * 1/2
    assert reward.compute_score("openai/gsm8k", wrong, "72", info)["score"] == pytest.approx(0.2 + 0.25)
    assert (
        reward.compute_score(
            "openai/gsm8k", wrong.replace("24 + 24 = 48", "48 + 24 = 72").replace("#### 48", "#### 72"), "72", info
        )["score"]
        == 1.0
    )
    # arithmetic rows keep the built-in task's rule, which pays an unmarked right answer half
    assert reward.compute_score("arithmetic", "The answer is 7.", "7")["score"] == 0.5
