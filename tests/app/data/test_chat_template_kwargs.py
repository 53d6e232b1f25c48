"""`data.apply_chat_template_kwargs`: the chat template's own variables reach it when prompts are templated (verl's
key; Qwen3's `enable_thinking` is the usual one), and apply_chat_template's arguments are refused."""

import pytest
from support import THINKING_TEMPLATE, prompt_options

from app.data import DataError, load_prompt_dataset


@pytest.fixture
def thinking_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    tokenizer.chat_template = THINKING_TEMPLATE
    return tokenizer


def test_the_templates_variables_reach_every_prompt(data_files, thinking_tokenizer):
    path = data_files.parquet("train.parquet", data_files.verl_rows(2))
    plain = load_prompt_dataset(path, thinking_tokenizer, prompt_options())
    off = load_prompt_dataset(
        path, thinking_tokenizer, prompt_options(apply_chat_template_kwargs={"enable_thinking": False})
    )
    for a, b in zip(plain, off):
        assert thinking_tokenizer.decode(a.prompt_ids).endswith("<|im_start|>assistant\n")
        assert (
            thinking_tokenizer.decode(b.prompt_ids)
            == thinking_tokenizer.decode(a.prompt_ids) + "<think>\n\n</think>\n\n"
        )


@pytest.mark.parametrize("key", ["tokenize", "add_generation_prompt", "conversation"])
def test_apply_chat_templates_own_arguments_are_refused(key):
    with pytest.raises(DataError, match=rf"^data\.apply_chat_template_kwargs\.{key}: the trainer sets .* itself"):
        prompt_options(apply_chat_template_kwargs={key: True})
