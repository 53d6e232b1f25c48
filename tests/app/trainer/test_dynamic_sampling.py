"""DAPO dynamic sampling (algorithm.filter_groups) and overlong shaping in the loop.

The unit tests drive `fill_with_informative_groups` with scripted rounds; the loop tests run the real trainer (tiny
model, one rank, in this process) against a scripted rollout stand-in whose responses say "yes" or "no", scored by
tests/app/trainer/yes_reward.py, so every group's scores are known in advance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from yes_no_rollout import YesNoRollout

from app.trainer.dynamic_sampling import fill_with_informative_groups, filter_metric, informative_rounds
from app.trainer.rollout_batch import RolloutGroup, build_rollout_batch, concat_groups

PAD = 0


def scored_group(tag: str, scores_per_group: list[list[float]], prompt_len: int, response_len: int) -> RolloutGroup:
    """One round: a group per entry of `scores_per_group`, prompts of `prompt_len` and responses of `response_len`
    tokens whose ids encode (group, sample) so rows can be recognised after re-padding."""
    prompts, responses, uid, scores = [], [], [], []
    for g, group_scores in enumerate(scores_per_group):
        for s, score in enumerate(group_scores):
            prompts.append([100 + g] * prompt_len)
            responses.append([200 + 10 * g + s] * response_len)
            uid.append(f"{tag}{g}")
            scores.append(score)
    rows = len(uid)
    batch = build_rollout_batch(prompts, responses, [[-0.5] * response_len] * rows, PAD)
    batch["token_level_scores"] = torch.zeros(rows, response_len)
    batch["token_level_scores"][:, -1] = torch.tensor(scores)
    return RolloutGroup(
        batch=batch,
        uid=uid,
        dataset_index=list(range(rows)),
        data_source=["t"] * rows,
        ground_truth=["1"] * rows,
        extra_info=[{}] * rows,
        messages=[[]] * rows,
        finish_reason=["stop"] * rows,
        policy_version=3,
        extras={"task_score": scores},
    )


def scripted_rounds(rounds: list[RolloutGroup]):
    it = iter(rounds)
    return lambda: (next(it), {"reward/score/mean": 0.5})


def fill(rounds, groups_needed, max_rounds):
    return fill_with_informative_groups(
        scripted_rounds(rounds),
        lambda g: filter_metric(g, "score"),
        groups_needed,
        max_rounds,
        global_min=lambda k: k,
        pad_token_id=PAD,
    )


def test_rounds_continue_until_the_batch_holds_only_mixed_groups():
    first = scored_group("a", [[1, 0], [0, 0], [1, 1], [0, 1]], prompt_len=3, response_len=2)  # a0, a3 mixed
    second = scored_group("b", [[0, 0], [1, 0], [0, 1], [1, 0]], prompt_len=5, response_len=4)  # b1, b2, b3 mixed
    group, metrics, counts = fill([first, second, None], groups_needed=3, max_rounds=0)
    assert list(dict.fromkeys(group.uid)) == ["a0", "a3", "b1"]  # b2, b3 were more than the batch needs
    assert counts == {"rounds": 2, "generated": 8, "kept": 3, "dropped": 3, "padded": 0}
    assert metrics == {"reward/score/mean": 0.5}
    scores = group.batch["token_level_scores"].sum(dim=1).tolist()
    assert scores == [1, 0, 0, 1, 1, 0]
    # re-padded to the widest prompt (5) and response (4): each row still holds its own tokens
    assert group.batch["input_ids"].shape == (6, 9)
    resp_mask = group.batch["response_mask"]
    assert resp_mask.sum(dim=1).tolist() == [2, 2, 2, 2, 4, 4]
    assert group.batch["responses"][0].tolist() == [200, 200, PAD, PAD]
    assert group.batch["input_ids"][0].tolist() == [PAD, PAD, 100, 100, 100, 200, 200, PAD, PAD]
    assert group.batch["attention_mask"][0].tolist() == [0, 0, 1, 1, 1, 1, 1, 0, 0]
    assert group.batch["position_ids"][0].tolist()[2:7] == [0, 1, 2, 3, 4]
    assert group.batch["input_ids"][4].tolist() == [101] * 5 + [210] * 4  # b1, sample 0: 200 + 10*1 + 0
    assert group.extras["task_score"] == [1, 0, 0, 1, 1, 0]


def test_when_rounds_run_out_uninformative_groups_fill_the_batch_and_are_counted():
    only = scored_group("a", [[0, 0], [1, 0], [1, 1]], prompt_len=2, response_len=2)
    group, _, counts = fill([only], groups_needed=3, max_rounds=1)
    assert list(dict.fromkeys(group.uid)) == ["a1", "a0", "a2"]  # the informative group first
    assert counts == {"rounds": 1, "generated": 3, "kept": 1, "dropped": 2, "padded": 2}


def test_the_round_loop_picks_groups_from_any_kind_of_round():
    # a round here is its {group id: informative} itself; the bench's rounds are lists, the trainer's RolloutGroups
    def loop(rounds, groups_needed, max_rounds):
        it = iter(rounds)
        return informative_rounds(lambda: next(it), lambda r: r, groups_needed, max_rounds, global_min=lambda k: k)

    drawn, picks, counts = loop([{"a": False, "b": True}, {"c": True, "d": True}, None], 2, 0)
    assert picks == [(0, "b"), (1, "c")] and len(drawn) == 2  # d: more than the batch needs
    assert counts == {"rounds": 2, "generated": 4, "kept": 2, "dropped": 1, "padded": 0}
    # out of rounds: alike groups fill the batch after the informative ones, each in the order drawn
    _, picks, counts = loop([{"a": False, "b": True}, {"c": False, "d": False}], 3, 2)
    assert picks == [(0, "b"), (0, "a"), (1, "c")] and counts["padded"] == 2
    with pytest.raises(RuntimeError, match="2 groups generated in 1 rounds, fewer than the 3"):
        loop([{"a": False, "b": False}], 3, 1)


def test_all_ranks_run_the_same_number_of_rounds():
    # this rank is full after one round, but another rank is not: it keeps generating (and keeping nothing more)
    rounds = [scored_group(t, [[1, 0], [0, 1]], 2, 2) for t in "ab"]
    others = iter([1, 2])
    group, _, counts = fill_with_informative_groups(
        scripted_rounds(rounds),
        lambda g: filter_metric(g, "score"),
        2,
        0,
        global_min=lambda k: min(k, next(others)),
        pad_token_id=PAD,
    )
    assert counts["rounds"] == 2 and list(dict.fromkeys(group.uid)) == ["a0", "a1"]


def test_groups_of_different_policy_versions_never_share_a_batch():
    a, b = scored_group("a", [[1, 0]], 2, 2), scored_group("b", [[1, 0]], 2, 2)
    b.policy_version = 4
    with pytest.raises(ValueError, match="policy versions"):
        concat_groups([a, b], PAD)


def test_acc_metric_needs_the_reward_to_report_it():
    group = scored_group("a", [[1, 0]], 2, 2)
    with pytest.raises(RuntimeError, match="filter_groups.metric=acc"):
        filter_metric(group, "acc")
    group.extras["acc"] = [True, False]
    assert filter_metric(group, "acc").tolist() == [1.0, 0.0]


# ---------------------------------------------------------------------------------------------- in the real loop
@pytest.fixture(scope="module")
def arith_data(tmp_path_factory) -> Path:
    from app.prepare import main as prepare

    out = tmp_path_factory.mktemp("arith-dynamic")
    assert prepare(["arithmetic", "--output", str(out), "--train-size", "16", "--test-size", "2", "--seed", "3"]) == 0
    return out


def run_loop(compose, tiny_model_dir, arith_data, out: Path, extra: list[str]):
    from transformers import AutoTokenizer

    from app.trainer.setup import build_trainer

    cfg = compose(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={arith_data / 'train.parquet'}",
            "data.val_files=''",
            "data.max_prompt_length=256",
            "data.max_response_length=8",
            "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=3",
            "trainer.num_workers=1",
            "actor_rollout_ref.actor.use_kl_loss=false",
            f"custom_reward_function.path={Path(__file__).with_name('yes_reward.py')}",
            "reward_model.num_workers=0",
            "trainer.total_training_steps=2",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={out}",
            f"trainer.rollout_data_dir={out / 'rollouts'}",
            *extra,
        ]
    )
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    yes_id, no_id = (tok.encode(w, add_special_tokens=False)[0] for w in (" yes", " no"))
    rollout = YesNoRollout(yes_id, no_id, n=3, long_len=8)
    build_trainer(cfg, rollout, device="cpu").fit()
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    dumps = {
        int(p.name.split("-")[0]): [json.loads(x) for x in p.read_text().splitlines()]
        for p in (out / "rollouts").glob("*.jsonl")
    }
    return rollout, [m for m in metrics if m.get("step", 0) >= 1], dumps


def test_filtering_trains_only_on_mixed_groups_and_fills_the_batch(compose, tiny_model_dir, arith_data, tmp_path):
    rollout, steps, dumps = run_loop(
        compose, tiny_model_dir, arith_data, tmp_path / "run", ["algorithm.filter_groups.enable=true"]
    )
    # each round of 2 prompts yields one mixed and one all-"no" group: two rounds fill a batch of 2, per step
    assert rollout.train_calls == 4
    for m in steps:
        assert m["train/num_gen_batches"] == 2
        assert (
            m["filter_groups/generated_groups"],
            m["filter_groups/kept_groups"],
            m["filter_groups/dropped_groups"],
            m["filter_groups/padded_groups"],
        ) == (4, 2, 2, 0)
        assert m["critic/score/mean"] == pytest.approx(1 / 3)  # one "yes" in every kept group of 3
    for step, rows in dumps.items():
        by_uid: dict[str, list[float]] = {}
        for r in rows:
            by_uid.setdefault(r["uid"], []).append(r["score"])
        assert len(by_uid) == 2 and all(sorted(s) == [0.0, 0.0, 1.0] for s in by_uid.values()), (step, by_uid)


def test_without_filtering_one_round_per_step_keeps_uninformative_groups(compose, tiny_model_dir, arith_data, tmp_path):
    rollout, steps, dumps = run_loop(compose, tiny_model_dir, arith_data, tmp_path / "run", [])
    assert rollout.train_calls == 2
    assert all("filter_groups/kept_groups" not in m for m in steps)
    assert all(sorted(r["score"] for r in rows) == [0.0] * 5 + [1.0] for rows in dumps.values())


def test_overlong_shaping_lowers_the_training_score_of_long_answers(compose, tiny_model_dir, arith_data, tmp_path):
    # budget 8, buffer 4: the 8-token "yes" answers lose the whole factor 0.5, the 1-token "no" answers nothing
    rollout, steps, dumps = run_loop(
        compose,
        tiny_model_dir,
        arith_data,
        tmp_path / "run",
        [
            "reward_model.overlong_buffer.enable=true",
            "reward_model.overlong_buffer.len=4",
            "reward_model.overlong_buffer.penalty_factor=0.5",
            "reward_model.overlong_buffer.log=true",
        ],
    )
    for rows in dumps.values():
        for r in rows:
            long = "yes" in r["response"]
            assert r["overlong_penalty"] == (-0.5 if long else 0.0)
            assert r["score"] == pytest.approx(0.5 if long else 0.0)  # 1 - 0.5 for "yes", 0 for "no"
    for m in steps:
        assert m["reward/overlong_ratio"] == pytest.approx(1 / 6)
        assert m["reward/overlong_penalty/mean"] == pytest.approx(-0.5 / 6)
        assert m["critic/score/mean"] == pytest.approx(0.5 / 6)


def test_rounds_take_gen_batch_size_prompts(compose, tiny_model_dir, arith_data, tmp_path):
    # 4 prompts a round hold 2 mixed groups: one round fills a batch of 2, so a step makes one generate call
    rollout, steps, _ = run_loop(
        compose,
        tiny_model_dir,
        arith_data,
        tmp_path / "run",
        ["algorithm.filter_groups.enable=true", "data.gen_batch_size=4"],
    )
    assert rollout.train_calls == 2
    for m in steps:
        assert m["train/num_gen_batches"] == 1
        assert (
            m["filter_groups/generated_groups"],
            m["filter_groups/kept_groups"],
            m["filter_groups/dropped_groups"],
        ) == (4, 2, 2)
