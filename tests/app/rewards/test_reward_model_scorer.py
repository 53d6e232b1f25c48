"""RewardModelScorer with a tiny random sequence-classification Llama and the SmolLM2 tokenizer."""

import pytest
import torch

from app.rewards import RewardModelScorer

OTHER_TEMPLATE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"


def _save_reward_model(tokenizer, out, chat_template=None):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForSequenceClassification(config).save_pretrained(out)
    if chat_template is not None:
        tokenizer = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
        tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="module")
def policy_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="module")
def same_tokenizer_rm(policy_tokenizer, tmp_path_factory):
    return _save_reward_model(policy_tokenizer, tmp_path_factory.mktemp("rm_same"))


@pytest.fixture(scope="module")
def other_template_rm(policy_tokenizer, tmp_path_factory):
    return _save_reward_model(policy_tokenizer, tmp_path_factory.mktemp("rm_other"), chat_template=OTHER_TEMPLATE)


@pytest.fixture(scope="module")
def same_scorer(policy_tokenizer, same_tokenizer_rm):
    return RewardModelScorer(same_tokenizer_rm, policy_tokenizer=policy_tokenizer, batch_size=2, dtype=torch.float32)


MESSAGES = [[{"role": "user", "content": "What is 2+2?"}], [{"role": "user", "content": "Name a colour, please."}]]
RESPONSES = ["It is 4.", "Blue is a colour that many people like."]


def test_same_tokenizer_scores_policy_ids_directly(policy_tokenizer, same_scorer):
    scorer = same_scorer
    assert not scorer.retemplate
    prompt_ids = [policy_tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in MESSAGES]
    prompt_ids = [policy_tokenizer(t, add_special_tokens=False)["input_ids"] for t in prompt_ids]
    # the second response ends with EOS, which is also the pad id: it must still be scored on its last token
    response_ids = [policy_tokenizer(r, add_special_tokens=False)["input_ids"] for r in RESPONSES]
    response_ids[1] = response_ids[1] + [policy_tokenizer.eos_token_id]
    scores = scorer.score_ids(prompt_ids, response_ids)

    # reference: each sequence alone, no padding, score read at its last position
    for score, p, r in zip(scores, prompt_ids, response_ids):
        with torch.no_grad():
            hidden = scorer.model.model(input_ids=torch.tensor([p + r])).last_hidden_state
            expected = scorer.model.score(hidden)[0, -1, 0].item()
        assert score == pytest.approx(expected, abs=1e-5)
    assert scores[0] != pytest.approx(scores[1], abs=1e-6)


def test_batching_does_not_change_scores(same_scorer):
    scorer = same_scorer
    together = scorer.score(MESSAGES, RESPONSES)
    alone = [scorer.score([m], [r])[0] for m, r in zip(MESSAGES, RESPONSES)]
    assert together == pytest.approx(alone, abs=1e-5)


def test_different_tokenizer_retemplates_with_reward_models_template(policy_tokenizer, other_template_rm):
    scorer = RewardModelScorer(other_template_rm, policy_tokenizer=policy_tokenizer, dtype=torch.float32)
    assert scorer.retemplate
    texts = scorer.conversation_texts(MESSAGES[:1], RESPONSES[:1])
    assert texts == ["[user] What is 2+2?\n[assistant] It is 4.\n"]

    response_ids = [
        policy_tokenizer(r, add_special_tokens=False)["input_ids"] + [policy_tokenizer.eos_token_id] for r in RESPONSES
    ]
    via_ids = scorer.score_ids([[1, 2, 3]] * 2, response_ids, messages=MESSAGES)  # policy prompt ids are not used
    assert via_ids == pytest.approx(scorer.score(MESSAGES, RESPONSES), abs=1e-6)  # decoded without the EOS
    with pytest.raises(ValueError, match="pass messages"):
        scorer.score_ids([[1]], response_ids[:1])


def test_long_sequences_keep_their_end(same_scorer, monkeypatch):
    monkeypatch.setattr(same_scorer, "max_length", 8)
    sequence = list(range(100, 120))
    score = same_scorer.score_token_ids([sequence])
    assert score == pytest.approx(same_scorer.score_token_ids([sequence[-8:]]), abs=1e-6)
    assert score != pytest.approx(same_scorer.score_token_ids([sequence[:8]]), abs=1e-6)
