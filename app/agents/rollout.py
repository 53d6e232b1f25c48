"""The rollout client seen through the agent loop: `trajectories` for training, and `generate` with the client's
signature (one sample per trajectory, its response the model's own tokens of every turn) for validation."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from app.agents.agent_loop import AgentLoop, AgentLoopLimits
from app.agents.interaction_config import load_interactions
from app.agents.tool_config import load_tools
from app.agents.tool_runner import ToolRunner
from app.agents.trajectory import Trajectory
from serve.types import RolloutSample, SamplingOptions

ExtraInfos = Optional[Sequence[Optional[Mapping[str, Any]]]]  # per prompt: its row's extra_info
PromptMessages = Optional[Sequence[Sequence[Mapping[str, Any]]]]  # per prompt: its chat messages


class AgentRollout:
    def __init__(
        self, client: Any, tokenizer: Any, rollout_cfg: Any, template_kwargs: Optional[Mapping[str, Any]] = None
    ):
        """`rollout_cfg`: `actor_rollout_ref.rollout` (its `multi_turn` section, budget and sampling keys);
        `template_kwargs`: the chat template's variables the prompts were templated with
        (`data.apply_chat_template_kwargs`), for the turns templated here too."""
        mt = rollout_cfg.multi_turn
        self.client = client
        self.rollout_cfg = rollout_cfg
        tools = load_tools(mt.tool_config_path) if mt.tool_config_path else {}
        runner = ToolRunner(
            tools,
            max_parallel_calls=mt.max_parallel_calls,
            timeout_s=mt.tool_timeout_s,
            max_response_length=mt.max_tool_response_length,
            truncate_side=mt.tool_response_truncate_side,
        )
        self.loop = AgentLoop(
            client,
            tokenizer,
            tools,
            runner,
            AgentLoopLimits.from_config(mt, rollout_cfg.response_length, rollout_cfg.max_num_seqs),
            load_interactions(mt.interaction_config_path) if mt.interaction_config_path else None,
            template_kwargs=template_kwargs,
        )

    def trajectories(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        *,
        expect_version: int,
        validation: bool = False,
        extra_infos: ExtraInfos = None,
        prompt_messages: PromptMessages = None,
    ) -> list[Trajectory]:
        """`rollout.n` trajectories per prompt (`val_kwargs.n` when `validation`), prompt-major. Per prompt, from its
        row: `extra_infos` (verl's `tools_kwargs` and `interaction_kwargs` are read from it), `prompt_messages` (the
        chat messages, which an interaction sees)."""
        sampling = SamplingOptions.from_rollout_config(self.rollout_cfg, validation=validation)
        return self.loop.run(
            prompt_token_ids,
            version=expect_version,
            sampling=sampling,
            tools_kwargs=_column(extra_infos, "tools_kwargs"),
            interaction_kwargs=_column(extra_infos, "interaction_kwargs"),
            prompt_messages=prompt_messages,
        )

    def generate(
        self, prompt_token_ids: Sequence[Sequence[int]], *, expect_version: int, validation: bool = False, **rows: Any
    ) -> list[RolloutSample]:
        """The client's `generate`, one sample per trajectory; `rows`: `trajectories`' per-prompt arguments."""
        trajs = self.trajectories(prompt_token_ids, expect_version=expect_version, validation=validation, **rows)
        return as_samples(trajs, len(prompt_token_ids), expect_version)


def as_samples(trajs: Sequence[Trajectory], prompt_count: int, version: int) -> list[RolloutSample]:
    """One sample per trajectory (prompt-major, as `trajectories` returns them), its response the model's own tokens."""
    n = len(trajs) // max(1, prompt_count)
    out = []
    for row, t in enumerate(trajs):
        keep = [k for k, m in enumerate(t.response_mask) if m]
        out.append(
            RolloutSample(
                row // n,
                row % n,
                [t.response_ids[k] for k in keep],
                [t.response_logprobs[k] for k in keep],
                t.finish_reason,
                version,
            )
        )
    return out


def _column(extra_infos: ExtraInfos, key: str) -> Optional[list[Any]]:
    return None if extra_infos is None else [(e or {}).get(key) for e in extra_infos]
