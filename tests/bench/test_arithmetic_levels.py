"""bench/arithmetic_levels.py: greedy answers of a model on the arithmetic task, scored per difficulty level."""

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from arithmetic_levels import Problem, generate_batch, level_table, load_problems, main  # noqa: E402


def problem(ground_truth: str, level: int) -> Problem:
    return Problem([{"role": "user", "content": "?"}], ground_truth, level)


def test_the_table_scores_each_level_and_all_problems():
    problems = [problem("3", 1), problem("5", 1), problem("12", 2), problem("4", 2)]
    answers = [
        "2 + 1 = 3\n#### 3\n#### 3.0",  # right, marked twice with one number
        "4 + 1 = 5",  # right, unmarked: acc without strict
        "#### 11",  # marked, wrong: formatted only
        "3 + 1 = 4\n#### 4\n#### 3",  # a right mark, then another number: graded wrong, marks differ
    ]
    lines = level_table(problems, answers).splitlines()
    assert lines[0] == "| level | problems | reward | acc | strict | formatted | marks differ |"
    assert lines[2:] == [
        "| level 1 | 2 | 0.750 | 1.00 | 0.50 | 0.50 | 0.00 |",  # rewards 1 and 0.5
        "| level 2 | 2 | 0.100 | 0.00 | 0.00 | 1.00 | 0.50 |",  # the format's 0.1 twice
        "| all | 4 | 0.425 | 0.50 | 0.25 | 0.75 | 0.25 |",  # 1.7 / 4; 2, 1, 3 and 1 of 4
    ]


def test_answers_must_match_problems_one_to_one():
    with pytest.raises(ValueError, match="1 answers for 2 problems"):
        level_table([problem("1", 1), problem("2", 1)], ["1"])


def test_a_model_folder_is_answered_greedily_and_counted_by_the_levels_of_the_data(tiny_model_dir, tmp_path, capsys):
    from app.prepare import prepare_arithmetic

    prepare_arithmetic(str(tmp_path), train_size=4, test_size=12, seed=3)
    data = tmp_path / "test.parquet"
    dump = tmp_path / "answers.jsonl"
    main([str(tiny_model_dir), "--data", str(data), "--max-samples", "10", "--max-tokens", "3", "--answers", str(dump)])
    out = capsys.readouterr().out
    frame = pd.read_parquet(data)
    rows = [json.loads(line) for line in dump.read_text().splitlines()]
    assert all(set(r) == {"model", "level", "ground_truth", "answer"} and isinstance(r["answer"], str) for r in rows)
    # one line per problem, in the data's order, with the model, its level and ground truth
    assert [(r["model"], r["level"], r["ground_truth"]) for r in rows] == [
        (str(tiny_model_dir), int(info["level"]), str(truth["ground_truth"]))
        for info, truth in zip(frame.extra_info[:10], frame.reward_model[:10])
    ]
    levels = pd.Series([row["level"] for row in frame.extra_info[:10]]).value_counts()
    counted = {
        cells[0]: int(cells[1])
        for cells in (line.strip("| ").split(" | ") for line in out.splitlines())
        if cells[0].startswith("level ")
    }
    assert counted == {f"level {level}": count for level, count in levels.items()}
    [all_row] = [line for line in out.splitlines() if line.startswith("| all |")]
    # ten problems; a random tiny model writes no "#### N" line in 3 tokens
    assert all_row.startswith("| all | 10 | 0.") and all_row.endswith("| 0.00 | 0.00 |")


def test_prompts_of_another_task_are_refused_naming_the_file(tmp_path):
    import pandas as pd

    path = tmp_path / "gsm8k.parquet"
    row = {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "?"}]}
    pd.DataFrame([row | {"reward_model": {"ground_truth": "1"}, "extra_info": {"level": 1}}]).to_parquet(path)
    with pytest.raises(SystemExit, match=f"{path}: data_source 'openai/gsm8k'"):
        load_problems(str(path))


def test_a_left_padded_batch_answers_as_each_prompt_alone_and_stops_after_the_end_token(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    prompts = [[5, 17, 230, 41, 9], [301, 12, 7], [1, 2, 3, 4]]  # unequal lengths: two rows are padded
    pad, unused = 0, 3  # token 3 ends nothing below: the tiny model never writes it after these prompts

    def greedy(eos: int) -> GenerationConfig:
        return GenerationConfig(max_new_tokens=6, do_sample=False, eos_token_id=eos, pad_token_id=pad)

    alone = [generate_batch(model, [p], greedy(unused), pad, unused)[0] for p in prompts]
    assert all(len(a) == 6 and unused not in a for a in alone)  # no end token: the whole budget
    assert generate_batch(model, prompts, greedy(unused), pad, unused) == alone
    # a token the second prompt's answer first writes after its first token, taken as the end token: that answer
    # ends there, with the token; the others are cut at their own first one, if any
    eos = next(token for token in alone[1][1:] if token != alone[1][0])
    cut = [a[: a.index(eos) + 1] if eos in a else a for a in alone]
    assert 1 < len(cut[1]) < 6
    assert generate_batch(model, prompts, greedy(eos), pad, eos) == cut
