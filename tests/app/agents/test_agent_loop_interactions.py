"""The agent loop with an interaction (verl's interaction life cycle) against the scripted stand-in policy and the
real SmolLM2 tokenizer: the user turns it writes are masked out token by token, it ends the episode or the turn limits
do, and its turn scores and final score are kept for the reward."""

from pathlib import Path

import pytest
from scripted_policy import ScriptedPolicy, logprobs_for

from app.agents.agent_loop import AgentLoop, AgentLoopLimits
from app.agents.interaction_base import BaseInteraction
from app.agents.interaction_config import load_interactions
from app.agents.tool_runner import ToolRunner
from serve.types import SamplingOptions

ROOT = Path(__file__).resolve().parents[3]
QUESTION = [{"role": "user", "content": "Tom has 3 apples and buys 4 more. How many apples?"}]
WRONG, RIGHT = "He has 12 apples.\n#### 12", "3 + 4 = 7.\n#### 7"
SAMPLING = SamplingOptions(max_tokens=300, temperature=1.0, n=1)


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


class ScriptedInteraction(BaseInteraction):
    """Answers turn k with `replies[k]` = (done, text, score, additional data); records every call."""

    def __init__(self, config):
        super().__init__(config)
        self.replies = config["replies"]
        self.log = []

    async def start_interaction(self, instance_id=None, **kwargs):
        self.log.append(("start", kwargs))
        return "inst-1"

    async def generate_response(self, instance_id, messages, **kwargs):
        self.log.append(("respond", instance_id, [dict(m) for m in messages], kwargs))
        return self.replies[sum(1 for entry in self.log if entry[0] == "respond") - 1]

    def calculate_score(self, instance_id, **kwargs):  # plain, not async: both are called
        self.log.append(("score", instance_id))
        return 0.25

    async def finalize_interaction(self, instance_id, **kwargs):
        self.log.append(("finalize", instance_id))


def make_loop(tokenizer, script, interactions, response_length=300, **limits):
    policy = ScriptedPolicy(tokenizer, script)
    loop = AgentLoop(
        policy, tokenizer, {}, ToolRunner({}), AgentLoopLimits(response_length=response_length, **limits), interactions
    )
    return loop, policy


def prompt_ids(tokenizer):
    text = tokenizer.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


def test_the_built_in_gsm8k_interaction_asks_again_then_ends_tokens_mask_logprobs(tokenizer):
    interactions = load_interactions(ROOT / "examples/gsm8k_interaction.yaml")
    assert list(interactions) == ["gsm8k"]
    loop, policy = make_loop(tokenizer, [WRONG, RIGHT], interactions)
    prompt = prompt_ids(tokenizer)
    traj = loop.run_one(
        prompt,
        version=4,
        sampling=SAMPLING,
        interaction_kwargs={"name": "gsm8k", "ground_truth": "7"},
        prompt_messages=QUESTION,
    )
    eos = tokenizer.eos_token_id
    turn0 = tokenizer.encode(WRONG, add_special_tokens=False) + [eos]
    retry = interactions["gsm8k"].retry_message
    # ChatML after an assistant turn: the newline ending its message, the user message, the next assistant header
    glue = tokenizer.encode(f"\n<|im_start|>user\n{retry}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    turn1 = tokenizer.encode(RIGHT, add_special_tokens=False) + [eos]
    assert traj.response_ids == turn0 + glue + turn1  # the closing "correct" message is not trained on: it ends here
    assert traj.response_mask == [1] * len(turn0) + [0] * len(glue) + [1] * len(turn1)
    assert traj.response_logprobs == logprobs_for(0, len(turn0)) + [0.0] * len(glue) + logprobs_for(1, len(turn1))
    assert tokenizer.decode(prompt + traj.response_ids) == tokenizer.apply_chat_template(
        QUESTION
        + [
            {"role": "assistant", "content": WRONG},
            {"role": "user", "content": retry},
            {"role": "assistant", "content": RIGHT},
        ],
        tokenize=False,
    ).removesuffix("\n")
    assert [c[0] for c in policy.calls] == [prompt, prompt + turn0 + glue]
    assert [t["role"] for t in traj.turns] == ["assistant", "user", "assistant", "user"]
    assert traj.turns[3] == {"role": "user", "content": interactions["gsm8k"].correct_message}
    assert (traj.finish_reason, traj.assistant_turns, traj.interaction_turns, traj.user_turns) == ("stop", 2, 2, 2)
    assert (traj.turn_scores, traj.interaction_score) == ([0.0, 1.0], 1.0)
    assert interactions["gsm8k"]._state == {}  # finalized


def test_life_cycle_calls_kwargs_and_messages(tokenizer):
    interaction = ScriptedInteraction(
        {"name": "coach", "replies": [(False, "Try again.", 0.5, {}), (True, "Done.", 1.0, {"k": 1})]}
    )
    loop, _ = make_loop(tokenizer, [WRONG, RIGHT], {"other": BaseInteraction({}), "coach": interaction})
    kwargs = {"name": "coach", "ground_truth": "7"}
    traj = loop.run_one(
        prompt_ids(tokenizer), version=0, sampling=SAMPLING, interaction_kwargs=kwargs, prompt_messages=QUESTION
    )
    first = QUESTION + [{"role": "assistant", "content": WRONG}]
    second = first + [{"role": "user", "content": "Try again."}, {"role": "assistant", "content": RIGHT}]
    assert interaction.log == [
        ("start", kwargs),  # the row's interaction_kwargs, its name included, as verl hands them
        ("respond", "inst-1", first, kwargs),  # the whole conversation, the prompt's messages first
        ("respond", "inst-1", second, kwargs),
        ("score", "inst-1"),
        ("finalize", "inst-1"),
    ]
    assert (traj.turn_scores, traj.interaction_score, traj.interaction_turns) == ([0.5, 1.0], 0.25, 2)


def test_max_user_turns_ends_the_episode_and_the_default_is_the_first_interaction(tokenizer):
    replies = [(False, "Try again.", 0.0, {})] * 5
    first, second = ScriptedInteraction({"replies": replies}), ScriptedInteraction({"replies": replies})
    loop, policy = make_loop(tokenizer, [WRONG] * 5, {"first": first, "second": second}, max_user_turns=2)
    traj = loop.run_one(prompt_ids(tokenizer), version=0, sampling=SAMPLING)  # no interaction_kwargs: the first
    assert (traj.finish_reason, traj.assistant_turns, traj.interaction_turns) == ("max_user_turns", 3, 2)
    assert traj.turn_scores == [0.0, 0.0] and len(policy.calls) == 3
    assert traj.response_mask[-1] == 1  # ends on the model's own last token
    assert [e[0] for e in first.log] == ["start", "respond", "respond", "score", "finalize"] and second.log == []
    assert first.log[0] == ("start", {})

    loop, _ = make_loop(
        tokenizer, [WRONG] * 5, {"first": ScriptedInteraction({"replies": replies})}, max_assistant_turns=2
    )
    traj = loop.run_one(prompt_ids(tokenizer), version=0, sampling=SAMPLING)
    assert (traj.finish_reason, traj.assistant_turns, traj.interaction_turns) == ("max_assistant_turns", 2, 1)


def test_an_unknown_interaction_name_is_refused_and_nothing_is_left_open(tokenizer):
    interaction = ScriptedInteraction({"replies": []})
    loop, policy = make_loop(tokenizer, [WRONG], {"coach": interaction})
    with pytest.raises(ValueError, match=r"\['name'\]='judge': no such interaction in .*interaction_config_path"):
        loop.run_one(prompt_ids(tokenizer), version=0, sampling=SAMPLING, interaction_kwargs={"name": "judge"})
    assert policy.calls == [] and interaction.log == []


def test_a_reply_of_the_wrong_shape_names_the_contract(tokenizer):
    interaction = ScriptedInteraction({"replies": [(True, "ok", 1.0)]})
    loop, _ = make_loop(tokenizer, [WRONG], {"coach": interaction})
    with pytest.raises(ValueError, match=r"generate_response returned \(True, 'ok', 1\.0\); it must return"):
        loop.run_one(prompt_ids(tokenizer), version=0, sampling=SAMPLING)
    assert interaction.log[-1] == ("finalize", "inst-1")  # finalized after the error too


def test_without_an_interaction_a_turn_without_tool_calls_ends_the_trajectory(tokenizer):
    loop, policy = make_loop(tokenizer, [WRONG, RIGHT], {})
    traj = loop.run_one(prompt_ids(tokenizer), version=0, sampling=SAMPLING, interaction_kwargs={"name": "x"})
    assert (traj.assistant_turns, traj.interaction_turns, traj.turn_scores, traj.interaction_score) == (1, 0, [], None)
