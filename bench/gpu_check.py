"""The engine's GPU checks, one part per command; bench/gpu_check.sh runs them all under time limits.

    python bench/gpu_check.py info    --out OUT
    python bench/gpu_check.py engine  --out OUT [--device cpu --tiny]
    python bench/gpu_check.py attention --out OUT [--device cpu --tiny]
    python bench/gpu_check.py summary --out OUT

``engine``: the FSDP2 engine on one rank (NCCL on CUDA) with the one-rank load (``load_on_rank0``) of a random-init
0.49B model (``engine_mfu``'s 0.5b shape, built on the GPU in bf16): log-probs of a packed bf16 forward against an
unsharded fp32 eager reference on padded rows, then one training step (loss and gradient norm finite, the weights
moved). ``attention``: the fused packed-attention kernels (FlexAttention; PyTorch's varlen kernel on CUDA) against
the per-sequence path on random q/k/v, outputs and gradients (bf16 on CUDA, each against an fp64 per-sequence
reference), plain and shared-prompt packing, and the forward+backward time of one layer of each. ``summary``: the
parts' JSON files as summary.json and summary.md. ``--device cpu --tiny`` runs the same code on tiny shapes (the CPU
test; FlexAttention forward only there, no varlen kernel).

Imports nothing of Ray, vLLM, Hydra/OmegaConf, DeepSpeed or flash-attn: a bare GPU machine with torch,
transformers, peft, accelerate and safetensors runs it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_mfu  # noqa: E402  (bench/engine_mfu.py: shapes, batches, model folders)

from app.engine import EngineSpec, OptimSpec, StepContext, make_engine  # noqa: E402

PARTS = ("info", "engine", "attention")


def _write(out: Path, name: str, data: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))
    print(json.dumps(data, default=str), flush=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------------------------------------- info
def info(args) -> dict:
    data = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cuda": torch.version.cuda,
        "host": platform.node(),
        "cpus": os.cpu_count(),
    }
    import shutil

    data["c_compiler"] = shutil.which("gcc") or shutil.which("cc")  # Triton builds its launchers with it
    for name in ("transformers", "peft", "accelerate", "safetensors", "triton"):
        try:
            data[name] = __import__(name).__version__
        except ImportError as e:
            data[name] = f"missing: {e}"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        data.update(
            gpu=props.name,
            gpu_count=torch.cuda.device_count(),
            gpu_memory_gib=props.total_memory / 2**30,
            capability=f"{props.major}.{props.minor}",
            bf16=torch.cuda.is_bf16_supported(),
            nccl=".".join(map(str, torch.cuda.nccl.version())),
        )
    from app.engine.packed_attention import packed_attention_kernel

    data["packed_attention_kernel"] = packed_attention_kernel(
        torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    return data


# -------------------------------------------------------------------------------------------------------- engine
def _optim() -> OptimSpec:
    return OptimSpec(
        lr=1e-4,
        weight_decay=0.0,
        betas=(0.9, 0.999),
        lr_warmup_steps=0,
        lr_warmup_steps_ratio=0.0,
        warmup_style="constant",
        min_lr_ratio=0.0,
        lr_decay_steps_ratio=1.0,
        num_cycles=0.5,
        total_training_steps=-1,
    )


def _spec(model_dir: Path, device: str, param_dtype: str) -> EngineSpec:
    # every setting stated: the config schema (app.config) needs Hydra, which this machine may lack
    return EngineSpec(
        model_path=str(model_dir),
        trust_remote_code=False,
        model_overrides={},
        lora_rank=0,
        lora_alpha=1,
        target_modules="all-linear",
        exclude_modules=None,
        enable_gradient_checkpointing=False,
        use_remove_padding=True,
        share_prompt_prefix=False,
        optim=_optim(),
        grad_clip=1.0,
        micro_batch_size_per_gpu=None,
        use_dynamic_bsz=True,
        max_token_len_per_gpu=16384,
        ulysses_sequence_parallel_size=1,
        logits_chunk_size=None,
        model_dtype="fp32",
        param_dtype=param_dtype,
        reduce_dtype="fp32",
        buffer_dtype="fp32",
        param_offload=False,
        optimizer_offload=False,
        fsdp_size=-1,
        reshard_after_forward=True,
        compile_layers=False,
        device=device,
        load_on_rank0=True,
    )


def _reference_log_probs(model_dir: Path, batch, device: torch.device) -> torch.Tensor:
    """Response log-probs of the plain (unsharded, eager, padded rows) model in fp32: the definition."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").to(device)
    model.eval()
    ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
    response_len = batch["responses"].shape[1]
    with torch.no_grad():
        logits = (
            model(input_ids=ids, attention_mask=mask, position_ids=batch["position_ids"].to(device), use_cache=False)
            .logits[:, -response_len - 1 : -1]
            .float()
        )
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, -response_len:, None])[..., 0]
    del model
    return torch.where(batch["response_mask"].to(device).bool(), logp, 0.0).cpu()


def _loss(out, micro, ctx):
    keep = micro["response_mask"].bool()
    return -(out["log_probs"] * keep).sum() / ctx.loss_normalizer, {}


def engine(args) -> dict:
    import torch.distributed as dist

    device = torch.device(args.device)
    shape = "tiny" if args.tiny else "0.5b"
    timings = {}
    start = time.perf_counter()
    model_dir = engine_mfu.build_model_dir(shape, Path(args.cache), device)
    timings["build_model_s"] = time.perf_counter() - start
    if args.tiny:
        batch = engine_mfu.make_batch(4, 12, 3, 8, 3, vocab=engine_mfu.model_config(shape).vocab_size, seed=1)
    else:
        batch = engine_mfu.make_batch(16, 256, 64, 512, 128, vocab=engine_mfu.model_config(shape).vocab_size, seed=1)
    param_dtype = "bf16" if device.type == "cuda" else "fp32"

    start = time.perf_counter()
    eng = make_engine("fsdp2", _spec(model_dir, args.device, param_dtype))
    eng.init_model()
    _sync(device)
    timings["init_model_s"] = time.perf_counter() - start
    params = list(eng.model.parameters())
    data = {
        "shape": shape,
        "parameters": sum(p.numel() for p in params),
        "engine_device": str(eng.device),
        "backend": str(dist.get_backend()),
        "param_devices": sorted({p.device.type for p in params}),
        "param_dtypes": sorted({str(p.dtype) for p in params}),
        "param_dtype": param_dtype,
        "real_tokens": int(batch["attention_mask"].sum()),
    }

    start = time.perf_counter()
    with eng.eval_mode(), torch.no_grad():
        logp = eng.forward_backward_step(batch, StepContext(), forward_only=True).outputs["log_probs"].cpu()
    _sync(device)
    timings["log_prob_pass_s"] = time.perf_counter() - start
    reference = _reference_log_probs(model_dir, batch, device)
    keep = batch["response_mask"].bool()
    diff = (logp - reference)[keep].abs()
    data.update(
        log_prob_max_abs_diff=float(diff.max()),
        log_prob_mean_abs_diff=float(diff.mean()),
        log_prob_mean=float(reference[keep].mean()),
    )

    before = {
        n: p.detach().to_local().clone() if hasattr(p, "to_local") else p.detach().clone()
        for n, p in list(eng.model.named_parameters())[:8]
    }
    eng.set_loss_fn(_loss)
    ctx = StepContext(loss_normalizer=float(batch["response_mask"].sum()))
    start = time.perf_counter()
    with eng.train_mode():
        eng.optimizer_zero_grad()
        result = eng.forward_backward_step(batch, ctx)
        grad_norm = eng.optimizer_step()
    _sync(device)
    timings["train_step_s"] = time.perf_counter() - start
    moved = {
        n: float(
            (p.detach().to_local() if hasattr(p, "to_local") else p.detach()).float().sub(before[n].float()).abs().max()
        )
        for n, p in eng.model.named_parameters()
        if n in before
    }
    data.update(
        loss=result.loss,
        grad_norm=grad_norm,
        weights_moved=sum(v > 0 for v in moved.values()),
        weights_checked=len(moved),
    )
    if device.type == "cuda":
        data["gpu_peak_allocated_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    data["timings"] = timings

    # bf16 compute against the fp32 reference: rounding of the weights (2^-8 relative) and of the activations
    tolerance = (1e-4, 1e-5) if param_dtype == "fp32" else (0.25, 0.03)
    checks = {
        "device": eng.device.type == device.type and data["param_devices"] == [device.type],
        "backend": data["backend"] == ("nccl" if device.type == "cuda" else "gloo"),
        "log_probs_match_reference": data["log_prob_max_abs_diff"] <= tolerance[0]
        and data["log_prob_mean_abs_diff"] <= tolerance[1],
        "loss_finite": math.isfinite(result.loss),
        "grad_norm_finite": math.isfinite(grad_norm) and grad_norm > 0,
        "weights_moved": data["weights_moved"] == len(moved) > 0,
    }
    data["checks"] = checks
    data["ok"] = all(checks.values())
    return data


# ----------------------------------------------------------------------------------------------------- attention
def _layouts(tiny: bool, seed: int = 0):
    """Packed lengths: plain (``cu_seqlens``) and shared-prompt (prompts of 8 responses), like the workload's."""
    g = torch.Generator().manual_seed(seed)
    if tiny:
        lengths = torch.randint(3, 12, (5,), generator=g).tolist()
        layout = ((6, (3, 0, 4)), (2, (1,)))
    else:
        prompts = torch.randint(192, 321, (64,), generator=g)
        responses = torch.randint(128, 513, (64,), generator=g)
        lengths = (prompts + responses).tolist()
        layout = tuple((int(prompts[i]), tuple(responses[i * 8 : (i + 1) * 8].tolist())) for i in range(8))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return {"plain": (cu, sum(lengths)), "shared_prompt": (layout, sum(p + sum(r) for p, r in layout))}


def _attention_runs(q, k, v, metadata, grad_out, kernel: str, compiled: bool, backward: bool):
    """Output ``(1, H, T, d)`` and q/k/v gradients of one packed attention through ``kernel``."""
    from app.engine import packed_attention
    from app.engine.packed_attention import SHARED_PROMPT_LAYOUT, flex_packed_attention, packed_sdpa_attention

    inputs = [t.detach().clone().requires_grad_(backward) for t in (q, k, v)]
    if kernel == "flex":
        out = flex_packed_attention(*inputs, metadata, None, compiled=compiled)
    elif kernel == "varlen":
        out = packed_attention.varlen_packed_attention(*inputs, metadata, None).transpose(1, 2)
    else:
        layer = torch.nn.Module().eval()
        kwargs = {SHARED_PROMPT_LAYOUT: metadata} if isinstance(metadata, tuple) else {"cu_seq_lens_q": metadata}
        chosen = packed_attention.packed_attention_kernel
        packed_attention.packed_attention_kernel = lambda device, dtype=None: packed_attention.PER_SEQUENCE
        try:
            out = packed_sdpa_attention(layer, *inputs, None, **kwargs)[0].transpose(1, 2)
        finally:
            packed_attention.packed_attention_kernel = chosen
    if not backward:
        return [out.detach()]
    out.backward(grad_out)
    return [out.detach()] + [t.grad for t in inputs]


def _timed_ms(fn, device, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def attention(args) -> dict:
    """The fused packed-attention kernels (FlexAttention; on CUDA also PyTorch's varlen kernel) against the
    per-sequence path: outputs and gradients each against an fp64 per-sequence reference, and one layer's time."""
    from app.engine.packed_attention import varlen_kernel_available

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    heads, kv_heads, dim = (4, 2, 8) if args.tiny else (14, 2, 64)  # the 0.5b shape's attention
    backward = cuda  # neither fused kernel has a CPU backward
    fused = ["flex", "varlen"] if cuda and varlen_kernel_available() else ["flex"]  # varlen: CUDA only
    data = {
        "dtype": str(dtype),
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": dim,
        "backward": backward,
        "compiled": cuda,
        "kernels": fused + ["per_sequence"],
        "cases": {},
    }
    ok = True
    for name, (metadata, total) in _layouts(args.tiny).items():
        g = torch.Generator().manual_seed(1)
        q64, k64, v64, go64 = (
            torch.randn(1, h, total, dim, generator=g, dtype=torch.float64).to(device)
            for h in (heads, kv_heads, kv_heads, heads)
        )
        metadata = metadata.to(device) if isinstance(metadata, torch.Tensor) else metadata
        ref = _attention_runs(q64, k64, v64, metadata, go64, "per_sequence", False, backward)
        low = [t.to(dtype) for t in (q64, k64, v64, go64)]
        got, first_call_s = {}, {}
        for kernel in data["kernels"]:
            start = time.perf_counter()
            got[kernel] = _attention_runs(*low[:3], metadata, low[3], kernel, cuda, backward)
            _sync(device)
            first_call_s[kernel] = time.perf_counter() - start
        labels = ["out", "grad_q", "grad_k", "grad_v"][: len(ref)]
        errors = {}
        for i, (label, r) in enumerate(zip(labels, ref)):
            scale = float(r.abs().max())
            errors[label] = {kernel: float((got[kernel][i].double() - r).abs().max()) / scale for kernel in got}
        # each against the fp64 definition: a fused kernel may not be worse than the per-sequence kernel in the same
        # dtype beyond a few roundings of it (fp32 on a CPU: all at rounding level)
        slack = 1e-5 if dtype == torch.float32 else 2e-2
        kernel_ok = {k: all(e[k] <= 2 * e["per_sequence"] + slack for e in errors.values()) for k in fused}
        ok &= all(kernel_ok.values())
        case = {
            "tokens": total,
            "errors_relative_to_max": errors,
            "ok": kernel_ok,
            "first_call_s": first_call_s,
            "ms": {},
        }
        repeats = 2 if args.tiny else 10
        for kernel in data["kernels"]:
            run = lambda k=kernel: _attention_runs(*low[:3], metadata, low[3], k, cuda, backward)
            run()
            case["ms"][kernel] = _timed_ms(run, device, repeats)
        data["cases"][name] = case
    # a second packed length, as the next micro-batch brings: FlexAttention must not fail or recompile for long
    if cuda:
        metadata, total = _layouts(args.tiny, seed=7)["plain"]
        q, k, v, go = (
            torch.randn(1, h, total, dim, device=device, dtype=dtype) for h in (heads, kv_heads, kv_heads, heads)
        )
        start = time.perf_counter()
        _attention_runs(q, k, v, metadata.to(device), go, "flex", True, backward)
        _sync(device)
        data["flex_new_length_first_call_s"] = time.perf_counter() - start
    data["ok"] = ok
    return data


# ------------------------------------------------------------------------------------------------------- summary
def summary(args) -> dict:
    out = Path(args.out)
    parts = {p: json.loads((out / f"{p}.json").read_text()) for p in PARTS if (out / f"{p}.json").is_file()}
    steps = (
        [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
        if (out / "steps.jsonl").is_file()
        else []
    )
    mfu = (
        [json.loads(line) for line in (out / "mfu.jsonl").read_text().splitlines()]
        if (out / "mfu.jsonl").is_file()
        else []
    )
    result = {"parts": parts, "steps": steps, "mfu": mfu}
    (out / "summary.json").write_text(json.dumps(result, indent=1, default=str))
    lines = ["# GPU check", ""]
    gpu = parts.get("info", {})
    lines.append(
        f"GPU: {gpu.get('gpu', 'none')} ({gpu.get('gpu_memory_gib', 0):.0f} GiB), torch {gpu.get('torch')}, "
        f"CUDA {gpu.get('cuda')}, transformers {gpu.get('transformers')}, peft {gpu.get('peft')}"
    )
    lines += ["", "| step | exit code | seconds |", "|---|---|---|"]
    lines += [f"| {s['step']} | {s['rc']} | {s['seconds']} |" for s in steps]
    if "engine" in parts:
        e = parts["engine"]
        lines += [
            "",
            f"Engine ({e['shape']}, {e['parameters'] / 1e9:.2f}B, {e['backend']}, "
            f"compute {e['param_dtype']}): "
            f"ok={e['ok']}; log-prob max |diff| {e['log_prob_max_abs_diff']:.4f}, mean "
            f"{e['log_prob_mean_abs_diff']:.5f} against fp32 eager; loss {e['loss']:.4f}, grad norm "
            f"{e['grad_norm']:.4f}; " + ", ".join(f"{k} {v:.1f}" for k, v in e["timings"].items()),
        ]
        lines.append("checks: " + ", ".join(f"{k}={v}" for k, v in e["checks"].items()))
    if "attention" in parts:
        a = parts["attention"]
        kernels = a["kernels"]
        lines += [
            "",
            f"Packed attention ({a['dtype']}, {a['heads']}/{a['kv_heads']} heads x {a['head_dim']}, "
            f"{'forward+backward' if a['backward'] else 'forward'} of one layer): ok={a['ok']}",
            "",
            "| layout | tokens | "
            + " | ".join(f"{k} ms" for k in kernels)
            + " | "
            + " | ".join(f"{k} max rel. error" for k in kernels)
            + " | "
            + " | ".join(f"{k} first call s" for k in kernels)
            + " |",
            "|---|---|" + "---|" * (3 * len(kernels)),
        ]
        for name, c in a["cases"].items():
            worst = {k: max(e[k] for e in c["errors_relative_to_max"].values()) for k in kernels}
            lines.append(
                f"| {name} | {c['tokens']} | "
                + " | ".join(f"{c['ms'][k]:.2f}" for k in kernels)
                + " | "
                + " | ".join(f"{worst[k]:.2e}" for k in kernels)
                + " | "
                + " | ".join(f"{c['first_call_s'][k]:.1f}" for k in kernels)
                + " |"
            )
    if mfu:
        lines += [
            "",
            "| preset | params | micro | ckpt | LoRA | attention | compiled | f+b s | MFU | HFU | tok/s | opt s "
            "| first step s | peak TFLOP/s | GPU GiB |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in mfu:
            gib = r.get("gpu_peak_allocated_gib")
            lines.append(
                f"| {r['preset']} | {r['parameters'] / 1e9:.2f}B | {r['micro_batch']} | {int(r['grad_ckpt'])} "
                f"| {r['lora_rank']} | {r.get('attention_kernel')} | {int(r['compile'])} "
                f"| {r['forward_backward_s']:.2f} | {r['mfu']:.1%} | {r['hfu']:.1%} "
                f"| {r['forward_backward_tokens_per_s']:.0f} | {r['optimizer_s']:.2f} | {r['first_step_s']:.1f} "
                f"| {r['peak_gflops'] / 1e3:.0f} | {'-' if gib is None else f'{gib:.1f}'} |"
            )
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=[*PARTS, "summary"])
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu_out")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="tiny shapes (the CPU test of this script)")
    p.add_argument("--cache", default=os.environ.get("RAYRL_BENCH_CACHE", "/tmp/rayrl-bench-models"))
    args = p.parse_args(argv)
    if args.part == "summary":
        summary(args)
        return 0
    data = {"info": info, "engine": engine, "attention": attention}[args.part](args)
    _write(Path(args.out), args.part, data)
    return 0 if data.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
