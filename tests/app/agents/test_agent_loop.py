"""The agent loop against a scripted stand-in policy and the real SmolLM2 tokenizer: every token of a trajectory, its
mask and its log-probs are checked against a sequence built by hand from the chat template."""

import pytest
import torch
from scripted_policy import ScriptedPolicy, logprobs_for

from algos.advantages import grpo
from app.agents.agent_loop import AgentLoop, AgentLoopLimits
from app.agents.tool_base import ToolSchema
from app.agents.tool_runner import ToolRunner
from app.agents.tools.calculator import CalculatorTool
from app.trainer.multi_turn import build_trajectory_batch
from serve.types import SamplingOptions

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "123456789 * 987654321"}}</tool_call>'
PRODUCT = str(123456789 * 987654321)
ANSWER = f"The product is {PRODUCT}.\n#### {PRODUCT}"


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def calculator():
    schema = ToolSchema.from_dict(
        {
            "type": "function",
            "function": {
                "name": "calculator",
                "description": "Evaluate arithmetic",
                "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
            },
        },
        "test",
    )
    return {"calculator": CalculatorTool({}, schema)}


def make_loop(tokenizer, script, response_length=200, **limits):
    tools = calculator()
    policy = ScriptedPolicy(tokenizer, script)
    loop = AgentLoop(
        policy,
        tokenizer,
        tools,
        ToolRunner(tools, max_parallel_calls=2),
        AgentLoopLimits(response_length=response_length, **limits),
    )
    return loop, policy


def prompt_ids(tokenizer, question="What is 123456789 * 987654321?"):
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer.encode(text, add_special_tokens=False)


SAMPLING = SamplingOptions(max_tokens=200, temperature=1.0, n=1)


def test_tokens_mask_and_logprobs_token_by_token(tokenizer):
    loop, policy = make_loop(tokenizer, [CALL, ANSWER])
    prompt = prompt_ids(tokenizer)
    traj = loop.run_one(prompt, version=7, sampling=SAMPLING)

    eos = tokenizer.eos_token_id
    turn0 = tokenizer.encode(CALL, add_special_tokens=False) + [eos]
    # ChatML after an assistant turn: the newline ending its message, the tool message, the next assistant header
    glue = tokenizer.encode(
        f"\n<|im_start|>tool\n{PRODUCT}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    turn1 = tokenizer.encode(ANSWER, add_special_tokens=False) + [eos]
    assert traj.prompt_ids == prompt
    assert traj.response_ids == turn0 + glue + turn1
    assert traj.response_mask == [1] * len(turn0) + [0] * len(glue) + [1] * len(turn1)
    assert traj.response_logprobs == logprobs_for(0, len(turn0)) + [0.0] * len(glue) + logprobs_for(1, len(turn1))
    # the whole sequence is exactly what the chat template writes for this conversation
    conversation = [
        {"role": "user", "content": "What is 123456789 * 987654321?"},
        {"role": "assistant", "content": CALL},
        {"role": "tool", "content": PRODUCT},
        {"role": "assistant", "content": ANSWER},
    ]
    assert tokenizer.decode(traj.prompt_ids + traj.response_ids) == tokenizer.apply_chat_template(
        conversation, tokenize=False
    ).removesuffix("\n")
    # each turn saw the sequence so far, one sample, the same policy version, the budget left
    assert [(c[0], c[1], c[2].n, c[2].max_tokens) for c in policy.calls] == [
        (prompt, 7, 1, 200),
        (prompt + turn0 + glue, 7, 1, 200 - len(turn0) - len(glue)),
    ]
    assert (traj.finish_reason, traj.assistant_turns, traj.tool_turns, traj.tool_calls, traj.tool_errors) == (
        "stop",
        2,
        1,
        1,
        {},
    )
    assert traj.turns[1] == {"role": "tool", "content": PRODUCT}

    batch = build_trajectory_batch([traj], pad_token_id=tokenizer.pad_token_id)
    width = len(traj.response_ids)
    assert batch["response_mask"][0].tolist() == traj.response_mask
    assert batch["attention_mask"][0].tolist() == [1] * (len(prompt) + width)  # tool tokens are context: attended
    assert batch["rollout_log_probs"][0].tolist() == pytest.approx(traj.response_logprobs, abs=0, rel=1e-6)


def test_advantages_are_zero_on_every_tool_token(tokenizer):
    """Two trajectories of one prompt, rewards 1 and 0: GRPO's advantage lands on model tokens only."""
    loop, _ = make_loop(tokenizer, [CALL, ANSWER])
    short, _ = make_loop(tokenizer, [ANSWER])
    prompt = prompt_ids(tokenizer)
    trajs = [loop.run_one(prompt, version=0, sampling=SAMPLING), short.run_one(prompt, version=0, sampling=SAMPLING)]
    batch = build_trajectory_batch(trajs, pad_token_id=tokenizer.pad_token_id)
    mask = batch["response_mask"]
    rewards = torch.zeros_like(mask, dtype=torch.float32)
    for i, t in enumerate(trajs):  # the score sits on the last model token
        rewards[i, len(t.response_ids) - 1] = 1.0 - i
    adv, _ = grpo(rewards, mask, ["p", "p"])
    assert torch.all(adv[mask == 0] == 0)
    expected = 0.5 / (0.5**0.5 + 1e-6)  # deviation from the mean 0.5, over the unbiased std of {1, 0}: sqrt(0.5)
    assert adv[0][mask[0] == 1].tolist() == pytest.approx([expected] * int(mask[0].sum()), rel=1e-5)
    assert int((mask[0] == 0).sum()) > 10  # the glue and the tool result really are in the row


def test_turn_limits_and_budget(tokenizer):
    calls_forever = [CALL] * 10
    loop, policy = make_loop(tokenizer, calls_forever, max_assistant_turns=3)
    traj = loop.run_one(prompt_ids(tokenizer), version=0, sampling=SAMPLING)
    assert (traj.finish_reason, traj.assistant_turns, traj.tool_turns) == ("max_assistant_turns", 3, 2)
    assert traj.response_mask[-1] == 1  # a trajectory never ends on context tokens

    loop, _ = make_loop(tokenizer, calls_forever, max_user_turns=1)
    traj = loop.run_one(prompt_ids(tokenizer), version=0, sampling=SAMPLING)
    assert (traj.finish_reason, traj.assistant_turns, traj.tool_turns) == ("max_user_turns", 2, 1)

    loop, policy = make_loop(tokenizer, calls_forever, response_length=100)
    traj = loop.run_one(prompt_ids(tokenizer), version=0, sampling=SAMPLING)
    assert len(traj.response_ids) <= 100 and traj.finish_reason == "length"
    assert all(c[2].max_tokens == 100 - (len(c[0]) - len(prompt_ids(tokenizer))) for c in policy.calls)


def test_a_batch_runs_concurrently_prompt_major_with_tool_errors_counted(tokenizer):
    bad = (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "os.getcwd()"}}</tool_call>'
        '<tool_call>{"name": "search", "arguments": {}}</tool_call><tool_call>{oops}</tool_call>'
    )
    loop, policy = make_loop(tokenizer, [bad, ANSWER])
    prompts = [prompt_ids(tokenizer, "q1"), prompt_ids(tokenizer, "q2")]
    trajs = loop.run(prompts, version=3, sampling=SamplingOptions(max_tokens=200, n=2, seed=10))
    assert [t.prompt_ids for t in trajs] == [prompts[0], prompts[0], prompts[1], prompts[1]]
    assert sorted(c[2].seed for c in policy.calls) == [10, 10, 11, 11, 12, 12, 13, 13]
    t = trajs[0]
    # the calculator's refusal is its answer (no error kind); the unknown tool and the third call (over
    # max_parallel_calls=2) are counted errors
    assert t.tool_errors == {"unknown_tool": 1, "too_many_calls": 1}
    assert t.turns[1]["content"].startswith("Error: only numbers")
    assert all((t.assistant_turns, t.tool_turns, t.tool_calls, t.tool_error_count) == (2, 1, 3, 2) for t in trajs)
    assert t.tool_calls_ok == 0  # the calculator answered its one call with its own error metric


def test_a_call_the_tool_answers_counts_as_ok(tokenizer):
    loop, _ = make_loop(tokenizer, [CALL, ANSWER])
    [t] = loop.run([prompt_ids(tokenizer)], version=3, sampling=SAMPLING)
    assert (t.tool_calls, t.tool_calls_ok, t.tool_error_count) == (1, 1, 0)
    assert t.turns[1]["content"] == PRODUCT


def test_a_format_marker_written_as_a_special_token_reaches_the_parser(smollm2_dir):
    from transformers import AutoTokenizer

    # Mistral's vocabulary has [TOOL_CALLS] as a special token, which decoding with skip_special_tokens drops
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    tok.add_special_tokens({"additional_special_tokens": ["[TOOL_CALLS]"]})
    marker_id = tok.convert_tokens_to_ids("[TOOL_CALLS]")
    call = '[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "123456789 * 987654321"}}]'
    assert marker_id in tok.encode(call, add_special_tokens=False)
    assert "[TOOL_CALLS]" not in tok.decode(tok.encode(call, add_special_tokens=False), skip_special_tokens=True)
    loop, _ = make_loop(tok, [call, ANSWER], format="mistral")
    [t] = loop.run([prompt_ids(tok)], version=3, sampling=SAMPLING)
    assert (t.tool_calls, t.tool_calls_ok) == (1, 1)
    assert t.turns[1] == {"role": "tool", "content": PRODUCT}
