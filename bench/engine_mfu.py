"""Throughput and MFU of the FSDP engine's forward and forward+backward, without Ray.

    .venv/bin/python bench/engine_mfu.py                       # SmolLM2-135M-sized, LoRA r=16, the CPU matrix
    .venv/bin/python bench/engine_mfu.py --dtypes bf16 --remove-padding 1 --micro-batch-sizes 8,32
    .venv/bin/python bench/engine_mfu.py --dtypes fp32 --remove-padding 1 --samples-per-prompt 8 --share-prompts 0,1
    torchrun --nproc-per-node 8 bench/engine_mfu.py --preset smollm2-135m --lora-rank 0   # GPUs: NCCL
    python bench/engine_mfu.py --preset 0.5b        # GPU workloads: 0.5b, 1b, 3b, 7b-lora (see WORKLOADS)

The model is a random-init Llama with SmolLM2-135M's shape (hidden 576, 30 layers, 9 heads, 3 kv heads,
intermediate 1536, vocab 49152), or another of ``SHAPES``, saved once to a cache folder (on a GPU: built there, in
bf16). The GPU workload presets (``WORKLOADS``) also set the batch: 64 sequences, prompts 256+-64, responses
128-512 tokens, bf16, remove-padding; 0.5b and 1b full fine-tuning, 3b full fine-tuning with gradient checkpointing,
7b-lora LoRA r64 with gradient checkpointing. The batch looks like a GSM8K rollout: prompts of
``--prompt-len`` +- ``--prompt-spread`` tokens (left-padded), responses of ``--response-len`` tokens; with
``--samples-per-prompt n`` every n consecutive rows share a prompt, as a GRPO group does, and ``--share-prompts 1``
computes each prompt once for its rows (``model.share_prompt_prefix``).

FLOPs counted are the *useful* ones (real tokens only, a shared prompt once): every linear layer ``2*in*out`` per
token (the LM head only at the response positions the engine computes), causal attention ``2*s^2*d`` per layer and
sequence; backward
needs input gradients everywhere (1x) and weight gradients only for trainable weights (LoRA: adapters only);
gradient checkpointing recomputes the layers' forward, which counts for hardware utilisation (HFU) and not for
MFU. The peak is a measured square matmul in the run's compute dtype (8192^2 on a GPU; on a CPU 2048^2, bf16 and
fp32 both reported), so MFU = model FLOPs per second / measured peak.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.batch import TensorBatch  # noqa: E402
from app.engine import EngineSpec, OptimSpec, StepContext, make_engine  # noqa: E402
from app.engine.spec import to_dtype  # noqa: E402

# model shapes: (model_type, config); Llama and Qwen2 (Llama with q/k/v biases) shapes of public models
SHAPES = {
    "smollm2-135m": (
        "llama",
        dict(
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            vocab_size=49152,
            max_position_embeddings=8192,
            tie_word_embeddings=True,
            rope_theta=100000.0,
            rms_norm_eps=1e-5,
        ),
    ),
    "tiny": (
        "llama",
        dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=1024,
            max_position_embeddings=1024,
            tie_word_embeddings=True,
        ),
    ),
    # 0.49B (Qwen2.5-0.5B's shape)
    "0.5b": (
        "qwen2",
        dict(
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            vocab_size=151936,
            max_position_embeddings=32768,
            tie_word_embeddings=True,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
        ),
    ),
    # 1.24B (Llama-3.2-1B's shape)
    "1b": (
        "llama",
        dict(
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            max_position_embeddings=131072,
            tie_word_embeddings=True,
            rope_theta=500000.0,
            rms_norm_eps=1e-5,
        ),
    ),
    # 3.09B (Qwen2.5-3B's shape)
    "3b": (
        "qwen2",
        dict(
            hidden_size=2048,
            intermediate_size=11008,
            num_hidden_layers=36,
            num_attention_heads=16,
            num_key_value_heads=2,
            vocab_size=151936,
            max_position_embeddings=32768,
            tie_word_embeddings=True,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
        ),
    ),
    # 7.62B (Qwen2.5-7B's shape)
    "7b": (
        "qwen2",
        dict(
            hidden_size=3584,
            intermediate_size=18944,
            num_hidden_layers=28,
            num_attention_heads=28,
            num_key_value_heads=4,
            vocab_size=152064,
            max_position_embeddings=32768,
            tie_word_embeddings=False,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
        ),
    ),
}
# the GPU workloads of issue 50: the batch of every one, then each one's model and training settings
WORKLOAD_BATCH = dict(
    batch=64,
    prompt_len=256,
    prompt_spread=64,
    response_len=512,
    response_min=128,
    dtypes="bf16",
    remove_padding="1",
    samples_per_prompt=1,
    share_prompts="0",
)
WORKLOADS = {
    "0.5b": dict(shape="0.5b", lora_rank=0, grad_ckpt="0", micro_batch_sizes="64"),
    "1b": dict(shape="1b", lora_rank=0, grad_ckpt="0", micro_batch_sizes="16"),
    "3b": dict(shape="3b", lora_rank=0, grad_ckpt="1", micro_batch_sizes="32"),
    "7b-lora": dict(shape="7b", lora_rank=64, grad_ckpt="1", micro_batch_sizes="32"),
}
PRESETS = sorted({*SHAPES, *WORKLOADS})


def model_config(shape: str):
    from transformers import AutoConfig

    model_type, kwargs = SHAPES[shape]
    return AutoConfig.for_model(model_type, **kwargs, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def build_model_dir(shape: str, cache: Path, device: torch.device = torch.device("cpu")) -> Path:
    """A random-init model of ``SHAPES[shape]``, saved once as safetensors: built on ``device``, in bf16 on a GPU
    (seconds, where an fp32 build on the host takes minutes at 7B), in fp32 on a CPU."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    out = cache / f"{shape}-{str(dtype).removeprefix('torch.')}"
    if (out / "config.json").is_file():
        return out
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(model_config(shape), dtype=dtype)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp, safe_serialization=True)
    del model
    os.replace(tmp, out)
    return out


def count_parameters(shape: str) -> int:
    """Parameters of ``SHAPES[shape]`` (built on the meta device: no memory, no time)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config(shape))
    return sum(p.numel() for p in model.parameters())


def make_batch(
    n: int,
    prompt_len: int,
    spread: int,
    response_len: int,
    response_min: int,
    vocab: int,
    seed: int = 0,
    samples_per_prompt: int = 1,
) -> TensorBatch:
    g = torch.Generator().manual_seed(seed)
    groups = -(-n // samples_per_prompt)
    prompt_lens = torch.randint(prompt_len - spread, prompt_len + spread + 1, (groups,), generator=g).repeat_interleave(
        samples_per_prompt
    )[:n]
    response_lens = torch.randint(response_min, response_len + 1, (n,), generator=g)
    width = int(prompt_lens.max())
    ids = torch.randint(3, vocab, (n, width + response_len), generator=g)
    ids[:, :width] = ids[::samples_per_prompt, :width].repeat_interleave(samples_per_prompt, dim=0)[:n]
    mask = torch.zeros_like(ids)
    for i in range(n):
        mask[i, width - int(prompt_lens[i]) : width + int(response_lens[i])] = 1
    ids = ids * mask
    return TensorBatch(
        {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(1) - 1).clamp(min=0),
            "responses": ids[:, width:].clone(),
            "response_mask": mask[:, width:].clone(),
        }
    )


def useful_flops(
    model: torch.nn.Module, config, batch: TensorBatch, grad_ckpt: bool, share_prompts: bool = False
) -> dict[str, float]:
    """Forward and forward+backward FLOPs on the real tokens of ``batch`` (see the module docstring)."""
    real = batch["attention_mask"].sum(dim=1).double()
    response_real = batch["response_mask"].sum(dim=1).double()
    response_tokens = float(response_real.sum())
    if share_prompts:  # one copy of each distinct prompt; a response attends to it and causally to itself
        width = batch["input_ids"].shape[1] - batch["responses"].shape[1]
        prompts = {
            tuple(row[:width][m[:width].bool()].tolist()) for row, m in zip(batch["input_ids"], batch["attention_mask"])
        }
        prompt_real = real - response_real
        tokens = float(sum(len(p) for p in prompts) + response_tokens)
        attn_pairs = float(
            sum(len(p) ** 2 for p in prompts) + (2 * prompt_real * response_real + response_real.pow(2)).sum()
        )
    else:
        tokens = float(real.sum())
        attn_pairs = float(real.pow(2).sum())
    fwd = bwd = 0.0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        per_token = 2.0 * module.in_features * module.out_features
        n = response_tokens if name.endswith("lm_head") else tokens
        fwd += per_token * n
        bwd += per_token * n  # input gradient
        if module.weight.requires_grad:
            bwd += per_token * n  # weight gradient
    d_attn = config.num_attention_heads * getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    attn = 2.0 * attn_pairs * d_attn * config.num_hidden_layers  # causal: half of 4*s^2*d
    fwd += attn
    bwd += 2.0 * attn
    head = 2.0 * config.hidden_size * config.vocab_size * response_tokens
    recompute = (fwd - head) if grad_ckpt else 0.0  # checkpointed layers run their forward again in backward
    return {
        "forward": fwd,
        "forward_backward": fwd + bwd,
        "hardware_forward_backward": fwd + bwd + recompute,
        "tokens": tokens,
    }


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int, seconds: float = 2.0) -> float:
    """Sustained GFLOP/s of an ``n x n`` matmul in ``dtype``."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    for _ in range(3):
        a @ b
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        reps += 1
        if device.type == "cuda" and reps % 10:
            continue
        sync()
    sync()
    return 2.0 * n**3 * reps / (time.perf_counter() - start) / 1e9


def _loss(out, micro, ctx):
    keep = micro["response_mask"].bool()
    return -(out["log_probs"] * keep).sum() / ctx.loss_normalizer, {}


def run_case(
    model_dir: Path,
    batch: TensorBatch,
    *,
    dtype: str,
    remove_padding: bool,
    micro: int,
    lora_rank: int,
    grad_ckpt: bool,
    compile_layers: bool,
    steps: int,
    device: str,
    share_prompts: bool = False,
    forward_pass: bool = True,
    profile: Optional[Path] = None,
) -> dict:
    """One engine, ``steps`` timed steps after a warm-up: a forward-only pass (unless not ``forward_pass``), then a
    forward+backward and an optimizer step."""
    # every setting stated here: the config schema (app.config) would need Hydra, which a bare GPU box may lack
    optim = OptimSpec(
        lr=1e-5,
        weight_decay=0.01,
        betas=(0.9, 0.999),
        lr_warmup_steps=0,
        lr_warmup_steps_ratio=0.0,
        warmup_style="constant",
        min_lr_ratio=0.0,
        lr_decay_steps_ratio=1.0,
        num_cycles=0.5,
        total_training_steps=-1,
    )
    spec = EngineSpec(
        model_path=str(model_dir),
        trust_remote_code=False,
        model_overrides={},
        optim=optim,
        grad_clip=1.0,
        param_dtype=dtype,
        model_dtype="fp32",
        reduce_dtype="fp32",
        buffer_dtype="fp32",
        param_offload=False,
        optimizer_offload=False,
        fsdp_size=-1,
        reshard_after_forward=True,
        use_remove_padding=remove_padding,
        share_prompt_prefix=share_prompts,
        micro_batch_size_per_gpu=micro,
        use_dynamic_bsz=False,
        max_token_len_per_gpu=16384,
        ulysses_sequence_parallel_size=1,
        logits_chunk_size=None,
        lora_rank=lora_rank,
        lora_alpha=2 * max(lora_rank, 1),
        target_modules="all-linear",
        exclude_modules=None,
        enable_gradient_checkpointing=grad_ckpt,
        compile_layers=compile_layers,
        device=device,
    )
    engine = make_engine("fsdp2", spec)
    engine.init_model()
    engine.set_loss_fn(_loss)
    shard = engine.shard_data(batch) if len(batch) % engine.dp_world_size == 0 else batch
    flops = useful_flops(engine.model, engine.model.config, shard, grad_ckpt, share_prompts and remove_padding)
    ctx = StepContext(loss_normalizer=float(batch["response_mask"].sum()) / engine.dp_world_size)
    sync = torch.cuda.synchronize if engine.device.type == "cuda" else (lambda: None)
    wall: dict[str, list[float]] = {"fwd": [], "train": [], "opt": []}
    cpu: dict[str, list[float]] = {"fwd": [], "train": [], "opt": []}
    compile_s = 0.0
    for step in range(steps + 1):  # the first is warm-up (and compilation)
        marks = []

        def mark():
            sync()
            marks.append((time.perf_counter(), time.process_time()))

        with engine.eval_mode(), torch.no_grad():
            mark()
            if forward_pass:
                engine.forward_backward_step(shard, StepContext(), forward_only=True)
            mark()
        with engine.train_mode():
            engine.optimizer_zero_grad()
            engine.forward_backward_step(shard, ctx)
            mark()
            engine.optimizer_step()
            mark()
        if step == 0:
            compile_s = marks[-1][0] - marks[0][0]
            continue
        for i, key in enumerate(("fwd", "train", "opt")):
            wall[key].append(marks[i + 1][0] - marks[i][0])
            cpu[key].append(marks[i + 1][1] - marks[i][1])
    if profile is not None:
        profile_update(engine, shard, ctx, profile)
    fwd_t, train_t, opt_t = (statistics.median(wall[k]) for k in ("fwd", "train", "opt"))
    fwd_c, train_c, opt_c = (statistics.median(cpu[k]) for k in ("fwd", "train", "opt"))
    parameters = sum(p.numel() for p in engine.model.parameters())  # global sizes (a DTensor's numel is)
    gpu_peak = torch.cuda.max_memory_allocated() / 2**30 if engine.device.type == "cuda" else None
    del engine
    return {
        "parameters": parameters,
        "gpu_peak_allocated_gib": gpu_peak,
        "steps": steps,
        "dtype": dtype,
        "remove_padding": remove_padding,
        "share_prompts": share_prompts,
        "micro_batch": micro,
        "lora_rank": lora_rank,
        "grad_ckpt": grad_ckpt,
        "compile": compile_layers,
        "tokens_per_rank": flops["tokens"],
        "first_step_s": compile_s,
        "forward_s": fwd_t,
        "forward_cpu_s": fwd_c,
        "forward_backward_cpu_s": train_c,
        "optimizer_cpu_s": opt_c,
        "forward_backward_s": train_t,
        "optimizer_s": opt_t,
        "forward_gflops": flops["forward"] / fwd_t / 1e9 if fwd_t else float("nan"),
        "forward_backward_gflops": flops["forward_backward"] / train_t / 1e9,
        "hardware_forward_backward_gflops": flops["hardware_forward_backward"] / train_t / 1e9,
        "model_flops_per_step": flops["forward_backward"],
        "forward_backward_tokens_per_s": flops["tokens"] / train_t,
        # one RL step's compute on this engine: old log-probs + reference (adapter off) + update
        "rl_step_compute_s": 2 * fwd_t + train_t + opt_t,
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--preset",
        default="smollm2-135m",
        choices=PRESETS,
        help=f"model shape ({', '.join(SHAPES)}) or GPU workload ({', '.join(WORKLOADS)})",
    )
    p.add_argument("--model-path", default=None, help="a real HF folder instead of a random preset")
    p.add_argument("--cache", default=os.environ.get("RAYRL_BENCH_CACHE", "/tmp/rayrl-bench-models"))
    p.add_argument("--batch", type=int, default=32, help="sequences (global, over all ranks)")
    p.add_argument("--prompt-len", type=int, default=150)
    p.add_argument("--prompt-spread", type=int, default=30)
    p.add_argument("--response-len", type=int, default=64)
    p.add_argument(
        "--response-min",
        type=int,
        default=None,
        help="shortest response (default: --response-len, i.e. every response full length)",
    )
    p.add_argument("--samples-per-prompt", type=int, default=1, help="rows sharing each prompt (GRPO's n)")
    p.add_argument("--share-prompts", default="0", help="compute a shared prompt once: 0, 1 or 0,1")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--remove-padding", default="1,0")
    p.add_argument("--micro-batch-sizes", default="32")
    p.add_argument("--grad-ckpt", default="0")
    p.add_argument("--compile", default="0", help="torch.compile the decoder layers: 0, 1 or 0,1")
    p.add_argument("--steps", type=int, default=2, help="timed steps per case (after one warm-up step)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--json", default=None, help="append one JSON line per case to this file")
    p.add_argument(
        "--profile",
        default=None,
        help="write a torch.profiler table of one more update (ops by own device time, kernel launches)",
    )
    p.add_argument(
        "--peak-size",
        type=int,
        default=None,
        help="side of the square matmul that measures the peak (default: 8192 on a GPU, 2048 on a CPU)",
    )
    p.add_argument(
        "--forward-pass",
        type=int,
        default=1,
        help="time a forward-only (log-prob) pass before each update: 1, or 0 to time the update only",
    )
    p.add_argument(
        "--attention",
        default="auto",
        choices=["auto", "flex", "varlen", "per_sequence"],
        help="packed attention kernel (auto: app.engine.packed_attention.packed_attention_kernel)",
    )
    return p


def parse_args(argv=None) -> argparse.Namespace:
    """The command line; a workload preset sets its batch and training settings as defaults, which flags still
    override."""
    p = _parser()
    args = p.parse_args(argv)
    if args.preset in WORKLOADS:
        workload = dict(WORKLOADS[args.preset])
        p.set_defaults(**WORKLOAD_BATCH, **{k: v for k, v in workload.items() if k != "shape"})
        args = p.parse_args(argv)
    return args


def profile_update(engine, shard: TensorBatch, ctx: StepContext, out: Path) -> None:
    """One more forward+backward under torch.profiler: the ops by their own device (else CPU) time, and how many
    kernels were launched, written to `out` (text)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if engine.device.type == "cuda" else [])
    sort = "self_cuda_time_total" if engine.device.type == "cuda" else "self_cpu_time_total"
    with engine.train_mode(), profile(activities=activities) as prof:
        engine.optimizer_zero_grad()
        engine.forward_backward_step(shard, ctx)
        if engine.device.type == "cuda":
            torch.cuda.synchronize()
    events = prof.key_averages()
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        f"kernel launches: {launches}\n" + events.table(sort_by=sort, row_limit=30, max_name_column_width=60)
    )


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    shape = WORKLOADS[args.preset]["shape"] if args.preset in WORKLOADS else args.preset
    if args.attention != "auto":  # this process only: every packed attention call takes the named kernel
        from app.engine import packed_attention

        packed_attention.packed_attention_kernel = lambda device, dtype=None: args.attention

    if args.threads:
        torch.set_num_threads(args.threads)
    if "RANK" in os.environ and not dist.is_initialized():  # torchrun
        use_cuda = torch.cuda.is_available() and args.device != "cpu"
        if use_cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group("nccl" if use_cuda else "gloo")
    rank0 = not dist.is_initialized() or dist.get_rank() == 0
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if (args.device != "cpu" and torch.cuda.is_available())
        else torch.device("cpu")
    )
    model_dir = Path(args.model_path) if args.model_path else None
    if model_dir is None:
        if rank0:
            build_model_dir(shape, Path(args.cache), device)
        if dist.is_initialized():
            dist.barrier()
        model_dir = build_model_dir(shape, Path(args.cache), device)  # built by now: only its path
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(model_dir).vocab_size
    response_min = args.response_len if args.response_min is None else args.response_min
    batch = make_batch(
        args.batch,
        args.prompt_len,
        args.prompt_spread,
        args.response_len,
        response_min,
        vocab,
        samples_per_prompt=args.samples_per_prompt,
    )
    peak_n = args.peak_size or (8192 if device.type == "cuda" else 2048)
    peaks = {d: matmul_peak(device, to_dtype(d), peak_n) for d in sorted(set(args.dtypes.split(",")) | {"bf16"})}
    if rank0:
        print(
            f"device={device} threads={torch.get_num_threads()}"
            f" world={dist.get_world_size() if dist.is_initialized() else 1}"
            f" model={model_dir} batch={args.batch} real_tokens={int(batch['attention_mask'].sum())}"
            f" padded_tokens={batch['attention_mask'].numel()}"
        )
        print("measured matmul peak GFLOP/s: " + ", ".join(f"{k}={v:.0f}" for k, v in peaks.items()))
        print("wall seconds (median of the timed steps); cpu = process CPU seconds, robust to other load")
        print(
            f"{'dtype':5} {'rmpad':5} {'share':5} {'micro':5} {'ckpt':4} {'comp':4} | "
            f"{'fwd s':>6} {'cpu':>6} {'GF/s':>5} | "
            f"{'f+b s':>6} {'cpu':>6} {'GF/s':>5} {'MFU':>6} {'HFU':>6} {'MFU/bf16':>8} {'tok/s':>6} | {'opt s':>5} "
            f"{'RL-step s':>9} | {'1st s':>6} load maxRSS"
        )
    results: list[dict] = []
    for dtype in args.dtypes.split(","):
        for rp, share in (
            (bool(int(x)), bool(int(y)))
            for x in args.remove_padding.split(",")
            for y in args.share_prompts.split(",")
            if int(x) or not int(y)
        ):
            for micro in (int(x) for x in args.micro_batch_sizes.split(",")):
                for ckpt, comp in (
                    (bool(int(c)), bool(int(k))) for c in args.grad_ckpt.split(",") for k in args.compile.split(",")
                ):
                    r = run_case(
                        model_dir,
                        batch,
                        dtype=dtype,
                        remove_padding=rp,
                        micro=micro,
                        lora_rank=args.lora_rank,
                        grad_ckpt=ckpt,
                        compile_layers=comp,
                        steps=args.steps,
                        device=args.device,
                        share_prompts=share,
                        forward_pass=bool(args.forward_pass),
                        profile=Path(args.profile) if args.profile and rank0 else None,
                    )
                    r["preset"], r["model_dir"] = args.preset, str(model_dir)
                    from app.engine import packed_attention

                    r["attention_kernel"] = packed_attention.packed_attention_kernel(device)
                    r["mfu"] = r["forward_backward_gflops"] / peaks[dtype]
                    r["hfu"] = r["hardware_forward_backward_gflops"] / peaks[dtype]
                    r["mfu_vs_bf16_peak"] = r["forward_backward_gflops"] / peaks["bf16"]
                    r["peak_gflops"] = peaks[dtype]
                    r["device"] = str(device)
                    if rank0:
                        r["load_avg_1m"] = os.getloadavg()[0]
                        # peak resident memory of this process so far (all cases up to this one), GiB
                        r["max_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
                        print(
                            f"{dtype:5} {int(rp):5} {int(share):5} {micro:5} {int(ckpt):4} {int(comp):4} | "
                            f"{r['forward_s']:6.2f} {r['forward_cpu_s']:6.2f} {r['forward_gflops']:5.0f} | "
                            f"{r['forward_backward_s']:6.2f} {r['forward_backward_cpu_s']:6.2f} "
                            f"{r['forward_backward_gflops']:5.0f} {r['mfu']:6.1%} {r['hfu']:6.1%} "
                            f"{r['mfu_vs_bf16_peak']:8.1%} "
                            f"{r['forward_backward_tokens_per_s']:6.0f} | {r['optimizer_s']:5.2f} "
                            f"{r['rl_step_compute_s']:9.2f} | {r['first_step_s']:6.1f} {r['load_avg_1m']:4.1f} "
                            f"{r['max_rss_gib']:5.1f}G",
                            flush=True,
                        )
                        if args.json:
                            with open(args.json, "a") as f:
                                f.write(json.dumps({**vars(args), **r}) + "\n")
                    results.append(r)
    if dist.is_initialized():
        dist.destroy_process_group()
    return results


if __name__ == "__main__":
    main()
