"""Compare settings of the quickstart's recipe over many seeds, in one process per worker on one device, without Ray.

`make run` samples with vLLM in a Ray Serve replica and trains in a Ray Train worker: about five minutes a run on a
2-core bf16 CPU, so a setting meets five seeds in half an hour, and five seeds cannot tell a change of the mean gain by
+0.03 from the luck of which seeds were drawn. This bench runs the same step with the same math (`algos/`: the
rewards and overlong shaping, GRPO advantages, the loss aggregation, self-imitation, the KL and entropy terms) on one
device with transformers' sampling, in several worker processes, so that one GPU gives each setting many seeds
(the throughput measured so far is in docs/experiments.md, "Screening settings on a GPU").

Its runs are not `make run`'s to the digit (another sampler, another device): compare settings by their means and
pass rates over many seeds, then confirm a winner with `bench/quickstart_repeat.py` on the real stack.

Three steps, so that the GPU machine needs only torch, transformers and peft (and gguf for a .gguf model):

    # here: compose each setting from the Hydra config (verl keys), with the train and validation prompts
    python bench/recipe_screen.py plan --config-name quickstart --out plan.json \\
        --setting base= --setting "kl=actor_rollout_ref.actor.use_kl_loss=true actor_rollout_ref.actor.kl_loss_coef=0.1"
    # on the device: each setting x seeds 1..N, workers sharing the GPU, starting no run that would end after --budget-s
    # (start CUDA's MPS daemon first, `nvidia-cuda-mps-control -d`, so that the workers' small kernels overlap)
    python bench/recipe_screen.py run --plan plan.json --model MODEL_DIR_OR.gguf --seeds 16 --workers 12 --out results/
    # (--precision fp32: sample and train in fp32, as an AVX2 box computes; the default is bf16 on a GPU)
    # anywhere: mean gain, spread and pass rate per setting
    python bench/recipe_screen.py summary results/

The step (as `app/trainer/loop.py` with one mini-batch and one PPO epoch, the quickstart's shape): sample
`train_batch_size` prompts x `rollout.n` answers; score them; add the overlong penalty; Dr. GRPO or GRPO advantages;
one optimiser step on the policy loss at ratio 1 (on-policy: PPO's clip is inactive), plus the replayed answers, the
KL-to-reference term (the base model, LoRA off) and the entropy bonus, each aggregated over the response budget as the
actor does; with `algorithm.filter_groups`, DAPO's dynamic sampling draws rounds of prompts until the step's groups
differ on its metric (`score` or `acc`), as the trainer does. Prompts: a shuffled order of its own per seed, or the
config's `data.sampler` class (the quickstart's curriculum), built with rows holding `data_source`,
`reward_model.ground_truth`, `extra_info.level`, `index` and `dataset_index`, a `data_config` of the run's seed and
the sampler's own settings only, and updated after each step with the trained samples' `dataset_index` and
`token_level_scores`. Validation: greedy answers to the first `val_max_samples` prompts, as the trainer's.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))  # bench/arithmetic_levels.py

from arithmetic_levels import generate_batch, load_problems  # noqa: E402

from algos.advantages import compute_advantages  # noqa: E402
from algos.aggregation import agg_loss, loss_normalizer  # noqa: E402
from algos.group_filter import informative_groups  # noqa: E402
from algos.imitation import self_imitation_loss  # noqa: E402
from algos.kl import kl_penalty  # noqa: E402
from algos.logprobs import entropy_from_logits, log_probs_from_logits  # noqa: E402
from algos.rewards.arithmetic import compute_score  # noqa: E402
from algos.rewards.overlong import overlong_penalty  # noqa: E402
from app.trainer.dynamic_sampling import informative_rounds  # noqa: E402

RESULTS = "results.jsonl"  # in the --out folder: one line per finished run
PASS_GAIN = 0.30  # issue 49's bar: a run passes when its greedy validation reward rose by this much
ADVANTAGES = ("grpo",)  # the estimators this bench's step computes (both with and without the std)


@dataclass(frozen=True)
class Recipe:
    """What one run of the step needs, read from the validated trainer config (`RECIPE_KEYS`)."""

    prompts_per_step: int
    n: int
    temperature: float
    top_p: float
    top_k: int  # -1: off
    max_response_length: int
    steps: int
    test_freq: int
    val_max_samples: int
    lr: float
    lr_warmup_steps: int  # linear from lr 0 at step 1, as the engine's warm-up; 0 or -1: none
    weight_decay: float
    betas: tuple[float, float]
    grad_clip: float
    lora_rank: int
    lora_alpha: int
    target_modules: Any
    norm_adv_by_std: bool
    loss_agg_mode: str
    loss_scale_factor: Optional[float]
    overlong: bool
    overlong_len: int
    overlong_penalty_factor: float
    imitation_coef: float
    imitation_min_score: float
    imitation_buffer: int
    imitation_rows: int
    use_kl_loss: bool
    kl_loss_coef: float
    kl_loss_type: str
    entropy_coeff: float
    filter_groups: bool
    filter_metric: str  # what a group's answers must differ in to be kept: "score" or "acc"
    max_gen_batches: int
    # the lr of each training step (index 0: step 1), the engine's schedule computed when the plan is made, so that
    # the device needs neither the config stack nor the engine
    step_lrs: tuple[float, ...]
    # data.sampler: {"class_path", "class_name", "options"}, or None for the bench's own shuffled order
    sampler: Optional[dict] = None
    lora_fold_dtype: Optional[str] = None  # the dtype the folded weights are rounded to while sampling; None: not


# where each Recipe field comes from in the trainer config (verl's keys)
RECIPE_KEYS = {
    "prompts_per_step": "data.train_batch_size",
    "n": "actor_rollout_ref.rollout.n",
    "temperature": "actor_rollout_ref.rollout.temperature",
    "top_p": "actor_rollout_ref.rollout.top_p",
    "top_k": "actor_rollout_ref.rollout.top_k",
    "max_response_length": "data.max_response_length",
    "steps": "trainer.total_training_steps",
    "test_freq": "trainer.test_freq",
    "val_max_samples": "data.val_max_samples",
    "lr": "actor_rollout_ref.actor.optim.lr",
    "lr_warmup_steps": "actor_rollout_ref.actor.optim.lr_warmup_steps",
    "weight_decay": "actor_rollout_ref.actor.optim.weight_decay",
    "betas": "actor_rollout_ref.actor.optim.betas",
    "grad_clip": "actor_rollout_ref.actor.grad_clip",
    "lora_rank": "actor_rollout_ref.model.lora_rank",
    "lora_alpha": "actor_rollout_ref.model.lora_alpha",
    "target_modules": "actor_rollout_ref.model.target_modules",
    "norm_adv_by_std": "algorithm.norm_adv_by_std_in_grpo",
    "loss_agg_mode": "actor_rollout_ref.actor.loss_agg_mode",
    "loss_scale_factor": "actor_rollout_ref.actor.loss_scale_factor",
    "overlong": "reward_model.overlong_buffer.enable",
    "overlong_len": "reward_model.overlong_buffer.len",
    "overlong_penalty_factor": "reward_model.overlong_buffer.penalty_factor",
    "imitation_coef": "actor_rollout_ref.actor.self_imitation.coef",
    "imitation_min_score": "actor_rollout_ref.actor.self_imitation.min_score",
    "imitation_buffer": "actor_rollout_ref.actor.self_imitation.buffer_size",
    "imitation_rows": "actor_rollout_ref.actor.self_imitation.rows_per_step",
    "use_kl_loss": "actor_rollout_ref.actor.use_kl_loss",
    "kl_loss_coef": "actor_rollout_ref.actor.kl_loss_coef",
    "kl_loss_type": "actor_rollout_ref.actor.kl_loss_type",
    "entropy_coeff": "actor_rollout_ref.actor.entropy_coeff",
    "filter_groups": "algorithm.filter_groups.enable",
    "filter_metric": "algorithm.filter_groups.metric",
    "max_gen_batches": "algorithm.filter_groups.max_num_gen_batches",
    "lora_fold_dtype": "actor_rollout_ref.rollout.lora_fold_dtype",
}


def recipe_from_json(values: dict) -> Recipe:
    return Recipe(**values | {"betas": tuple(values["betas"]), "step_lrs": tuple(values["step_lrs"])})


def _refuse_unless(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"recipe_screen: {what}; this bench runs only the quickstart's shape of step")


def engine_step_lrs(lr: float, lr_warmup_steps: int, steps: int) -> tuple[float, ...]:
    """The lr of each training step: the engine's factor after `step - 1` scheduler steps. The bench refuses a warm-up
    ratio and a decay (`recipe_from_config`), so the schedule is the warm-up, then constant."""
    from app.config.schema import OptimConfig
    from app.engine.lr_schedule import lr_factor
    from app.engine.spec import OptimSpec

    spec = OptimSpec.from_config(OptimConfig(lr=lr, lr_warmup_steps=lr_warmup_steps, total_training_steps=steps))
    return tuple(lr * lr_factor(step - 1, spec) for step in range(1, steps + 1))


def step_lr(recipe: Recipe, step: int) -> float:
    """The lr of training step `step` (1-based), as the plan computed it."""
    return recipe.step_lrs[step - 1]


def recipe_from_config(cfg: Any) -> Recipe:
    """The validated `TrainerRunConfig`'s values for the step; SystemExit naming the key for what the bench does not
    run (several mini-batches or epochs, another estimator or loss, an lr decay, dynamic sampling on another metric
    than `score` or `acc`, a reward model)."""
    actor = cfg.actor_rollout_ref.actor
    optim = actor.optim
    _refuse_unless(cfg.algorithm.adv_estimator in ADVANTAGES, f"algorithm.adv_estimator={cfg.algorithm.adv_estimator}")
    _refuse_unless(actor.policy_loss.loss_mode == "vanilla", f"policy_loss.loss_mode={actor.policy_loss.loss_mode}")
    _refuse_unless(actor.ppo_epochs == 1, f"actor.ppo_epochs={actor.ppo_epochs}")
    _refuse_unless(
        actor.ppo_mini_batch_size == cfg.data.train_batch_size,
        f"actor.ppo_mini_batch_size={actor.ppo_mini_batch_size} is not data.train_batch_size (one mini-batch)",
    )
    _refuse_unless(
        optim.warmup_style == "constant"
        and optim.lr_scheduler_type in (None, "constant")
        and optim.lr_warmup_steps_ratio == 0,
        "actor.optim has a decay or a warm-up ratio (lr_warmup_steps is run)",
    )
    _refuse_unless(
        not cfg.algorithm.filter_groups.enable or cfg.algorithm.filter_groups.metric in ("score", "acc"),
        f"algorithm.filter_groups.metric={cfg.algorithm.filter_groups.metric} (dynamic sampling runs on score or acc)",
    )
    _refuse_unless(
        cfg.data.gen_batch_size == cfg.data.train_batch_size,
        f"data.gen_batch_size={cfg.data.gen_batch_size} (a round draws data.train_batch_size prompts)",
    )
    _refuse_unless(not cfg.algorithm.use_kl_in_reward, "algorithm.use_kl_in_reward=true")
    _refuse_unless(not cfg.reward_model.enable, "reward_model.enable=true")
    _refuse_unless(
        cfg.custom_reward_function.path is None,
        "custom_reward_function.path is set (the bench scores the built-in arithmetic task)",
    )
    values = {name: attrgetter(key)(cfg) for name, key in RECIPE_KEYS.items()}
    step_lrs = engine_step_lrs(values["lr"], values["lr_warmup_steps"], values["steps"])
    ref = cfg.data.sampler
    sampler = None if ref.class_path is None else {**asdict(ref), "options": dict(ref.options)}
    return Recipe(**values | {"betas": tuple(values["betas"]), "step_lrs": step_lrs, "sampler": sampler})


# ---------------------------------------------------------------- plan (here, with the project's config stack)
def compose_setting(config_name: str, overrides: Sequence[str]) -> Any:
    from app.config import compose_run_config

    return compose_run_config(config_name, overrides)


def parse_setting(text: str) -> tuple[str, list[str]]:
    """`NAME=override override ...` (Hydra overrides, space-separated; none after `=`: the config as it is)."""
    name, sep, rest = text.partition("=")
    if not sep or not name or "." in name:
        raise SystemExit(f"--setting {text!r}: write NAME=OVERRIDES, e.g. kl=actor_rollout_ref.actor.use_kl_loss=true")
    return name, rest.split()


def make_plan(config_name: str, settings: Sequence[str]) -> dict:
    """Every setting's recipe and, from the first setting's config, the train prompts and the validation prompts."""
    recipes, data = {}, None
    for text in settings:
        name, overrides = parse_setting(text)
        if name in recipes:
            raise SystemExit(f"--setting {name} is given twice")
        cfg = compose_setting(config_name, overrides)
        recipes[name] = {"overrides": overrides, "recipe": asdict(recipe_from_config(cfg))}
        if data is None:
            data = {
                "train": [asdict(p) for p in load_problems(cfg.data.train_files)],
                "val": [asdict(p) for p in load_problems(cfg.data.val_files, cfg.data.val_max_samples)],
            }
    return {"config_name": config_name, "settings": recipes, **(data or {"train": [], "val": []})}


# ---------------------------------------------------------------- one run (the device: torch, transformers, peft)
@dataclass
class Prompt:
    ids: list[int]
    ground_truth: str
    level: int


@contextlib.contextmanager
def merged(model, round_to: Optional[str] = None):
    """A LoRA model's adapter folded into its weights for the duration, as the quickstart's rollout serves it
    (`rollout.lora_sync: merged`): decoding then runs no adapter kernels. `round_to` (`rollout.lora_fold_dtype`): the
    folded weights are rounded to that torch dtype, as the replicas' fold rounds them, and the base weights restored
    exactly afterwards. A model without an adapter is left alone."""
    if not hasattr(model, "merge_adapter"):
        yield
        return
    wrapped = [m.base_layer for m in model.modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")]
    saved = [layer.weight.detach().clone() for layer in wrapped] if round_to else []
    model.merge_adapter()
    with torch.no_grad():
        for layer in wrapped if round_to else []:
            layer.weight.copy_(layer.weight.to(getattr(torch, round_to)))
    try:
        yield
    finally:
        model.unmerge_adapter()  # peft's bookkeeping; the rounded weights then come back from the saved ones
        with torch.no_grad():
            for layer, weight in zip(wrapped, saved):
                layer.weight.copy_(weight)


class PromptDraws:
    """The training prompts a run draws: a shuffled order of the run's seed, or the recipe's `data.sampler` class
    (built as the trainer builds it, from the rows this bench has), each epoch of it in turn."""

    def __init__(self, train: Sequence[Prompt], sampler: Optional[dict], seed: int):
        self.size, self.sampler = len(train), None
        if sampler is None:
            self._order = torch.randperm(self.size, generator=torch.Generator().manual_seed(seed)).tolist()
            self._epoch = iter(self._order)
            return
        from types import SimpleNamespace

        from app.data.custom_sampler import load_sampler_class

        rows = [
            {
                "data_source": "arithmetic",
                "reward_model": {"ground_truth": p.ground_truth},
                "extra_info": {"level": p.level},
                "index": i,
                "dataset_index": i,
            }
            for i, p in enumerate(train)
        ]
        config = SimpleNamespace(seed=seed, sampler=dict(sampler["options"]))
        self.sampler = load_sampler_class(sampler["class_path"], sampler["class_name"])(rows, config)
        self._epoch = iter(self.sampler)

    def take(self, k: int) -> list[int]:
        """The next k indices, a new epoch begun where one runs out."""
        out = []
        while len(out) < k:
            index = next(self._epoch, None)
            if index is None:
                self._epoch = iter(self.sampler if self.sampler is not None else self._order)
                continue
            out.append(int(index))
        return out

    def learn(self, indices: Sequence[int], scores: torch.Tensor, lengths: Sequence[int]) -> None:
        """A sampler's `update` with the step's trained samples: each one's prompt and its score on its last token."""
        if self.sampler is None or not hasattr(self.sampler, "update"):
            return
        import numpy as np

        from app.data.custom_sampler import SamplerBatch

        token_scores = torch.zeros((len(indices), max(lengths)))
        for row, length in enumerate(lengths):
            token_scores[row, length - 1] = scores[row]
        dataset_index = np.asarray(indices, dtype=np.int64)
        self.sampler.update(
            SamplerBatch({"token_level_scores": token_scores}, {"dataset_index": dataset_index, "uid": dataset_index})
        )


PRECISIONS = ("auto", "bf16", "fp32")


def autocast_dtype(precision: str, device_type: str) -> Optional[torch.dtype]:
    """The dtype sampling and the update compute in (None: fp32, no autocast). `auto` is the trainer's rule
    (app/engine/precision.py) taking a CPU as one without native bf16: bf16 on a GPU, fp32 on a CPU (where this bench
    only runs its tests); `fp32` computes as an AVX2 box does, though not to its digits: another sampler, another
    device."""
    from app.engine.precision import resolve_auto_dtype

    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {PRECISIONS}")
    if precision == "auto":
        precision, _ = resolve_auto_dtype(on_gpu=device_type == "cuda", native_bf16=False)
    return torch.bfloat16 if precision == "bf16" else None


class Runner:
    """Holds the base model and the tokenizer; `run(recipe, seed)` trains a fresh LoRA adapter and validates it."""

    def __init__(self, model_dir: str, device: str, train: list[dict], val: list[dict], precision: str = "auto"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from app.data.prompts import render_prompts, tokenize_prompts

        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        # fp32 weights, compute in `precision`: the trainer's mixed precision
        self.base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.base.to(self.device).eval()
        self.autocast_dtype = autocast_dtype(precision, self.device.type)
        self.eos = self.tokenizer.eos_token_id
        self.pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos

        def prompts(rows: list[dict]) -> list[Prompt]:
            ids = tokenize_prompts(self.tokenizer, render_prompts(self.tokenizer, [r["messages"] for r in rows]))
            return [Prompt(i, r["ground_truth"], r["level"]) for i, r in zip(ids, rows)]

        self.train, self.val = prompts(train), prompts(val)

    def _autocast(self):
        if self.autocast_dtype is None:
            return torch.autocast("cpu", enabled=False)
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _policy(self, recipe: Recipe, seed: int):
        import copy

        from peft import LoraConfig, get_peft_model

        torch.manual_seed(seed)  # the adapter's initial A
        target = (
            list(recipe.target_modules) if isinstance(recipe.target_modules, (list, tuple)) else recipe.target_modules
        )
        config = LoraConfig(
            r=recipe.lora_rank, lora_alpha=recipe.lora_alpha, target_modules=target, lora_dropout=0.0, bias="none"
        )
        return get_peft_model(copy.deepcopy(self.base), config)

    @torch.no_grad()
    def generate(self, model, prompts: list[list[int]], recipe: Recipe, greedy: bool) -> list[list[int]]:
        """Each prompt's answer: its tokens up to and including the end-of-sequence token, at most the budget."""
        from transformers import GenerationConfig

        config = GenerationConfig(
            max_new_tokens=recipe.max_response_length,
            do_sample=not greedy,
            temperature=recipe.temperature if not greedy else None,
            top_p=recipe.top_p if not greedy else None,
            top_k=(recipe.top_k if recipe.top_k > 0 else 0) if not greedy else None,
            eos_token_id=self.eos,
            pad_token_id=self.pad,
        )
        model.eval()
        with self._autocast(), merged(model, recipe.lora_fold_dtype):
            return generate_batch(model, prompts, config, self.pad, self.eos)

    def score(self, answers: list[list[int]], prompts: list[Prompt]) -> list[dict[str, float]]:
        texts = self.tokenizer.batch_decode(answers, skip_special_tokens=True)
        return [compute_score(t, p.ground_truth) for t, p in zip(texts, prompts)]

    def validate(self, model, recipe: Recipe) -> dict[str, float]:
        scores = self.score(self.generate(model, [p.ids for p in self.val], recipe, greedy=True), self.val)
        out = {key: statistics.fmean(s[key] for s in scores) for key in ("score", "acc", "formatted", "strict")}
        for level in sorted({p.level for p in self.val}):
            accs = [s["acc"] for s, p in zip(scores, self.val) if p.level == level]
            out[f"acc_level{level}"] = statistics.fmean(accs)
        return out

    def log_probs(self, model, rows: list[tuple[list[int], list[int]]], temperature: float, entropy: bool):
        """`(rows, R)` log-probs (and entropies) of each answer's tokens at `temperature`, 0 past its end; R the
        longest answer. Each row is its prompt left-padded and its answer right-padded, so that every answer starts
        at one column and only the last R + 1 positions need logits (the trainer's layout, `app/engine/forward.py`)."""
        prompt_width = max(len(p) for p, _ in rows)
        answer_width = max(len(a) for _, a in rows)
        ids = torch.full((len(rows), prompt_width + answer_width), self.pad, dtype=torch.long)
        attention = torch.zeros_like(ids)
        for r, (p, a) in enumerate(rows):
            ids[r, prompt_width - len(p) : prompt_width + len(a)] = torch.tensor(p + a)
            attention[r, prompt_width - len(p) : prompt_width + len(a)] = 1
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
        labels = ids[:, prompt_width:]
        mask = attention[:, prompt_width:].float()
        ids, attention, positions, labels, mask = (t.to(self.device) for t in (ids, attention, positions, labels, mask))
        with self._autocast():
            logits = model(
                input_ids=ids,
                attention_mask=attention,
                position_ids=positions,
                logits_to_keep=answer_width + 1,
                use_cache=False,
            ).logits[:, :-1]
        logits = logits.float() / temperature
        out = {"log_probs": log_probs_from_logits(logits, labels) * mask, "mask": mask}
        if entropy:
            out["entropy"] = entropy_from_logits(logits) * mask
        return out

    def run(self, recipe: Recipe, seed: int) -> dict[str, Any]:
        started = time.perf_counter()
        model = self._policy(recipe, seed)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=recipe.lr, betas=recipe.betas, weight_decay=recipe.weight_decay)
        draws = PromptDraws(self.train, recipe.sampler, seed)
        buffer: list[tuple[list[int], list[int]]] = []
        curve = {0: self.validate(model, recipe)}
        steps_log = []
        for step in range(1, recipe.steps + 1):
            group, answers, scores, rounds, indices = self.sample_batch(model, recipe, draws.take, seed, step)
            task = torch.tensor([s["score"] for s in scores])
            rewards = task.clone()
            if recipe.overlong:
                lengths = [len(a) for a in answers]
                rewards += overlong_penalty(
                    lengths, recipe.max_response_length, recipe.overlong_len, recipe.overlong_penalty_factor
                )
            width = max(len(a) for a in answers)
            mask = torch.zeros((len(answers), width))
            token_rewards = torch.zeros((len(answers), width))
            for r, a in enumerate(answers):
                mask[r, : len(a)] = 1
                token_rewards[r, len(a) - 1] = rewards[r]
            advantages, _ = compute_advantages(
                "grpo",
                token_level_rewards=token_rewards,
                response_mask=mask,
                index=[i // recipe.n for i in range(len(group))],
                norm_adv_by_std_in_grpo=recipe.norm_adv_by_std,
            )
            # replay drawn before this step's good answers join the buffer, as app/trainer/learner.py does
            replay = []
            if recipe.imitation_coef:
                replay = random.Random(step).sample(buffer, min(recipe.imitation_rows, len(buffer)))
                buffer += [(p.ids, a) for p, a, s in zip(group, answers, task) if s >= recipe.imitation_min_score]
                del buffer[: max(0, len(buffer) - recipe.imitation_buffer)]
            lr = step_lr(recipe, step)
            for param_group in optimizer.param_groups:
                param_group["lr"] = lr
            metrics = self.update(model, optimizer, recipe, group, answers, advantages, replay)
            draws.learn(indices, task, [len(a) for a in answers])  # after the update, as the trainer's curriculum
            metrics |= {"step": step, "reward": float(task.mean()), "length": float(mask.sum(1).mean())}
            metrics["rounds"] = rounds
            steps_log.append(metrics)
            if step % recipe.test_freq == 0 or step == recipe.steps:
                curve[step] = self.validate(model, recipe)
        seconds = time.perf_counter() - started
        return {"seed": seed, "curve": curve, "steps": steps_log, "seconds": seconds}

    def sample_batch(self, model, recipe: Recipe, take, seed: int, step: int):
        """A step's `prompts_per_step` groups of `n` answers: (prompts per answer, answers, scores, rounds, the
        training-set index of each answer's prompt); `take(k)` gives the next k prompts' indices.

        One round without `filter_groups`. With it, the trainer's dynamic sampling loop
        (`app.trainer.dynamic_sampling.informative_rounds`): rounds of the next `prompts_per_step` prompts until that
        many groups differ on `filter_metric` or `max_gen_batches` rounds ran (0: no limit), informative groups
        first, then alike ones to fill the batch."""
        per, n = recipe.prompts_per_step, recipe.n
        index = [i // n for i in range(per * n)]  # group ids of a round's answers
        number = 0  # rounds drawn so far: its sampling seed

        def next_round() -> tuple[list[Prompt], list[list[int]], list[dict[str, float]], list[int]]:
            nonlocal number
            indices = [i for i in take(per) for _ in range(n)]
            group = [self.train[i] for i in indices]
            torch.manual_seed(seed * 100_003 + step + 1_000_003 * number)  # round 0: the one-batch step's seed
            number += 1
            answers = self.generate(model, [p.ids for p in group], recipe, greedy=False)
            return group, answers, self.score(answers, group), indices

        def informative_of(scored) -> dict[int, bool]:
            if not recipe.filter_groups:
                return dict.fromkeys(range(per), True)
            return informative_groups(torch.tensor([float(s[recipe.filter_metric]) for s in scored[2]]), index)

        rounds, picks, counts = informative_rounds(
            next_round,
            informative_of,
            per,
            recipe.max_gen_batches if recipe.filter_groups else 1,
            global_min=lambda kept: kept,
        )
        rows = [(rounds[r], slice(g * n, (g + 1) * n)) for r, g in picks]
        return (
            [p for scored, r in rows for p in scored[0][r]],
            [a for scored, r in rows for a in scored[1][r]],
            [s for scored, r in rows for s in scored[2][r]],
            counts["rounds"],
            [i for scored, r in rows for i in scored[3][r]],
        )

    def update(self, model, optimizer, recipe: Recipe, group, answers, advantages, replay) -> dict[str, float]:
        model.train()
        rows = [(p.ids, a) for p, a in zip(group, answers)] + list(replay)
        out = self.log_probs(model, rows, recipe.temperature, entropy=True)
        log_prob, mask = out["log_probs"], out["mask"]
        fresh = torch.zeros_like(mask)
        fresh[: len(answers)] = mask[: len(answers)]
        replayed = mask - fresh
        adv = torch.zeros_like(mask)
        adv[: len(answers), : advantages.shape[1]] = advantages.to(mask.device)
        # the fresh samples' normaliser: a replayed answer weighs what one of them weighs (app/roles/common.py)
        normalizer = loss_normalizer(
            fresh[: len(answers)], recipe.loss_agg_mode, loss_scale_factor=recipe.loss_scale_factor
        )
        ratio = torch.exp(log_prob - log_prob.detach())  # 1, with the policy gradient's derivative
        loss = agg_loss(-adv * ratio, fresh, recipe.loss_agg_mode, normalizer)
        metrics = {"entropy": float((out["entropy"].detach() * fresh).sum() / fresh.sum())}
        if recipe.entropy_coeff:
            loss = loss - recipe.entropy_coeff * agg_loss(out["entropy"], fresh, recipe.loss_agg_mode, normalizer)
        if recipe.use_kl_loss:
            with torch.no_grad(), model.disable_adapter():
                ref = self.log_probs(model, rows, recipe.temperature, entropy=False)["log_probs"]
            kl = agg_loss(kl_penalty(log_prob, ref, recipe.kl_loss_type), fresh, recipe.loss_agg_mode, normalizer)
            loss = loss + recipe.kl_loss_coef * kl
            metrics["kl_loss"] = float(kl.detach())
        if replay:
            imitation, _ = self_imitation_loss(
                log_prob, replayed, recipe.imitation_coef, recipe.loss_agg_mode, normalizer
            )
            loss = loss + imitation
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], recipe.grad_clip)
        if torch.isfinite(grad_norm):  # the engine skips a step on a NaN/Inf norm
            optimizer.step()
        metrics |= {"grad_norm": float(grad_norm), "replayed": float(len(replay))}
        return metrics


def _worker(rank: int, args: argparse.Namespace, jobs: list[tuple[str, int]], deadline: float) -> None:
    plan = json.loads(Path(args.plan).read_text())
    runner = Runner(args.model, args.device, plan["train"], plan["val"], args.precision)
    out = Path(args.out) / RESULTS
    durations: list[float] = []
    for name, seed in jobs[rank :: args.workers]:
        estimate = max(durations) if durations else 0.0
        if time.time() + estimate > deadline:
            break
        recipe = recipe_from_json(plan["settings"][name]["recipe"])
        result = runner.run(recipe, seed)
        durations.append(result["seconds"])
        with out.open("a") as f:  # one file for all workers (the device returns few files): a line each, locked
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(json.dumps({"setting": name, "precision": args.precision, **result}) + "\n")


def run_plan(args: argparse.Namespace) -> int:
    plan = json.loads(Path(args.plan).read_text())
    names = args.only or list(plan["settings"])
    unknown = [n for n in names if n not in plan["settings"]]
    if unknown:
        raise SystemExit(f"--only {unknown}: the plan's settings are {list(plan['settings'])}")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(name, seed) for seed in seeds for name in names]  # seed-major: a budget cut leaves every setting as many
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.model.endswith(".gguf"):  # imported once, as `make run` imports it, not by every worker
        from app.import_model import import_model

        args.model = str(import_model(args.model, args.import_to))
    deadline = time.time() + args.budget_s
    if args.workers == 1:
        _worker(0, args, jobs, deadline)
        return 0
    import torch.multiprocessing as mp

    mp.start_processes(_worker, args=(args, jobs, deadline), nprocs=args.workers, start_method="spawn")
    return 0


# ---------------------------------------------------------------- summary
def load_results(folder: str) -> list[dict]:
    return [json.loads(line) for line in (Path(folder) / RESULTS).read_text().splitlines() if line.strip()]


def setting_label(row: dict) -> str:
    """The setting's name, with the precision where the run chose one (`run --precision bf16|fp32`), so that one
    results folder can hold a setting in both precisions."""
    precision = row.get("precision", "auto")
    return row["setting"] if precision == "auto" else f"{row['setting']} ({precision})"


def summary_table(rows: list[dict]) -> str:
    """Per setting: seeds, mean gain (its standard error), the runs passing +0.30, the runs that kept the `#### N`
    line (at least half the final validation answers marked), the mean final acc and format, the mean seconds a run.
    Only the seeds every setting finished count, so that a budget cut compares like with like."""
    by_setting: dict[str, dict[int, dict]] = {}
    for row in rows:
        by_setting.setdefault(setting_label(row), {})[row["seed"]] = row
    seeds = sorted(set.intersection(*(set(v) for v in by_setting.values()))) if by_setting else []
    lines = [
        "| setting | seeds | reward at 0 | mean at the end | mean gain (s.e.) | passing +0.30 | kept the format | acc "
        "| formatted | s a run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in by_setting.items():
        picked = [runs[s] for s in seeds]
        if not picked:
            continue
        first = [r["curve"][min(r["curve"], key=int)] for r in picked]
        last = [r["curve"][max(r["curve"], key=int)] for r in picked]
        gains = [b["score"] - a["score"] for a, b in zip(first, last)]
        se = statistics.stdev(gains) / math.sqrt(len(gains)) if len(gains) > 1 else float("nan")
        count = len(picked)
        cells = [
            name,
            str(count),
            f"{statistics.fmean(a['score'] for a in first):.3f}",
            f"{statistics.fmean(b['score'] for b in last):.3f}",
            f"{statistics.fmean(gains):+.3f} ({se:.3f})",
            f"{sum(g >= PASS_GAIN - 1e-9 for g in gains)} of {count}",
            f"{sum(b['formatted'] >= 0.5 for b in last)} of {count}",
            f"{statistics.fmean(b['acc'] for b in last):.3f}",
            f"{statistics.fmean(b['formatted'] for b in last):.3f}",
            f"{statistics.fmean(r['seconds'] for r in picked):.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------- command line
def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="compose each setting and write the plan (needs the project's config stack)")
    p.add_argument("--config-name", default="quickstart")
    p.add_argument("--setting", action="append", required=True, help="NAME=Hydra overrides, space-separated")
    p.add_argument("--out", required=True)
    r = sub.add_parser("run", help="run every setting of a plan over seeds (torch, transformers, peft)")
    r.add_argument("--plan", required=True)
    r.add_argument("--model", required=True, help="a Hugging Face model folder, or a .gguf file to import first")
    r.add_argument("--import-to", default="outputs/recipe_screen/model", help="where a .gguf --model is imported")
    r.add_argument("--seeds", type=int, default=8)
    r.add_argument("--first-seed", type=int, default=1)
    r.add_argument("--only", action="append", help="run only these settings of the plan")
    r.add_argument("--workers", type=int, default=1, help="processes sharing the device")
    r.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    r.add_argument(
        "--precision", choices=PRECISIONS, default="auto", help="auto: bf16 on a GPU; fp32: as an AVX2 box computes"
    )
    r.add_argument("--budget-s", type=float, default=float("inf"), help="start no run that would end after this")
    r.add_argument("--out", required=True, help=f"folder for {RESULTS}, a line per run")
    s = sub.add_parser("summary", help="print the table of a results folder")
    s.add_argument("results")
    args = parser.parse_args(argv)
    if args.command == "plan":
        Path(args.out).write_text(json.dumps(make_plan(args.config_name, args.setting)))
        return 0
    if args.command == "run":
        return run_plan(args)
    print(summary_table(load_results(args.results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
