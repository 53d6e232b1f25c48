"""Plain helpers several test modules use (on pytest's `pythonpath`, so `from support import ...` works anywhere)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import random
import shlex
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import Sequence

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def load_bench_script(name: str):
    """bench/<name>.py as a module (bench/ is not a package), registered under its name: a dataclass looks its
    module up in sys.modules while the class is built."""
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def building(out: Path):
    """Held while a session fixture checks and builds the folder `out`: another pytest process (an xdist worker) that
    wants it waits, then finds it built. The lock file lives beside `out`."""
    from filelock import FileLock

    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out.with_name(out.name + ".lock"))):
        yield


# Ports a test may take for a listener of its own: above Ray's worker ports (10002-19999 by default) and below the
# kernel's ephemeral range (32768 and up by default), which every process that binds port 0 draws from: Ray's raylet,
# object manager and gRPC servers, by the dozen, in the other test worker's cluster too. A port the kernel handed out
# as free could be taken that way before the test bound it (Serve's proxy then failed to bind, once in a suite).
TEST_PORTS = range(20000, 32768)


def free_port() -> int:
    """A TCP port on 127.0.0.1 in TEST_PORTS that nothing listens on right now, drawn at random (two test workers
    rarely draw the same)."""
    draw = random.SystemRandom()  # not the `random` state a test may have seeded
    for _ in range(100):
        port = draw.choice(TEST_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {TEST_PORTS} after 100 draws")


def weights_only_copy(model_dir: Path, out: Path) -> Path:
    """`model_dir` as a checkpoint saved without its tokenizer: config.json and model.safetensors only, in `out`."""
    import shutil

    out.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(Path(model_dir) / name, out / name)
    return out


def with_dotted(base: dict, **overrides) -> dict:
    """A deep copy of the config tree `base` with dotted-key overrides, e.g. with_dotted(BASE, **{"data.seed": 3})."""
    import copy

    cfg = copy.deepcopy(base)
    for dotted, value in overrides.items():
        node = cfg
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return cfg


def assert_replicas_loaded(client, tensors) -> None:
    """Every replica of `client` (a RolloutClient) reports that its last full-weights load held exactly `tensors`
    (the same float64 sum of sums; 1e-9 absorbs only the float64 reduction order of fp32 weights) and came from this
    process's node."""
    import pytest
    import ray

    from serve.payload import weights_sum

    checksums = client.weights_checksums()
    assert checksums, "no live replica answered"
    expected = weights_sum(tensors)
    for c in checksums:
        assert c["weights_sum"] == pytest.approx(expected, abs=1e-9, rel=0), c
        assert c["weights_from_node"] == ray.get_runtime_context().get_node_id(), c


def cpu_rollout_config(**overrides):
    """`actor_rollout_ref.rollout` as a validated CPU run holds it (the layout's defaults filled in by the product's
    own loader: one replica, vLLM's memory settings), with `overrides` replaced."""
    import dataclasses

    from app.config import load_config

    cfg = load_config({"data": {"train_files": "unused.parquet"}, "actor_rollout_ref": {"model": {"path": "unused"}}})
    return dataclasses.replace(cfg.actor_rollout_ref.rollout, **overrides)


def tiny_run_overrides(model_dir, data_dir) -> list[str]:
    """Hydra overrides of the suite's smallest real GRPO run: the tiny random Llama, the arithmetic prompts in
    `data_dir`, 2 steps of 2 prompts x n=2 with 16 response tokens, hf rollout, one train worker, validation every
    step, no checkpoints. Callers add the output folder, loggers and experiment name."""
    return [
        f"data.train_files={data_dir / 'train.parquet'}",
        f"data.val_files={data_dir / 'test.parquet'}",
        "data.train_batch_size=2",
        "data.max_prompt_length=256",
        "data.max_response_length=16",
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.lora_rank=0",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.dtype=float32",
        f"actor_rollout_ref.rollout.http_port={free_port()}",
        "reward_model.num_workers=1",
        "trainer.num_workers=1",
        "trainer.cpus_per_worker=1",
        "trainer.total_training_steps=2",
        "trainer.test_freq=1",
        "trainer.save_freq=-1",
    ]


def in_process_run_overrides(model_dir, data_dir) -> list[str]:
    """Hydra overrides shared by the tests that build the real trainer in the test process (`build_trainer` with a
    stand-in rollout): the tiny model, the arithmetic prompts in `data_dir`, no validation set, 2 prompts x n=2 of 8
    response tokens, one mini-batch. Callers add the rest."""
    return [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={data_dir / 'train.parquet'}",
        "data.val_files=''",
        "data.max_prompt_length=256",
        "data.max_response_length=8",
        "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.n=2",
    ]


def saving_in_process_trainer(compose, model_dir, data_dir, out, steps: int, extra: Sequence[str] = ()):
    """The real trainer of `in_process_run_overrides` on one rank, `steps` steps saving a checkpoint after each into
    `out`, its metrics in `out`/metrics.jsonl, with a recording stand-in for the rollout service (2 samples of 8
    tokens a prompt); `extra`: more overrides."""
    from recording_rollout import RecordingRollout

    from app.trainer.setup import build_trainer

    cfg = compose(
        [
            *in_process_run_overrides(model_dir, data_dir),
            "trainer.num_workers=1",
            f"trainer.total_training_steps={steps}",
            "trainer.val_before_train=false",
            "trainer.save_freq=1",
            "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={out}",
            "reward_model.num_workers=0",
            *extra,
        ]
    )
    return build_trainer(cfg, RecordingRollout(vocab_size=1000, n=2, response_len=8), device="cpu")


# The specs below restate no default (app/config/schema.py holds them): tests that want "the defaults" build them from
# the schema through the product's own builders, then change what they test.
def optim_spec(**overrides):
    """`OptimSpec.from_config` of the schema's `optim` section with `overrides` (OptimConfig keys)."""
    from app.config.schema import OptimConfig
    from app.engine import OptimSpec

    return OptimSpec.from_config(dataclasses.replace(OptimConfig(), **overrides))


def engine_spec(model_path, **overrides):
    """The actor's `EngineSpec` for the schema's defaults (`app.roles.factory.actor_engine_spec`) and `model_path`,
    with `overrides` (EngineSpec fields)."""
    from app.config.schema import ActorConfig, ModelConfig, RolloutConfig
    from app.roles.factory import actor_engine_spec

    spec = actor_engine_spec(ModelConfig(path=str(model_path)), ActorConfig(), seed=0, rollout_n=RolloutConfig().n)
    return dataclasses.replace(spec, **overrides)


def token_mean_update(engine, batch) -> tuple[float, float]:
    """One update of `engine` on this rank's share of `batch`, minimising the token-mean of -log p over the whole batch
    (the ranks' losses normalised by its global token count). Returns (the loss averaged over the ranks, the gradient
    norm). Collective: every rank calls it."""
    import torch

    from app.engine import StepContext

    def loss_fn(out, micro, ctx):
        return -(out["log_probs"] * micro["response_mask"]).sum() / ctx.loss_normalizer, {}

    tokens = float(batch["response_mask"].sum())
    engine.set_loss_fn(loss_fn)
    with engine.train_mode():
        engine.optimizer_zero_grad()
        result = engine.forward_backward_step(
            engine.shard_data(batch), StepContext(loss_normalizer=tokens / engine.dp_world_size)
        )
        grad_norm = engine.optimizer_step()
    return float(engine.all_reduce(torch.tensor([result.loss]), "mean")[0]), grad_norm


def synced_weights(engine) -> dict:
    """What a weight sync carries from `engine`, as a dict: with LoRA its adapter tensors (`lora_adapter_state`, rank
    0's; the other ranks get `{}`), otherwise every weight from its per-tensor stream (whole on every rank).
    Collective: every rank calls it."""
    if engine.has_adapter:
        return engine.lora_adapter_state()[1]
    return dict(engine.get_per_tensor_param())


def prompt_options(**overrides):
    """`PromptDataOptions.from_mapping` of the schema's `data` section with `overrides` (DataConfig keys)."""
    from app.config.schema import DataConfig
    from app.data import PromptDataOptions

    return PromptDataOptions.from_mapping(dataclasses.replace(DataConfig(), **overrides))


def policy_loss_config(**overrides):
    """`PolicyLossConfig.from_mapping` of the schema's actor section, with `overrides` (PolicyLossConfig fields)."""
    from algos.policy_loss_config import PolicyLossConfig
    from app.config.schema import ActorConfig

    return dataclasses.replace(PolicyLossConfig.from_mapping(ActorConfig()), **overrides)


def kill_ray_under(temp_dir: str) -> None:
    """Stop only the Ray processes of the cluster whose --temp-dir is `temp_dir` (`ray stop` would stop every one)."""
    import psutil

    procs = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(temp_dir in part for part in (p.info["cmdline"] or [])):
                procs.append(p)
                procs.extend(p.children(recursive=True))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


def verl_script_args(script: Path, **paths: str) -> list[str]:
    """The arguments a verl run script (tests/app/config/verl_scripts/*.txt) hands to `python3 -m
    verl.trainer.main_ppo`, as the shell splits them: comment lines dropped, `{model}`-style stand-ins filled from
    `paths`, line continuations joined, quotes removed."""
    text = "".join(line for line in script.read_text().splitlines(True) if not line.startswith("#"))
    return shlex.split(text.format(**paths).replace("\\\n", " "))


def compose_verl(args: list[str]):
    """configs/ppo_trainer.yaml with `args` as Hydra overrides (what `python -m app.train args` composes)."""
    from app.config import compose_config

    return compose_config("ppo_trainer", args)


def verl_script_paths(tmp_path: Path, model_name: str = "model") -> dict[str, str]:
    """Local stand-ins for the verl scripts' Hugging Face model and GSM8K / MATH parquet files, by their `{name}`s."""
    model = tmp_path / model_name
    model.mkdir()
    (model / "config.json").write_text("{}")
    out = {"model": str(model), "ckpt": str(tmp_path / "ckpts")}
    for name in ("train", "test", "train2", "test2"):
        out[name] = str(tmp_path / f"{name}.parquet")
        Path(out[name]).touch()
    return out


def verl_grpo_example_args(tmp_path: Path) -> list[str]:
    """verl's GRPO example script (tests/app/config/verl_scripts) with local stand-ins for its paths."""
    script = Path(__file__).resolve().parent / "app/config/verl_scripts/grpo_run_qwen2-7b.txt"
    return verl_script_args(script, **verl_script_paths(tmp_path))


def write_text(folder: Path, name: str, text: str) -> str:
    """`text` written to folder/name; its path as a string."""
    path = Path(folder) / name
    path.write_text(text)
    return str(path)


def wandb_run_records(wandb_dir: Path) -> tuple[Path, list]:
    """The one offline run under `wandb_dir` and its records, read once W&B has closed the file: finish() returns when
    the W&B service has the records, not when its writer has flushed them (a CI run read the file empty), and teardown
    waits for the service to exit."""
    import wandb

    wandb.teardown()
    [run_file] = wandb_dir.glob("offline-run-*/run-*.wandb")
    return run_file, list(wandb_records(run_file))


def wandb_records(path: Path):
    """The protobuf records of a W&B `run-<id>.wandb` file. wandb has no Python reader for it (`wandb sync` is Go), so
    this is its LevelDB log layout: a 7-byte file header, then in 32 KiB blocks records of [crc32 u32, length u16,
    type u8] + data; type 1 is a whole record, 2/3/4 its first/middle/last piece; a block's last < 7 bytes are
    padding."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pieces = 7, b""
    while pos + 7 <= len(data):
        room = 32768 - pos % 32768
        if room < 7:
            pos += room
            continue
        length, kind = struct.unpack_from("<HB", data, pos + 4)
        pieces += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            pieces = b""
            yield record


# Qwen3's switch, cut down: with enable_thinking false the generation prompt carries an empty thinking block
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


# verl's examples/sglang_multiturn/config/gsm8k_multiturn_grpo.yaml @ 350e151126fdaecd460ea3fcc415ddd2f196a99f: a
# user's config that starts from verl's ppo_trainer, run with --config-path
VERL_MULTI_TURN = """\
hydra:
  searchpath:
    - file://verl/trainer/config

defaults:
  - ppo_trainer
  - _self_

data:
  max_prompt_length: 1024
  max_response_length: 1024
  train_batch_size: 256
  return_raw_chat: True

actor_rollout_ref:
  hybrid_engine: True
  rollout:
    name: sglang
    multi_turn:
      enable: True
      max_assistant_turns: 5
"""
