"""bench/recipe_screen.py: the quickstart's step in one process, over settings and seeds."""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import recipe_screen  # noqa: E402
from recipe_screen import (  # noqa: E402
    compose_setting,
    main,
    parse_setting,
    recipe_from_config,
    step_lr,
    summary_table,
)


def test_the_recipe_is_read_from_the_config_with_a_settings_overrides():
    base = recipe_from_config(compose_setting("quickstart", []))
    assert (base.prompts_per_step, base.n, base.temperature, base.max_response_length) == (4, 8, 0.7, 48)
    assert base.loss_agg_mode == "seq-mean-token-sum-norm" and base.loss_scale_factor == 48  # the response budget
    assert base.imitation_coef == 1.0 and not base.use_kl_loss and not base.norm_adv_by_std  # configs/quickstart.yaml
    kl = recipe_from_config(
        compose_setting("quickstart", parse_setting("kl=actor_rollout_ref.actor.use_kl_loss=true")[1])
    )
    assert kl.use_kl_loss and kl.kl_loss_coef == 0.01  # configs/grpo_trainer.yaml's coefficient


def test_the_warm_up_follows_the_engines_schedule():
    from app.engine.lr_schedule import lr_factor
    from tests.support import optim_spec

    base = recipe_from_config(compose_setting("quickstart", []))
    assert base.lr_warmup_steps == 2  # configs/quickstart.yaml
    # lr 0 at step 1, half at step 2, then the peak: the engine's factor after step - 1 scheduler steps
    assert [step_lr(base, step) for step in (1, 2, 3, 20)] == [0.0, base.lr / 2, base.lr, base.lr]
    spec = optim_spec(lr=base.lr, lr_warmup_steps=2)
    assert [step_lr(base, step) for step in range(1, 6)] == [base.lr * lr_factor(s - 1, spec) for s in range(1, 6)]
    none = recipe_from_config(compose_setting("quickstart", ["actor_rollout_ref.actor.optim.lr_warmup_steps=-1"]))
    assert step_lr(none, 1) == base.lr


def test_a_step_the_bench_does_not_run_is_refused_by_its_key(tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n")
    refused = {
        "actor_rollout_ref.actor.ppo_mini_batch_size=2": "ppo_mini_batch_size=2 is not data.train_batch_size",
        "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine": "has a decay or a warm-up ratio",
        f"custom_reward_function.path={reward}": "custom_reward_function.path is set",
        "algorithm.filter_groups.metric=seq_reward": "filter_groups.metric=seq_reward",
        "data.gen_batch_size=8": "data.gen_batch_size=8",
    }
    for override, message in refused.items():
        with pytest.raises(SystemExit, match=message):
            recipe_from_config(compose_setting("quickstart", [override]))
    with pytest.raises(SystemExit, match="NAME=OVERRIDES"):
        parse_setting("no-equals-sign")


class ScriptedRunner(recipe_screen.Runner):
    """A Runner whose answers are each prompt's id and round, and whose groups score unlike exactly for the
    (round, prompt) pairs in `unlike`, and differ in `acc` exactly for those in `acc_unlike`."""

    def __init__(self, unlike: set[tuple[int, int]], prompts: int, acc_unlike: frozenset = frozenset()):
        self.train = [recipe_screen.Prompt(ids=[p], ground_truth="0", level=1) for p in range(prompts)]
        self.unlike, self.acc_unlike, self.round = unlike, acc_unlike, 0

    def generate(self, model, prompts, recipe, greedy):
        self.round += 1
        return [[p[0], self.round] for p in prompts]

    def score(self, answers, prompts):
        scores, seen = [], {}
        for answer in answers:
            rank = seen[answer[0]] = seen.get(answer[0], -1) + 1  # the answer's place in its group
            unlike = (answer[1], answer[0]) in self.unlike
            acc_unlike = (answer[1], answer[0]) in self.acc_unlike
            scores.append({"score": float(rank == 0) if unlike else 0.5, "acc": rank == 0 and acc_unlike})
        return scores


def test_dynamic_sampling_draws_rounds_until_the_groups_score_unlike():
    # the quickstart's shape: 4 prompts of 8 answers, dynamic sampling on `score`, at most 4 rounds
    recipe = recipe_from_config(compose_setting("quickstart", []))
    assert (recipe.prompts_per_step, recipe.n, recipe.filter_groups, recipe.max_gen_batches) == (4, 8, True, 4)
    # round 1 (prompts 0-3): prompts 1 and 3 score unlike; round 2 (prompts 4-7): 4, 5 and 6 do
    unlike = {(1, 1), (1, 3), (2, 4), (2, 5), (2, 6)}

    def drawn(runner, recipe):
        order = iter(range(12))
        take = lambda k: [next(order) for _ in range(k)]  # noqa: E731  (prompts 0, 1, 2, ... in turn)
        prompts, answers, scores, rounds, indices = runner.sample_batch(None, recipe, take, 1, 1)
        assert len(prompts) == len(answers) == len(scores) == len(indices) == 4 * 8
        assert [p.ids[0] for p in prompts] == [a[0] for a in answers] == indices  # prompts, answers, indices paired
        return [a[0] for a in answers[::8]], rounds

    # informative groups in the order drawn, the surplus (prompt 6) left out, as the trainer's dynamic sampling
    assert drawn(ScriptedRunner(unlike, 12), recipe) == ([1, 3, 4, 5], 2)
    # out of rounds: the informative groups first, then alike ones to fill the batch
    assert drawn(ScriptedRunner(unlike, 12), replace(recipe, max_gen_batches=1)) == ([1, 3, 0, 2], 1)
    # without it: one round, the prompts as drawn
    assert drawn(ScriptedRunner(unlike, 12), replace(recipe, filter_groups=False)) == ([0, 1, 2, 3], 1)
    # on `acc` (algorithm.filter_groups.metric=acc): groups whose answers differ in being right, here prompt 3 of
    # round 1, prompts 6 and 7 of round 2, 8 of round 3; those that differ in score only (1, 4, 5) are dropped
    on_acc = recipe_from_config(compose_setting("quickstart", ["algorithm.filter_groups.metric=acc"]))
    assert on_acc.filter_metric == "acc"
    acc_unlike = frozenset({(1, 3), (2, 6), (2, 7), (3, 8)})
    assert drawn(ScriptedRunner(unlike, 12, acc_unlike), on_acc) == ([3, 6, 7, 8], 3)


def test_prompts_come_from_the_configs_sampler_or_a_shuffled_order_of_the_seed():
    recipe = recipe_from_config(compose_setting("quickstart", []))
    assert recipe.sampler == {  # configs/quickstart.yaml's curriculum
        "class_path": "pkg://app.data.pass_rate_curriculum",
        "class_name": "PassRateCurriculum",
        "options": {"group_key": "extra_info.level", "right_score": 0.5},
    }
    train = [recipe_screen.Prompt(ids=[i], ground_truth="1", level=1 + i % 2) for i in range(12)]
    draws = recipe_screen.PromptDraws(train, recipe.sampler, seed=1)
    first = draws.take(12)
    assert sorted(first) == list(range(12))  # an epoch draws every prompt once
    # level 1 (even indices): 4 samples all right; level 2: 4 samples, one right unmarked (0.5 counts: right_score)
    draws.learn([0, 0, 2, 2, 1, 1, 3, 3], torch.tensor([1.0, 1.0, 1.0, 1.0, 0.5, 0.1, 0.0, 0.0]), [3] * 8)
    # with one right and one wrong sample as the prior: (4 + 1) / (4 + 2) and (1 + 1) / (4 + 2)
    assert draws.sampler.pass_rates().tolist() == [5 / 6, 2 / 6]
    assert len(draws.take(5)) == 5  # the next epoch begins
    shuffled = recipe_screen.PromptDraws(train, None, seed=1)
    epoch = shuffled.take(12)
    assert sorted(epoch) == list(range(12)) and epoch != list(range(12))
    assert shuffled.take(12) == epoch  # the same order each epoch
    shuffled.learn([0], torch.tensor([1.0]), [1])  # nothing to learn


def test_the_summary_counts_the_seeds_every_setting_finished():
    def run(setting, seed, before, after, formatted=1.0):
        final = {"score": after, "acc": after, "formatted": formatted}
        return {"setting": setting, "seed": seed, "curve": {"0": {"score": before}, "20": final}, "seconds": 10.0}

    rows = [run("a", 1, 0.2, 0.55), run("a", 2, 0.2, 0.45), run("b", 1, 0.2, 0.6), run("b", 2, 0.2, 0.5, formatted=0.4)]
    rows.append(run("a", 3, 0.2, 0.9))
    lines = summary_table(rows).splitlines()
    # seed 3 of "a" is left out: "b" did not reach it. "a" gains +0.35 and +0.25 (one passes; the gains' sd is
    # 0.0707, over sqrt(2): s.e. 0.050); "b" +0.40 and +0.30 (a gain of exactly +0.30 passes), and its second run
    # marked fewer than half of its answers
    assert lines[2] == "| a | 2 | 0.200 | 0.500 | +0.300 (0.050) | 1 of 2 | 2 of 2 | 0.500 | 1.000 | 10 |"
    assert lines[3] == "| b | 2 | 0.200 | 0.550 | +0.350 (0.050) | 2 of 2 | 1 of 2 | 0.550 | 0.700 | 10 |"


def test_the_summary_keeps_a_setting_in_two_precisions_apart():
    def run(seed, after, precision=None):
        row = {"setting": "a", "seed": seed, "seconds": 10.0}
        row["curve"] = {"0": {"score": 0.2}, "20": {"score": after, "acc": after, "formatted": 1.0}}
        return row | ({"precision": precision} if precision else {})

    # results written before --precision existed carry none, and read as `auto`
    rows = [run(1, 0.6), run(1, 0.4, "fp32"), run(1, 0.7, "auto")]
    lines = summary_table(rows).splitlines()
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| a", "| a (fp32)"]
    assert lines[3].split(" | ")[4] == "+0.200 (nan)"  # the fp32 run alone: 0.4 - 0.2


def test_the_precision_is_the_runs_choice(tiny_model_dir):
    """`run --precision`: bf16 autocast or none (fp32, as an AVX2 box computes); `auto` is bf16 on a GPU only."""
    assert recipe_screen.autocast_dtype("auto", "cuda") == torch.bfloat16
    assert recipe_screen.autocast_dtype("bf16", "cuda") == torch.bfloat16
    assert recipe_screen.autocast_dtype("fp32", "cuda") is None
    assert recipe_screen.autocast_dtype("auto", "cpu") is None
    assert recipe_screen.autocast_dtype("bf16", "cpu") == torch.bfloat16
    with pytest.raises(ValueError, match="'fp16'"):
        recipe_screen.autocast_dtype("fp16", "cuda")
    # the Runner's sampling and log-probs compute under its precision's autocast
    bf16 = recipe_screen.Runner(str(tiny_model_dir), "cpu", train=[], val=[], precision="bf16")
    with bf16._autocast():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    fp32 = recipe_screen.Runner(str(tiny_model_dir), "cpu", train=[], val=[], precision="fp32")
    with fp32._autocast():
        assert not torch.is_autocast_enabled("cpu")
    rows = [([5, 6, 7], [8, 9])]
    half = bf16.log_probs(bf16.base, rows, 1.0, entropy=False)["log_probs"]
    full = fp32.log_probs(fp32.base, rows, 1.0, entropy=False)["log_probs"]
    assert not torch.equal(half, full)  # bf16's rounding shows in the log-probs: the setting reached the forward


def test_a_plan_runs_end_to_end_on_a_tiny_model(tiny_model_dir, tmp_path, monkeypatch, capsys):
    from app.prepare import prepare_arithmetic

    prepare_arithmetic(str(tmp_path / "data"), train_size=16, test_size=6, seed=3)
    data = [f"data.train_files={tmp_path}/data/train.parquet", f"data.val_files={tmp_path}/data/test.parquet"]
    shape = ["trainer.total_training_steps=2", "trainer.test_freq=1", "data.val_max_samples=4"]
    shape += ["data.max_response_length=8", "reward_model.overlong_buffer.len=4", "actor_rollout_ref.rollout.n=2"]
    plan = tmp_path / "plan.json"
    overrides = " ".join(data + shape)
    kl = "actor_rollout_ref.actor.use_kl_loss=true actor_rollout_ref.actor.kl_loss_coef=0.1"
    main(["plan", "--out", str(plan), "--setting", f"base={overrides}", "--setting", f"kl={overrides} {kl}"])
    written = json.loads(plan.read_text())
    assert len(written["train"]) == 16 and len(written["val"]) == 4 and set(written["settings"]) == {"base", "kl"}

    # every update goes through the bench's loss: record what it computed
    losses = []
    update = recipe_screen.Runner.update

    def recorded(self, *args):
        metrics = update(self, *args)
        losses.append(metrics)
        return metrics

    monkeypatch.setattr(recipe_screen.Runner, "update", recorded)
    out = tmp_path / "results"
    main(
        [
            "run",
            "--plan",
            str(plan),
            "--model",
            str(tiny_model_dir),
            "--seeds",
            "1",
            "--device",
            "cpu",
            "--out",
            str(out),
        ]
    )
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["setting"] for r in rows] == ["base", "kl"]
    for row in rows:
        assert sorted(row["curve"], key=int) == ["0", "1", "2"]  # validated before training and after each step
        assert all(0.0 <= v["score"] <= 1.0 for v in row["curve"].values())
        assert [s["step"] for s in row["steps"]] == [1, 2]
    # only the KL setting computes the KL term; the adapter starts at B = 0, so the policy is the base model at step 1
    assert [("kl_loss" in m) for m in losses] == [False, False, True, True]
    assert losses[2]["kl_loss"] == pytest.approx(0.0, abs=1e-6)
    assert all(torch.isfinite(torch.tensor(m["grad_norm"])) for m in losses)
    main(["summary", str(out)])
    table = capsys.readouterr().out
    assert "| base | 1 |" in table and "| kl | 1 |" in table


def test_a_plan_runs_where_the_config_stack_is_not_installed(tiny_model_dir, tmp_path):
    """The device that runs a plan has torch, transformers and peft only: `run` must not import Hydra, OmegaConf, Ray
    or vLLM (the lr schedule comes in the plan). The subprocess blocks those imports."""
    import subprocess

    from app.prepare import prepare_arithmetic

    prepare_arithmetic(str(tmp_path / "data"), train_size=8, test_size=4, seed=3)
    shape = [f"data.train_files={tmp_path}/data/train.parquet", f"data.val_files={tmp_path}/data/test.parquet"]
    shape += ["trainer.total_training_steps=1", "data.val_max_samples=2", "data.max_response_length=4"]
    shape += ["reward_model.overlong_buffer.len=2", "actor_rollout_ref.rollout.n=2"]
    plan = tmp_path / "plan.json"
    main(["plan", "--out", str(plan), "--setting", "base=" + " ".join(shape)])
    bench = Path(recipe_screen.__file__)
    blocked = "import runpy, sys\nfor name in ('hydra', 'omegaconf', 'ray', 'vllm'):\n    sys.modules[name] = None\n"
    argv = ["run", "--plan", str(plan), "--model", str(tiny_model_dir), "--device", "cpu", "--seeds", "1"]
    argv += ["--out", str(tmp_path / "results"), "--precision", "fp32"]
    script = blocked + f"sys.argv = {[str(bench)] + argv!r}\nrunpy.run_path({str(bench)!r}, run_name='__main__')\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(r) for r in (tmp_path / "results" / "results.jsonl").read_text().splitlines()]
    assert [(r["setting"], r["precision"]) for r in rows] == [("base", "fp32")]


def test_log_probs_of_a_padded_batch_equal_each_row_alone(tiny_model_dir):
    """Rows of different prompt and answer lengths share a batch (prompts left-padded, answers right-padded); each
    answer token's log-prob must be what the model gives that row without any padding."""
    runner = recipe_screen.Runner(str(tiny_model_dir), "cpu", train=[], val=[])
    model = runner.base
    rows = [([5, 6, 7, 8], [9, 10, 11]), ([12, 13], [14]), ([15, 16, 17], [18, 19, 20, 21, 22])]
    temperature = 0.7
    out = runner.log_probs(model, rows, temperature, entropy=True)
    assert out["log_probs"].shape == (3, 5)
    for r, (prompt, answer) in enumerate(rows):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + answer])).logits[0] / temperature
        alone = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1).gather(1, torch.tensor(answer)[:, None])[:, 0]
        torch.testing.assert_close(out["log_probs"][r, : len(answer)], alone, atol=1e-5, rtol=1e-5)
        assert out["mask"][r].tolist() == [1.0] * len(answer) + [0.0] * (5 - len(answer))
        assert torch.all(out["log_probs"][r, len(answer) :] == 0) and torch.all(out["entropy"][r, len(answer) :] == 0)


def test_sampling_with_lora_fold_dtype_rounds_the_folded_weights_and_restores_the_base(tiny_model_dir):
    """`rollout.lora_fold_dtype=bfloat16`: while sampling, each weight the adapter wraps is the fold on the bf16 grid
    (as a replica's `serve.lora_fold.fold` gives it) and the others are untouched; afterwards every weight is back,
    bit for bit, though rounding cannot be undone by subtracting the update."""
    from peft import LoraConfig, get_peft_model

    from serve.lora_fold import fold

    runner = recipe_screen.Runner(str(tiny_model_dir), "cpu", train=[], val=[])
    torch.manual_seed(0)
    model = get_peft_model(
        runner.base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], init_lora_weights=False)
    )
    q = model.base_model.model.model.layers[0].self_attn.q_proj
    k = model.base_model.model.model.layers[0].self_attn.k_proj
    before = {key: value.clone() for key, value in model.state_dict().items()}
    exact = fold(q.base_layer.weight, q.lora_A["default"].weight, q.lora_B["default"].weight, 2.0, torch.float32)
    with torch.no_grad(), recipe_screen.merged(model, "bfloat16"):
        # within one bf16 step (2**-7 of a value at most): peft's merge and the fold may differ in the last float32
        # bits, which can move a tie to the other neighbour
        torch.testing.assert_close(q.base_layer.weight, exact.bfloat16().float(), atol=0, rtol=2**-7)
        assert torch.equal(q.base_layer.weight, q.base_layer.weight.bfloat16().float())  # on the grid
        assert not torch.equal(q.base_layer.weight, exact)
        assert torch.equal(k.weight, before["base_model.model.model.layers.0.self_attn.k_proj.weight"])
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_sampling_folds_the_adapter_in_and_restores_the_weights(tiny_model_dir):
    """Greedy answers of the folded model are those of the adapter applied on the fly, and the adapter's weights are
    back apart afterwards (the next update trains them)."""
    from peft import LoraConfig, get_peft_model

    runner = recipe_screen.Runner(str(tiny_model_dir), "cpu", train=[], val=[])
    torch.manual_seed(0)
    model = get_peft_model(
        runner.base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prompt = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        unfolded = model.generate(input_ids=prompt, max_new_tokens=6, do_sample=False, pad_token_id=runner.pad)
        with recipe_screen.merged(model):
            assert model.base_model.model.model.layers[0].self_attn.q_proj.merged
            folded = model.generate(input_ids=prompt, max_new_tokens=6, do_sample=False, pad_token_id=runner.pad)
    assert folded.tolist() == unfolded.tolist()
    assert not model.base_model.model.model.layers[0].self_attn.q_proj.merged
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key], atol=1e-6, rtol=0)
