"""bench/replay_buffer.py: answers and distinct prompts in a checkpoint's self-imitation replay buffer."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from replay_buffer import checkpoint_dir, main, prompt_counts  # noqa: E402

from app.batch import TensorBatch  # noqa: E402
from app.trainer.checkpoints import STATE_FILE  # noqa: E402
from app.trainer.self_imitation import ROW_KEYS, ReplayBuffer  # noqa: E402


def saved_buffer() -> dict:
    """`ReplayBuffer.state_dict()` after three right answers to prompt [11, 12] and one to [12, 11] (the same tokens
    in another order: another prompt)."""
    buffer = ReplayBuffer(capacity=8, min_score=1.0)
    for prompt, response in (([11, 12], [31]), ([11, 12], [32, 33]), ([12, 11], [34]), ([11, 12], [35])):
        ids = torch.tensor([prompt + response])
        ones = torch.ones_like(ids)
        row = {"input_ids": ids, "attention_mask": ones, "position_ids": ones.cumsum(1) - 1}
        row |= {"responses": torch.tensor([response]), "response_mask": torch.ones(1, len(response))}
        buffer.rows.append(TensorBatch({key: row[key] for key in ROW_KEYS}))
    return buffer.state_dict()


def test_answers_are_counted_per_distinct_prompt_most_first():
    assert prompt_counts(saved_buffer()) == [3, 1]


def test_a_run_folder_reads_its_latest_checkpoint(tmp_path, capsys):
    for step in (2, 10, 11):  # 10 sorts after 2 as a number, before it as text
        (tmp_path / f"global_step_{step}").mkdir()
        torch.save(saved_buffer(), tmp_path / f"global_step_{step}" / "self_imitation_rank0.pt")
        if step != 11:  # 11 is incomplete: no trainer state
            (tmp_path / f"global_step_{step}" / STATE_FILE).write_text("{}")
    assert checkpoint_dir(tmp_path) == tmp_path / "global_step_10"
    main([str(tmp_path)])
    out = capsys.readouterr().out
    file = tmp_path / "global_step_10" / "self_imitation_rank0.pt"
    assert out.strip() == f"{file}: 4 answers, 2 prompts, answers per prompt [3, 1]"


def test_a_folder_without_a_buffer_is_refused_naming_it(tmp_path):
    with pytest.raises(SystemExit, match=f"{tmp_path}: neither a checkpoint"):
        checkpoint_dir(tmp_path)
    (tmp_path / "global_step_3").mkdir()
    (tmp_path / "global_step_3" / STATE_FILE).write_text("{}")
    with pytest.raises(SystemExit, match="global_step_3: no self_imitation_rank"):
        checkpoint_dir(tmp_path)


def test_show_prints_each_answer_with_the_end_of_its_prompt(tiny_model_dir, tmp_path, capsys):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt, answer = tokenizer.encode("What is 2 + 2?"), tokenizer.encode("2 + 2 = 4")
    ids = torch.tensor([prompt + answer])
    ones = torch.ones_like(ids)
    row = {"input_ids": ids, "attention_mask": ones, "position_ids": ones.cumsum(1) - 1}
    row |= {"responses": torch.tensor([answer]), "response_mask": torch.ones(1, len(answer))}
    buffer = ReplayBuffer(capacity=8, min_score=1.0)
    buffer.rows.append(TensorBatch({key: row[key] for key in ROW_KEYS}))
    torch.save(buffer.state_dict(), tmp_path / "self_imitation_rank0.pt")
    main([str(tmp_path), "--show", "--tokenizer", str(tiny_model_dir)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(": 1 answers, 1 prompts, answers per prompt [1]")
    assert lines[1] == "  ...'What is 2 + 2?' -> '2 + 2 = 4'"
