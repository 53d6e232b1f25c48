"""Greedy validation's metrics: the mean reward per data source and overall, and the mean of each numeric extra field
a reward function returns (e.g. the arithmetic reward's `acc` and `formatted`), from a stand-in rollout and scorer."""

from types import SimpleNamespace

from app.agents.rollout import AgentRollout
from app.agents.trajectory import Trajectory
from app.trainer.collectives import RankGroup
from app.trainer.validation import validate


class _OneRank:
    dp_rank, dp_world_size = 0, 1

    def all_reduce(self, tensor, op="sum"):
        return tensor.clone()


class _EchoRollout:
    """Answers prompt i with the single token i (validation draws one sample per prompt)."""

    def generate(self, prompt_ids, *, validation, expect_version):
        assert validation and expect_version == 3
        return [SimpleNamespace(prompt_index=i, response_token_ids=[i] * (i + 1)) for i in range(len(prompt_ids))]


class _Tokenizer:
    def batch_decode(self, ids, skip_special_tokens):
        return [str(seq[0]) for seq in ids]

    def decode(self, ids, skip_special_tokens):
        return "+".join(map(str, ids))


class _TableScorer:
    """Scores from a table keyed by response text; the "math" source returns dicts with `acc` and a text `pred`."""

    def __init__(self, table):
        self.table = table

    def score(self, texts, sources, truths, infos, messages):
        rows = [self.table[t] for t in texts]
        keys = sorted({k for _, extra in rows for k in extra})
        return [s for s, _ in rows], {}, {k: [extra.get(k) for _, extra in rows] for k in keys}


def _record(source, prompt_ids=(1, 2)):
    return SimpleNamespace(
        prompt_ids=list(prompt_ids), data_source=source, ground_truth="1", extra_info={}, messages=[]
    )


def test_means_per_source_and_of_numeric_extra_fields():
    dataset = [_record("math"), _record("math"), _record("math"), _record("yes")]
    scorer = _TableScorer(
        {
            "0": (1.0, {"acc": 1.0, "pred": "4"}),
            "1": (0.1, {"acc": 0.0, "pred": "5"}),
            "2": (0.5, {"acc": True, "pred": "6"}),  # a bool field counts as 1
            "3": (0.0, {}),  # the "yes" source's function returns a plain number
        }
    )
    out, samples = validate(_EchoRollout(), scorer, _Tokenizer(), dataset, RankGroup(_OneRank()), version=3)
    assert samples == []  # none asked for
    assert out == {
        "val-core/math/reward/mean": (1.0 + 0.1 + 0.5) / 3,
        "val-core/yes/reward/mean": 0.0,
        "val-core/reward/mean": 1.6 / 4,
        "val-aux/response_length/mean": (1 + 2 + 3 + 4) / 4,  # response i has i + 1 tokens
        "val-aux/math/acc/mean": 2 / 3,  # `pred` is text: not averaged
    }


def test_validation_data_dir_holds_every_sample_with_the_rewards_fields(tmp_path):
    # verl's trainer.validation_data_dir: each rank writes its samples, one line each, for the step
    import json

    dataset = [_record("math", prompt_ids=(5, 6)), _record("yes")]
    scorer = _TableScorer({"0": (1.0, {"acc": 1.0, "pred": "4"}), "1": (0.0, {})})
    one_rank = RankGroup(_OneRank())
    validate(_EchoRollout(), scorer, _Tokenizer(), dataset, one_rank, version=3, dump_dir=str(tmp_path), step=10)
    rows = [json.loads(line) for line in (tmp_path / "10-rank0.jsonl").read_text().splitlines()]
    assert rows == [
        {
            "step": 10,
            "index": 0,
            "data_source": "math",
            "input": "5+6",
            "output": "0",
            "ground_truth": "1",
            "score": 1.0,
            "acc": 1.0,
            "pred": "4",
        },
        # the "yes" source returned no fields: its sample carries the keys other samples had, as None
        {
            "step": 10,
            "index": 1,
            "data_source": "yes",
            "input": "1+2",
            "output": "1",
            "ground_truth": "1",
            "score": 0.0,
            "acc": None,
            "pred": None,
        },
    ]


def test_kept_samples_are_the_same_seeded_prompts_at_every_validation_in_dataset_order():
    dataset = [_record("math", prompt_ids=(i, i)) for i in range(10)]
    scorer = _TableScorer({str(i): (i / 10, {}) for i in range(10)})

    def run(keep):
        return validate(
            _EchoRollout(), scorer, _Tokenizer(), dataset, RankGroup(_OneRank()), version=3, keep_samples=keep
        )[1]

    rows = run(3)
    assert len(rows) == 3 and rows == run(3)  # a fixed draw: the table follows the same prompts over steps
    for row in rows:  # prompt i is "i+i"; the rollout answers it "i", which the table scores i / 10
        i = int(row["output"])
        assert row == {
            "data_source": "math",
            "input": f"{i}+{i}",
            "output": str(i),
            "ground_truth": "1",
            "score": i / 10,
        }
    indices = [int(row["output"]) for row in rows]
    assert indices == sorted(indices) and indices != [0, 1, 2]  # validation-set order, not just the first three
    assert len(run(50)) == 10  # more than the set holds: all of it


class _AgentStandIn(AgentRollout):
    """Validation's multi-turn path: trajectories with known counts (one per prompt), the model's tokens masked in."""

    def __init__(self, trajectories):
        self.trajs = trajectories

    def trajectories(self, prompt_ids, *, expect_version, validation, extra_infos, prompt_messages):
        assert validation and expect_version == 3 and len(prompt_ids) == len(self.trajs)
        return self.trajs


def _traj(answer_token, assistant_turns, tool_calls, tool_calls_ok, tool_errors):
    t = Trajectory([1, 2], assistant_turns=assistant_turns, tool_calls=tool_calls, tool_calls_ok=tool_calls_ok)
    t.tool_errors = tool_errors
    t.add_context_tokens([99])  # a tool result: not part of the decoded answer
    t.add_model_tokens([answer_token], [0.0])
    return t


def test_multi_turn_validation_means_turns_calls_errors_and_the_share_of_clean_tool_use():
    trajs = [
        _traj(0, assistant_turns=2, tool_calls=1, tool_calls_ok=1, tool_errors={}),  # one good call: ok
        _traj(1, assistant_turns=3, tool_calls=2, tool_calls_ok=1, tool_errors={"bad_call": 1}),  # one bad: not ok
        _traj(2, assistant_turns=2, tool_calls=1, tool_calls_ok=0, tool_errors={}),  # the tool said "Error": not ok
        _traj(3, assistant_turns=1, tool_calls=0, tool_calls_ok=0, tool_errors={}),  # no call: not ok
    ]
    scorer = _TableScorer({str(i): (float(i == 0), {}) for i in range(4)})
    dataset = [_record("calc") for _ in range(4)]
    out, _ = validate(_AgentStandIn(trajs), scorer, _Tokenizer(), dataset, RankGroup(_OneRank()), version=3)
    assert out == {
        "val-core/calc/reward/mean": 1 / 4,  # the answer scores, not the calls
        "val-core/reward/mean": 1 / 4,
        "val-aux/response_length/mean": 1.0,  # the model's own tokens only
        "val-aux/multi_turn/assistant_turns/mean": (2 + 3 + 2 + 1) / 4,
        "val-aux/multi_turn/tool_calls/mean": (1 + 2 + 1 + 0) / 4,
        "val-aux/multi_turn/tool_errors/mean": 1 / 4,
        "val-aux/multi_turn/tool_call_ok/mean": 1 / 4,  # only the first called cleanly
    }


def test_the_free_heap_goes_back_before_the_replicas_generate(monkeypatch):
    # the trainer idles through a validation holding its last update's high-water mark; handed back first, it does not
    # add to the replicas' own peak (docs/performance.md)
    events = []
    monkeypatch.setattr("app.trainer.validation.release_free_heap", lambda: events.append("heap released"))

    class _RecordingRollout(_EchoRollout):
        def generate(self, prompt_ids, *, validation, expect_version):
            events.append("generate")
            return super().generate(prompt_ids, validation=validation, expect_version=expect_version)

    scorer = _TableScorer({"0": (1.0, {})})
    validate(_RecordingRollout(), scorer, _Tokenizer(), [_record("math")], RankGroup(_OneRank()), version=3)
    assert events == ["heap released", "generate"]
