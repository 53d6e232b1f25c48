"""verl's `reward_model.model.input_tokenizer`: which tokenizer decodes the policy's ids for the reward model."""
from types import SimpleNamespace

from app.trainer.scoring import _input_tokenizer


def test_input_tokenizer_is_the_policys_unless_a_path_is_given(tiny_model_dir):
    policy = object()  # any tokenizer: with no path it is passed through untouched
    assert _input_tokenizer(SimpleNamespace(input_tokenizer=None, trust_remote_code=False), policy) is policy
    loaded = _input_tokenizer(SimpleNamespace(input_tokenizer=str(tiny_model_dir), trust_remote_code=False), policy)
    assert loaded is not policy and loaded.decode(loaded.encode("2 + 2 = 4"), skip_special_tokens=True) == "2 + 2 = 4"
