"""Every kind of bad input stops loading with a DataError that says which file, row or column is wrong."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import prompt_options

from app.data import DataError, load_prompt_dataset


def test_data_error_is_a_value_error():
    assert issubclass(DataError, ValueError)


def test_missing_file_is_named(data_files, smollm2_tokenizer):
    good = data_files.parquet("good.parquet", data_files.verl_rows(2))
    missing = str(data_files.root / "nope.parquet")
    with pytest.raises(DataError, match="not found") as err:
        load_prompt_dataset([good, missing], smollm2_tokenizer, prompt_options())
    assert missing in str(err.value)


def test_unreadable_parquet_is_named(tmp_path, smollm2_tokenizer):
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"this is not parquet")
    with pytest.raises(DataError, match="cannot read parquet") as err:
        load_prompt_dataset(str(bad), smollm2_tokenizer, prompt_options())
    assert str(bad) in str(err.value)


def test_missing_column_lists_columns_present(data_files, smollm2_tokenizer):
    rows = [{"question": "hi", "data_source": "x", "reward_model": {"ground_truth": "1"}}]
    path = data_files.parquet("q.parquet", rows)
    with pytest.raises(DataError) as err:
        load_prompt_dataset(path, smollm2_tokenizer, prompt_options())
    message = str(err.value)
    assert path in message and "'prompt'" in message and "data.prompt_key" in message
    assert "question, data_source, reward_model" in message


def test_missing_data_source_column_can_fall_back_to_a_default(data_files, smollm2_tokenizer):
    rows = [{"prompt": "hi", "reward_model": {"ground_truth": "1"}}]
    path = data_files.parquet("nods.parquet", rows)
    with pytest.raises(DataError, match="'data_source'"):
        load_prompt_dataset(path, smollm2_tokenizer, prompt_options())
    ds = load_prompt_dataset(path, smollm2_tokenizer, prompt_options(default_data_source="arithmetic"))
    assert ds[0].data_source == "arithmetic"


def test_missing_nested_ground_truth_names_the_row(data_files, smollm2_tokenizer):
    rows = data_files.verl_rows(3)
    rows[2]["reward_model"] = {"style": "rule"}
    path = data_files.jsonl("nogt.jsonl", rows)
    with pytest.raises(DataError) as err:
        load_prompt_dataset(path, smollm2_tokenizer, prompt_options())
    message = str(err.value)
    assert f"{path} line 3" in message and "reward_model.ground_truth" in message and "'ground_truth'" in message


def test_empty_dataset(data_files, smollm2_tokenizer):
    empty_jsonl = data_files.root / "empty.jsonl"
    empty_jsonl.write_text("\n\n")
    empty_parquet = data_files.root / "empty.parquet"
    pq.write_table(pa.Table.from_pylist(data_files.verl_rows(1)).slice(0, 0), empty_parquet)
    with pytest.raises(DataError, match="empty") as err:
        load_prompt_dataset([str(empty_jsonl), str(empty_parquet)], smollm2_tokenizer, prompt_options())
    assert str(empty_jsonl) in str(err.value) and str(empty_parquet) in str(err.value)


def test_empty_file_list():
    with pytest.raises(DataError, match="no data files"):
        load_prompt_dataset([], tokenizer=None, options=prompt_options())


def test_malformed_jsonl_names_file_and_line(tmp_path, smollm2_tokenizer):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "a", "data_source": "x"}\n\n{"prompt": "b", \n')
    with pytest.raises(DataError, match="malformed JSON") as err:
        load_prompt_dataset(str(path), smollm2_tokenizer, prompt_options())
    assert f"{path} line 3" in str(err.value)  # the blank line 2 still counts


def test_jsonl_line_that_is_not_an_object(tmp_path, smollm2_tokenizer):
    path = tmp_path / "list.jsonl"
    path.write_text('{"prompt": "a"}\n[1, 2]\n')
    with pytest.raises(DataError, match="line 2: expected a JSON object"):
        load_prompt_dataset(str(path), smollm2_tokenizer, prompt_options())


@pytest.mark.parametrize(
    "bad_prompt, why",
    [
        (42, "int"),
        ({"role": "user", "content": "hi"}, "dict"),
        ([], "non-empty list"),
        ([{"role": "user"}], "message 0"),
        ([{"role": "user", "content": "a"}, "just text"], "message 1"),
    ],
)
def test_prompt_that_is_neither_text_nor_messages(data_files, smollm2_tokenizer, bad_prompt, why):
    rows = data_files.verl_rows(3)
    rows[1]["prompt"] = bad_prompt
    path = data_files.jsonl("prompts.jsonl", rows)
    with pytest.raises(DataError) as err:
        load_prompt_dataset(path, smollm2_tokenizer, prompt_options())
    message = str(err.value)
    assert f"{path} line 2" in message and "'prompt'" in message and why in message


def test_prompt_error_in_parquet_names_the_row(data_files, smollm2_tokenizer):
    rows = [{"data_source": "x", "prompt": p, "reward_model": {"ground_truth": "1"}} for p in ("ok", "ok", None)]
    path = data_files.parquet("p.parquet", rows)
    with pytest.raises(DataError, match=r"p\.parquet row 2: 'prompt' must be text"):
        load_prompt_dataset(path, smollm2_tokenizer, prompt_options())


def test_unsupported_file_type(tmp_path, smollm2_tokenizer):
    path = tmp_path / "data.csv"
    path.write_text("prompt\nhi\n")
    with pytest.raises(DataError, match="unsupported data file .*data.csv"):
        load_prompt_dataset(str(path), smollm2_tokenizer, prompt_options())


def test_folder_that_is_not_a_saved_dataset(tmp_path, smollm2_tokenizer):
    with pytest.raises(DataError, match="save_to_disk"):
        load_prompt_dataset(str(tmp_path), smollm2_tokenizer, prompt_options())


def test_overlong_prompt_with_truncation_error_names_row_and_length(data_files, smollm2_tokenizer):
    rows = data_files.verl_rows(3)
    rows[1]["prompt"] = [{"role": "user", "content": "word " * 300}]
    path = data_files.jsonl("long.jsonl", rows)
    with pytest.raises(DataError) as err:
        load_prompt_dataset(path, smollm2_tokenizer, prompt_options(max_prompt_length=64))
    text = smollm2_tokenizer.apply_chat_template(rows[1]["prompt"], add_generation_prompt=True, tokenize=False)
    n_tokens = len(smollm2_tokenizer(text, add_special_tokens=False)["input_ids"])
    message = str(err.value)
    assert f"{path} line 2: prompt is {n_tokens} tokens" in message and "max_prompt_length=64" in message


def test_all_prompts_filtered_is_an_error(data_files, smollm2_tokenizer):
    path = data_files.jsonl("short.jsonl", data_files.verl_rows(2))
    options = prompt_options(max_prompt_length=5, filter_overlong_prompts=True)
    with pytest.raises(DataError, match="all 2 prompts"):
        load_prompt_dataset(path, smollm2_tokenizer, options)


@pytest.mark.parametrize(
    "bad, named",
    [
        ({"truncation": "both"}, "data.truncation"),
        ({"max_prompt_length": 0}, "data.max_prompt_length"),
        ({"prompt_key": ""}, "data.prompt_key"),
    ],
)
def test_bad_options(bad, named):
    with pytest.raises(DataError, match=named):
        prompt_options(**bad)


def test_tokenizer_without_chat_template(data_files, smollm2_tokenizer):
    import copy

    plain = copy.deepcopy(smollm2_tokenizer)
    plain.chat_template = None
    path = data_files.jsonl("ok.jsonl", data_files.verl_rows(1))
    with pytest.raises(DataError, match="no chat template"):
        load_prompt_dataset(path, plain, prompt_options())
