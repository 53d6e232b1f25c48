"""Rows become templated, tokenized prompts with their reward fields."""

import dataclasses

import pytest
from support import prompt_options

from app.config.schema import DataConfig
from app.data import DataError, PromptDataOptions, load_prompt_dataset
from app.data.prompts import truncate_ids


def _expected_ids(tokenizer, messages):
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_verl_parquet_rows(data_files, smollm2_tokenizer):
    path = data_files.parquet("train.parquet", data_files.verl_rows(3))
    ds = load_prompt_dataset(path, smollm2_tokenizer, prompt_options())
    assert len(ds) == 3 and ds.num_filtered == 0
    record = ds[2]
    assert record.prompt_ids == _expected_ids(smollm2_tokenizer, [{"role": "user", "content": "What is 2 + 0?"}])
    # the generation prompt is included, so the model's reply starts right after the prompt
    assert smollm2_tokenizer.decode(record.prompt_ids).endswith("<|im_start|>assistant\n")
    assert (record.data_source, record.ground_truth, record.extra_info, record.ability) == (
        "openai/gsm8k",
        "2",
        {"index": 2},
        "math",
    )
    assert record.where == f"{path} row 2"


def test_several_files_keep_file_order(data_files, smollm2_tokenizer):
    a = data_files.parquet("a.parquet", data_files.verl_rows(2, data_source="a"))
    b = data_files.jsonl("b.jsonl", data_files.verl_rows(3, data_source="b"))
    ds = load_prompt_dataset([a, b], smollm2_tokenizer, prompt_options())
    assert [r.data_source for r in ds] == ["a", "a", "b", "b", "b"]
    assert ds.files == [a, b]


def test_string_prompt_and_system_prompt(data_files, smollm2_tokenizer):
    rows = [{"data_source": "x", "prompt": "Hello?", "reward_model": {"ground_truth": "1"}}]
    path = data_files.jsonl("s.jsonl", rows)
    options = prompt_options(system_prompt="Be brief.")
    record = load_prompt_dataset(path, smollm2_tokenizer, options)[0]
    expected = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello?"}]
    assert record.messages == expected
    assert record.prompt_ids == _expected_ids(smollm2_tokenizer, expected)


def test_system_prompt_keeps_a_rows_own(data_files, smollm2_tokenizer):
    own = [{"role": "system", "content": "own"}, {"role": "user", "content": "q"}]
    rows = [{"data_source": "x", "prompt": own, "reward_model": {"ground_truth": "1"}}]
    options = prompt_options(system_prompt="configured")
    record = load_prompt_dataset(data_files.jsonl("s.jsonl", rows), smollm2_tokenizer, options)[0]
    assert record.messages == own


def test_trl_style_columns(data_files, smollm2_tokenizer):
    rows = [{"problem": "What is 1+1?", "solution": r"It is $\boxed{2}$."}]
    path = data_files.jsonl("trl.jsonl", rows)
    options = prompt_options(prompt_key="problem", ground_truth_key="solution", default_data_source="math")
    record = load_prompt_dataset(path, smollm2_tokenizer, options)[0]
    assert record.messages == [{"role": "user", "content": "What is 1+1?"}]
    assert record.ground_truth == r"It is $\boxed{2}$." and record.data_source == "math" and record.extra_info == {}


def test_hf_save_to_disk_folder(tmp_path, smollm2_tokenizer, data_files):
    import datasets

    rows = data_files.verl_rows(4)
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "single"))
    ds = load_prompt_dataset(str(tmp_path / "single"), smollm2_tokenizer, prompt_options())
    assert [r.ground_truth for r in ds] == ["0", "1", "2", "3"]
    assert ds[1].where == f"{tmp_path / 'single'} row 1"

    two = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows)})
    two.save_to_disk(str(tmp_path / "two"))
    from app.data import DataError

    with pytest.raises(DataError, match="several splits \\(train, test\\)"):
        load_prompt_dataset(str(tmp_path / "two"), smollm2_tokenizer, prompt_options())
    assert len(load_prompt_dataset(str(tmp_path / "two" / "test"), smollm2_tokenizer, prompt_options())) == 4


def test_filter_overlong_prompts_counts_drops(data_files, smollm2_tokenizer):
    rows = data_files.verl_rows(4)
    rows[1]["prompt"] = [{"role": "user", "content": "word " * 200}]
    rows[3]["prompt"] = [{"role": "user", "content": "word " * 200}]
    path = data_files.jsonl("mixed.jsonl", rows)
    options = prompt_options(max_prompt_length=64, filter_overlong_prompts=True)
    ds = load_prompt_dataset(path, smollm2_tokenizer, options)
    assert ds.num_filtered == 2
    assert [r.ground_truth for r in ds] == ["0", "2"]
    assert ds.filtered[0].startswith(f"{path} line 2 (")


@pytest.mark.parametrize("mode", ["left", "right", "middle"])
def test_truncation_modes_on_real_prompts(data_files, smollm2_tokenizer, mode):
    rows = data_files.verl_rows(1)
    rows[0]["prompt"] = [{"role": "user", "content": "word " * 100}]
    path = data_files.jsonl("long.jsonl", rows)
    full = _expected_ids(smollm2_tokenizer, rows[0]["prompt"])
    record = load_prompt_dataset(path, smollm2_tokenizer, prompt_options(max_prompt_length=21, truncation=mode))[0]
    assert record.prompt_ids == truncate_ids(full, 21, mode)
    assert len(record.prompt_ids) == 21


def test_truncate_ids_by_hand():
    ids = list(range(10))
    assert truncate_ids(ids, 4, "left") == [6, 7, 8, 9]  # keeps the end (generation prompt)
    assert truncate_ids(ids, 4, "right") == [0, 1, 2, 3]
    assert truncate_ids(ids, 5, "middle") == [0, 1, 2, 8, 9]  # ceil(5/2)=3 from the start, 2 from the end
    assert truncate_ids(ids, 1, "middle") == [0]
    assert truncate_ids(ids, 10, "left") == ids  # fits: untouched


def test_max_samples_keeps_the_first_rows(data_files, smollm2_tokenizer):
    a = data_files.jsonl("a.jsonl", data_files.verl_rows(3))
    b = data_files.jsonl("b.jsonl", data_files.verl_rows(3))
    ds = load_prompt_dataset([a, b], smollm2_tokenizer, prompt_options(), max_samples=4)
    assert [r.where for r in ds] == [f"{a} line 1", f"{a} line 2", f"{a} line 3", f"{b} line 1"]


def test_options_from_mapping_ignores_unrelated_keys():
    data = dataclasses.asdict(DataConfig())
    cfg = {**data, "prompt_key": "q", "max_prompt_length": 128, "train_batch_size": 8, "truncation": "left"}
    options = PromptDataOptions.from_mapping(cfg)
    assert (options.prompt_key, options.max_prompt_length, options.truncation) == ("q", 128, "left")
    assert options.ground_truth_key == "reward_model.ground_truth"  # the schema's default
    # an absent key has no default to fall back on here: it is named, never silently filled in
    del cfg["ground_truth_key"], cfg["truncation"]
    with pytest.raises(DataError, match=r"the data settings lack data\.ground_truth_key, data\.truncation"):
        PromptDataOptions.from_mapping(cfg)
