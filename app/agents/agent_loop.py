"""The multi-turn rollout: per trajectory, generate one turn -> parse its tool calls -> run them -> append the results
with the chat template -> generate again. A turn without a tool call ends the trajectory, unless an interaction is
configured: then it answers as the user (appended the same way) and the policy writes again, until the interaction
ends the episode. Turn limits and the token budget (`rollout.response_length` covers the whole trajectory after the
prompt) end it too. The trajectories of a batch run concurrently, so the rollout engine batches their turns; every
turn asks for the same policy version."""

from __future__ import annotations

import concurrent.futures
import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from app.agents.chat_glue import ChatGlue
from app.agents.interaction_base import BaseInteraction
from app.agents.interaction_config import KEY as INTERACTION_KEY
from app.agents.tool_base import BaseTool, call_tool
from app.agents.tool_calls import MARKERS, parse_tool_calls
from app.agents.tool_runner import ToolRunner
from app.agents.trajectory import Trajectory


@dataclass(frozen=True)
class AgentLoopLimits:
    response_length: int  # token budget after the prompt: model tokens, tool results and glue together
    max_assistant_turns: Optional[int] = None  # None: only the budget limits the turns
    max_user_turns: Optional[int] = None  # tool-result and interaction turns count as user turns, as in verl
    format: str = "hermes"  # one of tool_calls.FORMATS
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


@dataclass(frozen=True)
class _Session:
    """One trajectory's interaction: the object, its instance id and the row's `interaction_kwargs`."""

    interaction: BaseInteraction
    instance_id: str
    kwargs: Mapping[str, Any]


class AgentLoop:
    """`client`: anything with the rollout client's `generate(prompt_token_ids, *, expect_version, sampling)`.
    `interactions`: {name: interaction}, the first the default; empty: a turn without a tool call ends the trajectory.
    """

    def __init__(
        self,
        client: Any,
        tokenizer: Any,
        tools: Mapping[str, BaseTool],
        runner: ToolRunner,
        limits: AgentLoopLimits,
        interactions: Optional[Mapping[str, BaseInteraction]] = None,
        template_kwargs: Optional[Mapping[str, Any]] = None,
    ):
        self.client = client
        self.tokenizer = tokenizer
        self.tools = dict(tools)
        self.runner = runner
        self.limits = limits
        self.interactions = dict(interactions or {})
        self.glue = ChatGlue(tokenizer, template_kwargs)
        marker = MARKERS[limits.format]
        # the format's marker as one token of this vocabulary (None: absent, or written as plain text)
        self.marker_id = tokenizer.get_vocab().get(marker) if marker else None

    def run(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        version: int,
        sampling: Any,
        tools_kwargs: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
        interaction_kwargs: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
        prompt_messages: Optional[Sequence[Sequence[Mapping[str, Any]]]] = None,
    ) -> list[Trajectory]:
        """`sampling.n` trajectories per prompt, prompt-major (prompt i's are rows i*n .. i*n+n-1).

        Per prompt i, from the row (None: nothing): `tools_kwargs[i]`, verl's {tool name: {create_kwargs,
        execute_kwargs, calc_reward_kwargs, release_kwargs}}; `interaction_kwargs[i]`, verl's {name, ...} for the
        interaction; `prompt_messages[i]`, the prompt's chat messages, which the interaction sees first."""
        n = sampling.n
        jobs = [(i, j) for i in range(len(prompts)) for j in range(n)]
        none = [None] * len(prompts)
        kwargs = list(tools_kwargs) if tools_kwargs is not None else none
        inter = list(interaction_kwargs) if interaction_kwargs is not None else none
        messages = list(prompt_messages) if prompt_messages is not None else none
        with concurrent.futures.ThreadPoolExecutor(
            max_workers=min(len(jobs), self.limits.max_concurrency) or 1, thread_name_prefix="agent-loop"
        ) as pool:
            futures = [
                pool.submit(
                    self.run_one,
                    prompts[i],
                    version=version,
                    sampling=_one_turn(sampling, row),
                    tools_kwargs=kwargs[i],
                    interaction_kwargs=inter[i],
                    prompt_messages=messages[i],
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
        interaction_kwargs: Optional[Mapping[str, Any]] = None,
        prompt_messages: Optional[Sequence[Mapping[str, Any]]] = None,
    ) -> Trajectory:
        traj = Trajectory(list(map(int, prompt_ids)))
        per_tool = {name: dict((tools_kwargs or {}).get(name) or {}) for name in self.tools}
        instances: dict[str, str] = {}
        session = None
        try:
            for name, tool in self.tools.items():
                instances[name] = call_tool(tool.create, None, **per_tool[name].get("create_kwargs", {}))
            if self.interactions:
                interaction, kwargs = self._interaction_for(interaction_kwargs)
                session = _Session(interaction, call_tool(interaction.start_interaction, None, **kwargs), kwargs)
            self._turns(traj, version, sampling, instances, per_tool, session, list(prompt_messages or []))
            for name, tool in self.tools.items():
                traj.tool_rewards[name] = float(
                    call_tool(tool.calc_reward, instances[name], **per_tool[name].get("calc_reward_kwargs", {})) or 0.0
                )
            if session is not None:
                traj.interaction_score = float(
                    call_tool(session.interaction.calculate_score, session.instance_id) or 0.0
                )
        finally:
            for name, instance in instances.items():
                call_tool(self.tools[name].release, instance, **per_tool[name].get("release_kwargs", {}))
            if session is not None:
                call_tool(session.interaction.finalize_interaction, session.instance_id)
        return traj

    def _interaction_for(self, kwargs: Optional[Mapping[str, Any]]) -> tuple[BaseInteraction, dict[str, Any]]:
        """verl's choice: the interaction `kwargs["name"]` names, else the first configured; with the row's kwargs."""
        kwargs = dict(kwargs or {})
        name = kwargs.get("name") or next(iter(self.interactions))
        if name not in self.interactions:
            raise ValueError(
                f"extra_info['interaction_kwargs']['name']={name!r}: no such interaction in {INTERACTION_KEY} "
                f"(it has {list(self.interactions)})"
            )
        return self.interactions[name], kwargs

    def _turns(
        self,
        traj: Trajectory,
        version: int,
        sampling: Any,
        instances: Mapping[str, str],
        per_tool: Mapping[str, Mapping[str, Any]],
        session: Optional[_Session],
        prompt_messages: list[Mapping[str, Any]],
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
            calls = parse_tool_calls(self._call_text(sample.response_token_ids, text), limits.format)
            if not calls and session is None:
                return
            if limits.max_assistant_turns is not None and traj.assistant_turns >= limits.max_assistant_turns:
                traj.finish_reason = "max_assistant_turns"
                return
            if limits.max_user_turns is not None and traj.user_turns >= limits.max_user_turns:
                traj.finish_reason = "max_user_turns"
                return
            if calls:
                messages = self._run_tools(traj, calls, instances, per_tool)
            else:
                messages = self._interact(traj, session, prompt_messages)
                if not messages:  # the interaction ended the episode: its last words are for the reward only
                    return
            glue = self.glue.after_turn(sample.response_token_ids[-1], messages)
            if len(glue) >= limits.response_length - len(traj.response_ids):
                # no room for the results and a model token after them: end here, the results unseen
                traj.finish_reason = "length"
                return
            traj.add_context_tokens(glue)

    def _call_text(self, ids: Sequence[int], text: str) -> str:
        """The turn as the call parser reads it: `text` (special tokens skipped), but with the format's marker kept
        where the model wrote it as a special token (Llama's `<|python_tag|>`, Mistral's `[TOOL_CALLS]`)."""
        if self.marker_id is None or self.marker_id not in ids:
            return text
        segments, current = [], []
        for token in ids:
            if token == self.marker_id:
                segments.append(current)
                current = []
            else:
                current.append(token)
        segments.append(current)
        marker = MARKERS[self.limits.format]
        return marker.join(self.tokenizer.decode(s, skip_special_tokens=True) for s in segments)

    def _run_tools(
        self,
        traj: Trajectory,
        calls: list,
        instances: Mapping[str, str],
        per_tool: Mapping[str, Mapping[str, Any]],
    ) -> list[dict[str, Any]]:
        results = self.runner.run(
            calls, instances, {name: kw.get("execute_kwargs", {}) for name, kw in per_tool.items()}
        )
        traj.tool_turns += 1
        traj.tool_calls += len(calls)
        for r in results:
            if r.error:
                traj.tool_errors[r.error] = traj.tool_errors.get(r.error, 0) + 1
            elif not r.metrics.get("error"):  # a tool reports a bad argument in its metrics (the calculator does)
                traj.tool_calls_ok += 1
        messages = [{"role": "tool", "content": r.content} for r in results]
        traj.turns += messages
        return messages

    def _interact(
        self, traj: Trajectory, session: _Session, prompt_messages: list[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """The interaction's user message after the latest assistant turn; [] when it ends the episode (the message
        is kept in `traj.turns`, not in the tokens: a trajectory ends on the model's own tokens, where its score sits).
        """
        conversation = [dict(m) for m in prompt_messages] + [dict(m) for m in traj.turns]
        reply = call_tool(session.interaction.generate_response, session.instance_id, conversation, **session.kwargs)
        if not isinstance(reply, tuple) or len(reply) != 4:
            raise ValueError(
                f"{type(session.interaction).__name__}.generate_response returned {reply!r}; it must return "
                "(should_terminate_sequence, response_content, current_turn_score, additional_data)"
            )
        done, content, score, _ = reply  # additional_data is not used
        traj.interaction_turns += 1
        if score is not None:
            traj.turn_scores.append(float(score))
        message = {"role": "user", "content": "" if content is None else str(content)}
        traj.turns.append(message)
        return [] if done else [message]


def _one_turn(sampling: Any, row: int) -> Any:
    """One sample per call (each trajectory is its own conversation); a fixed seed differs per trajectory."""
    seed = None if sampling.seed is None else sampling.seed + row
    return dataclasses.replace(sampling, n=1, seed=seed)
