"""The multi-turn rollout: per trajectory, generate one turn -> parse its tool calls -> run them -> append the results
with the chat template -> generate again, until the model answers without a call, a turn limit or the token budget
(`rollout.response_length` covers the whole trajectory after the prompt). The trajectories of a batch run
concurrently, so the rollout engine batches their turns; every turn asks for the same policy version."""

from __future__ import annotations

import concurrent.futures
import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from app.agents.chat_glue import ChatGlue
from app.agents.tool_base import BaseTool, call_tool
from app.agents.tool_calls import parse_tool_calls
from app.agents.tool_runner import ToolRunner
from app.agents.trajectory import Trajectory


@dataclass(frozen=True)
class AgentLoopLimits:
    response_length: int  # token budget after the prompt: model tokens, tool results and glue together
    max_assistant_turns: Optional[int] = None  # None: only the budget limits the turns
    max_user_turns: Optional[int] = None  # tool-result turns count as user turns, as in verl
    format: str = "hermes"
    max_concurrency: int = 64  # trajectories in flight at once

    @classmethod
    def from_config(cls, multi_turn: Any, response_length: int, max_concurrency: int) -> "AgentLoopLimits":
        """From `actor_rollout_ref.rollout.multi_turn` and the rollout's `response_length` / `max_num_seqs`."""
        return cls(
            response_length,
            multi_turn.max_assistant_turns,
            multi_turn.max_user_turns,
            multi_turn.format,
            max(1, max_concurrency),
        )


class AgentLoop:
    """`client`: anything with the rollout client's `generate(prompt_token_ids, *, expect_version, sampling)`."""

    def __init__(
        self, client: Any, tokenizer: Any, tools: Mapping[str, BaseTool], runner: ToolRunner, limits: AgentLoopLimits
    ):
        self.client = client
        self.tokenizer = tokenizer
        self.tools = dict(tools)
        self.runner = runner
        self.limits = limits
        self.glue = ChatGlue(tokenizer)

    def run(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        version: int,
        sampling: Any,
        tools_kwargs: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
    ) -> list[Trajectory]:
        """`sampling.n` trajectories per prompt, prompt-major (prompt i's are rows i*n .. i*n+n-1).

        `tools_kwargs[i]`: verl's per-row {tool name: {create_kwargs, execute_kwargs, calc_reward_kwargs,
        release_kwargs}} (from the row's extra_info), or None."""
        n = sampling.n
        jobs = [(i, j) for i in range(len(prompts)) for j in range(n)]
        kwargs = list(tools_kwargs) if tools_kwargs is not None else [None] * len(prompts)
        with concurrent.futures.ThreadPoolExecutor(
            max_workers=min(len(jobs), self.limits.max_concurrency) or 1, thread_name_prefix="agent-loop"
        ) as pool:
            futures = [
                pool.submit(
                    self.run_one, prompts[i], version=version, sampling=_one_turn(sampling, row), tools_kwargs=kwargs[i]
                )
                for row, (i, _) in enumerate(jobs)
            ]
            return [f.result() for f in futures]

    def run_one(
        self,
        prompt_ids: Sequence[int],
        *,
        version: int,
        sampling: Any,
        tools_kwargs: Optional[Mapping[str, Any]] = None,
    ) -> Trajectory:
        traj = Trajectory(list(map(int, prompt_ids)))
        per_tool = {name: dict((tools_kwargs or {}).get(name) or {}) for name in self.tools}
        instances: dict[str, str] = {}
        try:
            for name, tool in self.tools.items():
                instances[name] = call_tool(tool.create, None, **per_tool[name].get("create_kwargs", {}))
            self._turns(traj, version, sampling, instances, per_tool)
            for name, tool in self.tools.items():
                traj.tool_rewards[name] = float(
                    call_tool(tool.calc_reward, instances[name], **per_tool[name].get("calc_reward_kwargs", {})) or 0.0
                )
        finally:
            for name, instance in instances.items():
                call_tool(self.tools[name].release, instance, **per_tool[name].get("release_kwargs", {}))
        return traj

    def _turns(
        self,
        traj: Trajectory,
        version: int,
        sampling: Any,
        instances: Mapping[str, str],
        per_tool: Mapping[str, Mapping[str, Any]],
    ) -> None:
        limits = self.limits
        while True:
            remaining = limits.response_length - len(traj.response_ids)
            if remaining <= 0:
                traj.finish_reason = "length"
                return
            turn_sampling = dataclasses.replace(sampling, max_tokens=remaining)
            [sample] = self.client.generate(
                [traj.prompt_ids + traj.response_ids], expect_version=version, sampling=turn_sampling
            )
            traj.add_model_tokens(sample.response_token_ids, sample.logprobs)
            traj.assistant_turns += 1
            text = self.tokenizer.decode(sample.response_token_ids, skip_special_tokens=True)
            traj.turns.append({"role": "assistant", "content": text})
            traj.finish_reason = sample.finish_reason
            if sample.finish_reason != "stop":  # cut by the budget, or aborted: nothing to act on
                return
            calls = parse_tool_calls(text, limits.format)
            if not calls:
                return
            if limits.max_assistant_turns is not None and traj.assistant_turns >= limits.max_assistant_turns:
                traj.finish_reason = "max_assistant_turns"
                return
            if limits.max_user_turns is not None and traj.tool_turns >= limits.max_user_turns:
                traj.finish_reason = "max_user_turns"
                return
            results = self.runner.run(
                calls, instances, {name: kw.get("execute_kwargs", {}) for name, kw in per_tool.items()}
            )
            traj.tool_turns += 1
            traj.tool_calls += len(calls)
            for r in results:
                if r.error:
                    traj.tool_errors[r.error] = traj.tool_errors.get(r.error, 0) + 1
            messages = [{"role": "tool", "content": r.content} for r in results]
            traj.turns += messages
            glue = self.glue.after_turn(sample.response_token_ids[-1], messages)
            if len(glue) >= limits.response_length - len(traj.response_ids):
                # no room for the results and a model token after them: end here, the results unseen
                traj.finish_reason = "length"
                return
            traj.add_context_tokens(glue)


def _one_turn(sampling: Any, row: int) -> Any:
    """One sample per call (each trajectory is its own conversation); a fixed seed differs per trajectory."""
    seed = None if sampling.seed is None else sampling.seed + row
    return dataclasses.replace(sampling, n=1, seed=seed)
