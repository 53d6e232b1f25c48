"""Multi-turn rollouts in the loop (`actor_rollout_ref.rollout.multi_turn.enable`, app/agents): a step's samples as
trajectories, with tool results, interaction turns and template glue masked out of `response_mask`, and their
per-step metrics."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from app.agents.rollout import AgentRollout
from app.agents.trajectory import Trajectory
from app.batch import TensorBatch
from app.data import PromptBatch
from app.trainer.rollout_batch import RolloutGroup, build_rollout_batch

# per-sample counts kept in `RolloutGroup.extras` (they follow the samples through filtering), averaged per step
COUNTS = ("assistant_turns", "tool_turns", "tool_calls", "tool_errors", "tool_timeouts", "interaction_turns")


def agent_rollout(cfg: Any, rollout: Any, tokenizer: Any) -> Optional[AgentRollout]:
    """The agent loop over `rollout` when `multi_turn.enable`, else None (single-turn generate)."""
    arr = cfg.actor_rollout_ref.rollout
    if not arr.multi_turn.enable:
        return None
    return AgentRollout(rollout, tokenizer, arr, template_kwargs=cfg.data.apply_chat_template_kwargs)


def trajectory_group(
    agents: AgentRollout, prompts: PromptBatch, version: int, pad_token_id: int, temperature: float
) -> RolloutGroup:
    """`rollout.n` trajectories per prompt as one group; `extra_info` of each adds, for reward functions, its `turns`
    (the messages after the prompt, tool results and interaction turns included), `tool_rewards` ({tool:
    calc_reward}), `turn_scores` (the interaction's score of each of its turns) and `interaction_score` (its
    calculate_score; None without an interaction)."""
    trajs = agents.trajectories(
        prompts.raw_prompt_ids,
        expect_version=version,
        extra_infos=prompts.extra_info,
        prompt_messages=prompts.raw_prompt,
    )
    n = len(trajs) // max(1, len(prompts.raw_prompt_ids))
    pick = [row // n for row in range(len(trajs))]
    batch = build_trajectory_batch(trajs, pad_token_id)
    batch.meta["temperature"] = temperature
    extras = {f"multi_turn/{name}": [float(_count(t, name)) for t in trajs] for name in COUNTS}
    return RolloutGroup(
        batch=batch,
        uid=[prompts.uid[i] for i in pick],
        dataset_index=[prompts.index[i] for i in pick],
        data_source=[prompts.data_source[i] for i in pick],
        ground_truth=[prompts.ground_truth[i] for i in pick],
        extra_info=[
            {
                **(prompts.extra_info[i] or {}),
                "turns": t.turns,
                "tool_rewards": t.tool_rewards,
                "turn_scores": t.turn_scores,
                "interaction_score": t.interaction_score,
            }
            for i, t in zip(pick, trajs)
        ],
        messages=[prompts.raw_prompt[i] for i in pick],
        finish_reason=[t.finish_reason for t in trajs],
        policy_version=version,
        extras=extras,
    )


def build_trajectory_batch(trajectories: Sequence[Trajectory], pad_token_id: int) -> TensorBatch:
    """The rollout batch of `build_rollout_batch` (attention on every real token) with `response_mask` zero on the
    tokens the model did not sample, which every estimator, loss and aggregation reads."""
    batch = build_rollout_batch(
        [t.prompt_ids for t in trajectories],
        [t.response_ids for t in trajectories],
        [t.response_logprobs for t in trajectories],
        pad_token_id,
    )
    mask = batch["response_mask"]
    for i, t in enumerate(trajectories):
        mask[i, : len(t.response_mask)] = mask.new_tensor(t.response_mask)
    return batch


def multi_turn_metrics(group: RolloutGroup) -> dict[str, float]:
    """`multi_turn/<count>_mean` per trajectory of this rank's batch; {} for single-turn batches."""
    out = {}
    for name in COUNTS:
        values = group.extras.get(f"multi_turn/{name}")
        if values:
            out[f"multi_turn/{name}_mean"] = sum(values) / len(values)
    return out


def _count(t, name: str) -> int:
    if name == "tool_errors":
        return t.tool_error_count
    if name == "tool_timeouts":
        return t.tool_errors.get("timeout", 0)
    return getattr(t, name)
