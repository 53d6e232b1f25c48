"""The engine's token-budget micro-batches (use_dynamic_bsz): none over the budget, and a clear error for a sequence
that cannot fit, naming the config key to raise."""

from __future__ import annotations

import pytest
from support import engine_spec

from app.engine import StepContext, make_engine

KEY = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"


@pytest.fixture(scope="module")
def engine(tiny_llama_dir):
    e = make_engine(
        "fsdp2",
        engine_spec(
            tiny_llama_dir,
            param_dtype="fp32",
            device="cpu",
            use_dynamic_bsz=True,
            max_token_len_per_gpu=12,
            max_token_len_key=KEY,
        ),
    )
    e.init_model()
    return e


def _micro_batch_tokens(engine, batch, ctx):
    seen = []

    def record(micro, ctx):
        seen.append(int(micro["attention_mask"].sum()))
        return micro

    with engine.eval_mode():
        engine.forward_backward_step(batch, ctx, forward_only=True, preprocess_fn=record)
    return seen


def test_no_micro_batch_exceeds_the_budget(engine, make_rl_batch):
    # sequences of 9, 8, 7, 4, 3, 3 tokens: 3 micro-batches, balanced as 9+3 | 8+3 | 7+4 = 12, 11, 11
    batch = make_rl_batch([6, 5, 4, 2, 2, 1], [3, 3, 3, 2, 1, 2])
    seen = _micro_batch_tokens(engine, batch, StepContext())
    assert sorted(seen) == [11, 11, 12] and max(seen) <= 12
    assert sum(seen) == int(batch["attention_mask"].sum())  # every token once


def test_a_sequence_over_the_budget_names_the_key_to_raise(engine, make_rl_batch):
    batch = make_rl_batch([9, 2], [5, 1])  # 14 tokens in the first row
    with pytest.raises(ValueError, match=rf"{KEY}=12 is below one sequence of 14 tokens; raise it"):
        _micro_batch_tokens(engine, batch, StepContext())
    # a per-call budget (the log-prob pass's) names its own key
    with pytest.raises(ValueError, match=r"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=13 is below"):
        _micro_batch_tokens(
            engine,
            batch,
            StepContext(max_token_len=13, max_token_len_key="actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"),
        )
    assert sorted(_micro_batch_tokens(engine, batch, StepContext(max_token_len=14))) == [3, 14]
