import pytest
from transformers import LlamaConfig


@pytest.fixture()
def model_dir(tmp_path):
    """A folder with only a small Llama's config.json: what the config-reading checks read (no weights)."""
    LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=2,
        num_hidden_layers=2,
        max_position_embeddings=128,
    ).save_pretrained(tmp_path)
    return str(tmp_path)
