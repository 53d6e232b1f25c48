"""`python -m app.prepare`: GSM8K conversion (checked item by item against its gold answers) and the arithmetic task."""

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from support import prompt_options

from algos.rewards import default_compute_score
from app.data import DataError, PromptDataLoader, load_prompt_dataset, pad_token_id_of
from app.data.gsm8k_task import gsm8k_final_answer
from app.prepare import main, prepare_gsm8k


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="module")
def gsm8k_parquet(gsm8k_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("gsm8k")
    assert main(["gsm8k", "--input", str(gsm8k_dir), "--output", str(out)]) == 0
    return out


def test_gsm8k_schema(gsm8k_parquet, gsm8k_dir):
    table = pq.read_table(gsm8k_parquet / "test.parquet")
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    first = json.loads((gsm8k_dir / "test.jsonl").read_text().splitlines()[0])
    row = table.slice(0, 1).to_pylist()[0]
    assert row["data_source"] == "openai/gsm8k"
    assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"].startswith(first["question"])
    assert "#### <answer>" in row["prompt"][0]["content"]
    assert row["reward_model"]["ground_truth"] == first["answer"].split("####")[-1].strip().replace(",", "")
    assert row["extra_info"] == {
        "split": "test",
        "index": 0,
        "answer": first["answer"],
        "question": first["question"],
        # for multi-turn runs with an interaction (the built-in gsm8k one reads ground_truth)
        "interaction_kwargs": {"query": first["question"], "ground_truth": row["reward_model"]["ground_truth"]},
        # and with verl's GSM8K tool, which checks submitted answers against it
        "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": row["reward_model"]["ground_truth"]}}},
    }
    assert pq.read_table(gsm8k_parquet / "train.parquet").num_rows == 7473


def test_every_gsm8k_test_item_through_loader_and_reward(gsm8k_parquet, tokenizer):
    """All 1,319 test items: the gold solution text scores 1.0, the same text with a wrong final number scores 0."""
    ds = load_prompt_dataset(str(gsm8k_parquet / "test.parquet"), tokenizer, prompt_options())
    assert len(ds) == 1319 and ds.num_filtered == 0
    loader = PromptDataLoader(ds, batch_size=1319, pad_token_id=pad_token_id_of(tokenizer), shuffle=False)
    batch = loader.next_batch()
    assert batch.index == list(range(1319))
    for source, truth, info in zip(batch.data_source, batch.ground_truth, batch.extra_info):
        gold = info["answer"]  # the dataset's own worked solution, ending in "#### N"
        assert default_compute_score(source, gold, truth) == 1.0, (info["index"], gold[-40:], truth)
        wrong = gold.rpartition("####")[0] + f"#### {int(truth) + 1}"
        assert default_compute_score(source, wrong, truth) == 0.0, info["index"]


def test_gsm8k_answers_with_commas():
    assert gsm8k_final_answer("so 1,000 + 450,000 = 451,000\n#### 451,000") == "451000"
    with pytest.raises(DataError, match="file.jsonl line 3"):
        gsm8k_final_answer("no final answer", "file.jsonl line 3")


def test_gsm8k_instruction_follows_the_question_or_is_left_out(tmp_path):
    """`--instruction` sets the line after each question; '' leaves the bare question (no trailing newline)."""
    question = "Tom has 3 apples and buys 2. How many now?"
    for split in ("train", "test"):
        (tmp_path / f"{split}.jsonl").write_text(json.dumps({"question": f"  {question}\n", "answer": "3+2=5\n#### 5"}))
    for name, instruction, content in (
        ("bare", "", question),
        ("custom", 'Answer after "####".', f'{question}\nAnswer after "####".'),
    ):
        assert (
            main(["gsm8k", "--input", str(tmp_path), "--output", str(tmp_path / name), "--instruction", instruction])
            == 0
        )
        for split in ("train", "test"):
            row = pq.read_table(tmp_path / name / f"{split}.parquet").to_pylist()[0]
            assert row["prompt"] == [{"role": "user", "content": content}], (name, split)


def test_gsm8k_bad_test_file_writes_no_train_parquet(tmp_path):
    """Both files are checked before either parquet is written: nothing half-converted is left behind."""
    (tmp_path / "train.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    (tmp_path / "test.jsonl").write_text('{"question": "q", "answer": "no final number"}\n')
    with pytest.raises(DataError, match=r"test.jsonl line 1"):
        prepare_gsm8k(str(tmp_path), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_gsm8k_missing_input(tmp_path):
    with pytest.raises(DataError, match="train.jsonl"):
        prepare_gsm8k(str(tmp_path), str(tmp_path / "out"))


def test_gsm8k_bad_line_named(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n{"question": "q"}\n')
    with pytest.raises(DataError, match=r"train.jsonl line 2: missing answer"):
        prepare_gsm8k(str(tmp_path), str(tmp_path / "out"))


def test_arithmetic_cli_is_deterministic(tmp_path):
    for name in ("a", "b"):
        assert (
            main(
                [
                    "arithmetic",
                    "--output",
                    str(tmp_path / name),
                    "--train-size",
                    "40",
                    "--test-size",
                    "10",
                    "--seed",
                    "3",
                ]
            )
            == 0
        )
    for split, n in (("train", 40), ("test", 10)):
        a = pq.read_table(tmp_path / "a" / f"{split}.parquet")
        assert a.num_rows == n
        assert a.equals(pq.read_table(tmp_path / "b" / f"{split}.parquet"))
    assert set(a.column("data_source").to_pylist()) == {"arithmetic"}


def test_arithmetic_level_weights_option(tmp_path):
    assert (
        main(
            [
                "arithmetic",
                "--output",
                str(tmp_path / "hard"),
                "--train-size",
                "20",
                "--test-size",
                "5",
                "--level-weights",
                "0,0,1,1",
            ]
        )
        == 0
    )
    infos = pq.read_table(tmp_path / "hard" / "train.parquet").column("extra_info").to_pylist()
    levels = {info["level"] for info in infos}
    assert levels == {3, 4}
    assert main(["arithmetic", "--output", str(tmp_path / "bad"), "--level-weights", "1,1,1"]) == 2  # named error
    assert not (tmp_path / "bad").exists()  # nothing written


def test_arithmetic_train_level_weights_option(tmp_path, capsys):
    args = ["arithmetic", "--train-size", "30", "--test-size", "40"]
    assert main([*args, "--output", str(tmp_path / "easy"), "--train-level-weights", "0.45,0.3,0,0"]) == 0
    train = pq.read_table(tmp_path / "easy" / "train.parquet").column("extra_info").to_pylist()
    assert {info["level"] for info in train} == {1, 2}
    assert main([*args, "--output", str(tmp_path / "all")]) == 0
    assert pq.read_table(tmp_path / "easy" / "test.parquet").equals(pq.read_table(tmp_path / "all" / "test.parquet"))
    assert main([*args, "--output", str(tmp_path / "bad"), "--train-level-weights", "1,1,1"]) == 2
    assert capsys.readouterr().err.startswith("error: --train-level-weights: train_level_weights needs 4 entries")
    assert not (tmp_path / "bad").exists()  # nothing written


def test_cli_entry_point_reports_errors(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "app.prepare", "gsm8k", "--input", str(tmp_path), "--output", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "GSM8K file not found" in done.stderr and "train.jsonl" in done.stderr


def test_an_output_that_cannot_be_written_ends_with_one_line(tmp_path, capfd):
    blocker = tmp_path / "taken"
    blocker.write_text("a file where the output folder should go")
    assert main(["arithmetic", "--output", str(blocker), "--train-size", "4", "--test-size", "2"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --output {blocker}: cannot write there (")


def test_a_bad_option_value_ends_with_one_line(capfd):
    with pytest.raises(SystemExit) as done:
        main(["arithmetic", "--output", "x", "--train-size", "many"])
    assert done.value.code == 2
    assert capfd.readouterr().err.strip().splitlines() == [
        "error: python -m app.prepare arithmetic: argument --train-size: invalid int value: 'many' "
        "(--help lists the options)"
    ]
