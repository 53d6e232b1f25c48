"""The trainer's side of multi-turn rollouts (app/trainer/multi_turn.py): a step's trajectories become one
RolloutGroup whose response mask hides tool results, whose extra_info carries the turns for rewards, and whose
per-sample counts give the step's multi_turn/* metrics; validation sees one sample per trajectory."""

from pathlib import Path

import pytest
from scripted_policy import ScriptedPolicy

from app.agents.rollout import AgentRollout
from app.config.schema import RolloutConfig
from app.data.calculator_task import TOOL_CONFIG
from app.data.collate import collate_prompts
from app.data.dataset import PromptRecord
from app.trainer.multi_turn import multi_turn_metrics, trajectory_group
from app.trainer.rollout_batch import select_rows

GSM8K_INTERACTION = Path(__file__).resolve().parents[3] / "examples/gsm8k_interaction.yaml"
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "1234567 * 7654321"}}</tool_call>'
ANSWER = f"#### {1234567 * 7654321}"


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def agent_rollout(tokenizer, tmp_path, script, n=2, interaction_config_path=None):
    import yaml

    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump(TOOL_CONFIG))
    cfg = RolloutConfig(n=n, response_length=256)
    cfg.multi_turn.enable = True
    cfg.multi_turn.tool_config_path = str(path)
    cfg.multi_turn.interaction_config_path = interaction_config_path
    policy = ScriptedPolicy(tokenizer, script)
    return AgentRollout(policy, tokenizer, cfg), policy


def prompts(tokenizer, questions, extra_info=None):
    records = []
    for q in questions:
        messages = [{"role": "user", "content": q}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        records.append(
            PromptRecord(
                tokenizer.encode(text, add_special_tokens=False),
                messages,
                "calculator_arithmetic",
                "1",
                {"index": len(records), **(extra_info or {})},
                "arithmetic",
                f"row {len(records)}",
            )
        )
    return collate_prompts(
        records, list(range(len(records))), [f"u{i}" for i in range(len(records))], tokenizer.pad_token_id
    )


def test_trajectories_become_one_group_with_tool_tokens_masked(tokenizer, tmp_path):
    agents, policy = agent_rollout(tokenizer, tmp_path, [CALL, ANSWER])
    batch = prompts(tokenizer, ["q one", "q two"])
    group = trajectory_group(agents, batch, version=5, pad_token_id=tokenizer.pad_token_id, temperature=0.7)
    assert group.uid == ["u0", "u0", "u1", "u1"] and group.policy_version == 5
    assert {c[1] for c in policy.calls} == {5}
    mask, attention = group.batch["response_mask"], group.batch["attention_mask"]
    width = mask.shape[1]
    tool_text = str(1234567 * 7654321)
    for row in range(4):
        real = attention[row, -width:].bool()
        responses = group.batch["responses"][row][real].tolist()
        masked_out = [t for t, m in zip(responses, mask[row][real].tolist()) if not m]
        assert tool_text in tokenizer.decode(masked_out)  # the tool's answer is in the row, masked out
        assert (
            tool_text not in tokenizer.decode(group.batch["responses"][row][mask[row].bool()].tolist()).split("####")[0]
        )  # the model's own text holds it only as answer
        assert group.extra_info[row]["turns"][1] == {"role": "tool", "content": tool_text}
        assert group.extra_info[row]["index"] == row // 2
    assert group.batch.meta["temperature"] == 0.7
    metrics = multi_turn_metrics(select_rows(group, [0, 3]))  # the counts follow the samples through filtering
    assert metrics == {
        "multi_turn/assistant_turns_mean": 2.0,
        "multi_turn/tool_turns_mean": 1.0,
        "multi_turn/tool_calls_mean": 1.0,
        "multi_turn/tool_errors_mean": 0.0,
        "multi_turn/tool_timeouts_mean": 0.0,
        "multi_turn/interaction_turns_mean": 0.0,
    }


def test_interaction_turns_are_masked_counted_and_their_scores_reach_the_reward(tokenizer, tmp_path):
    from app.config.schema import OverlongBufferConfig
    from app.trainer.scoring import score_group

    wrong, right = "#### 5", "#### 9"
    agents, _ = agent_rollout(tokenizer, tmp_path, [wrong, right], n=1, interaction_config_path=str(GSM8K_INTERACTION))
    batch = prompts(tokenizer, ["q"], {"interaction_kwargs": {"name": "gsm8k", "ground_truth": "9"}})
    group = trajectory_group(agents, batch, 0, tokenizer.pad_token_id, 1.0)
    retry = agents.loop.interactions["gsm8k"].retry_message
    mask, attention = group.batch["response_mask"][0], group.batch["attention_mask"][0]
    real = attention[-mask.shape[0] :].bool()
    responses = group.batch["responses"][0][real].tolist()
    masked_out = [t for t, m in zip(responses, mask[real].tolist()) if not m]
    assert retry in tokenizer.decode(masked_out)  # the interaction's turn is in the row, masked out
    assert (
        tokenizer.decode(group.batch["responses"][0][mask.bool()].tolist(), skip_special_tokens=True) == wrong + right
    )
    assert multi_turn_metrics(group)["multi_turn/interaction_turns_mean"] == 2.0  # "try again", then "correct"

    class RecordingScorer:
        def score(self, responses, data_sources, ground_truths, extra_infos, messages):
            self.extra_infos = extra_infos
            return [0.0] * len(responses), {}, {}

    class OneRank:
        def reduce(self, metrics):
            return metrics

    scorer = RecordingScorer()
    score_group(scorer, tokenizer, group, OverlongBufferConfig(), 256, OneRank())
    [info] = scorer.extra_infos
    assert (info["turn_scores"], info["interaction_score"]) == ([0.0, 1.0], 1.0)
    assert info["interaction_kwargs"]["ground_truth"] == "9" and info["turns"][1] == {"role": "user", "content": retry}


def test_validation_hands_the_rows_to_the_interaction(tokenizer, tmp_path):
    from app.trainer.collectives import RankGroup
    from app.trainer.validation import validate

    class OneRank:
        dp_rank, dp_world_size = 0, 1

        def all_reduce(self, tensor, op="sum"):
            return tensor.clone()

    class Scorer:
        def score(self, texts, sources, truths, infos, messages):
            self.texts = texts
            return [1.0] * len(texts), {}, {}

    agents, policy = agent_rollout(
        tokenizer, tmp_path, ["#### 5", "#### 9"], interaction_config_path=str(GSM8K_INTERACTION)
    )
    dataset = prompts(tokenizer, ["q"], {"interaction_kwargs": {"ground_truth": "9"}})
    records = [
        PromptRecord(ids, messages, "gsm8k", "9", info, "math", "r")
        for ids, messages, info in zip(dataset.raw_prompt_ids, dataset.raw_prompt, dataset.extra_info)
    ]
    scorer = Scorer()
    validate(agents, scorer, tokenizer, records, RankGroup(OneRank()), version=0)
    assert scorer.texts == ["#### 5#### 9"]  # the interaction read the row's ground truth and asked again once
    assert len(policy.calls) == 2


def test_validation_view_is_one_sample_per_trajectory_with_the_model_tokens(tokenizer, tmp_path):
    agents, _ = agent_rollout(tokenizer, tmp_path, [CALL, ANSWER])
    batch = prompts(tokenizer, ["q one"])
    samples = agents.generate(batch.raw_prompt_ids, expect_version=0, validation=True)  # val_kwargs.n = 1
    assert [(s.prompt_index, s.sample_index) for s in samples] == [(0, 0)]
    text = tokenizer.decode(samples[0].response_token_ids, skip_special_tokens=True)
    assert text == CALL + ANSWER  # both assistant turns; the tool message and the template glue left out
    assert len(samples[0].logprobs) == len(samples[0].response_token_ids)


def test_single_turn_groups_have_no_multi_turn_metrics(tokenizer, tmp_path):
    agents, _ = agent_rollout(tokenizer, tmp_path, [ANSWER])
    group = trajectory_group(agents, prompts(tokenizer, ["q"]), 0, tokenizer.pad_token_id, 1.0)
    group.extras.clear()
    assert multi_turn_metrics(group) == {}


def test_step_lengths_count_model_tokens_and_prompt_columns(tokenizer, tmp_path):
    import torch

    from app.trainer.step_metrics import batch_metrics

    agents, _ = agent_rollout(tokenizer, tmp_path, [CALL, ANSWER], n=1)
    batch = prompts(tokenizer, ["q one"])
    group = trajectory_group(agents, batch, 0, tokenizer.pad_token_id, 1.0)
    b = group.batch
    for key in ("token_level_scores", "token_level_rewards", "advantages", "returns"):
        b[key] = torch.zeros_like(b["response_mask"], dtype=torch.float32)
    metrics = batch_metrics(b, response_length_limit=256)
    model_tokens = (
        len(tokenizer.encode(CALL, add_special_tokens=False))
        + len(tokenizer.encode(ANSWER, add_special_tokens=False))
        + 2
    )  # each turn ends with its stop token
    assert metrics["response_length/mean"] == model_tokens
    assert metrics["prompt_length/mean"] == len(batch.raw_prompt_ids[0])


def test_the_trainers_agent_loop_templates_turns_with_the_prompts_template_variables(tokenizer, tmp_path):
    import yaml

    from app.config.schema import TrainerRunConfig
    from app.trainer.multi_turn import agent_rollout as trainer_agent_rollout

    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump(TOOL_CONFIG))
    cfg = TrainerRunConfig()
    cfg.actor_rollout_ref.rollout.multi_turn.enable = True
    cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path = str(path)
    cfg.data.apply_chat_template_kwargs = {"enable_thinking": False}
    agents = trainer_agent_rollout(cfg, ScriptedPolicy(tokenizer, [ANSWER]), tokenizer)
    assert agents.loop.glue.template_kwargs == {"enable_thinking": False}  # what the prompts were templated with
