"""What `auto` precision means on the machine that validates the config.

bf16 is verl's compute dtype and the right one on GPUs and on CPUs with native bf16 (AVX512-BF16 or AMX). CPUs
without it (AVX2-only x86, many laptops and cloud VMs) emulate bf16 matmuls: measured on a 2-core AVX2 EPYC, a bf16
matmul ran ~60x slower than fp32 and vLLM's greedy validation of 64 prompts took over 3 minutes instead of under 30 s.
So `auto` picks bf16 where it is native and fp32 elsewhere. A process whose oneDNN is capped below AVX512-BF16
(`ONEDNN_MAX_CPU_ISA`) emulates bf16 matmuls too, whatever the CPU flags say, so `auto` is fp32 there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

_NATIVE_BF16_FLAGS = {"avx512_bf16", "amx_bf16"}
# oneDNN's names of the ISAs without bf16 instructions (its ONEDNN_MAX_CPU_ISA values)
_ONEDNN_ISAS_WITHOUT_BF16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI"}


def cpu_has_native_bf16(cpuinfo: Path = Path("/proc/cpuinfo"), environ: Mapping[str, str] = os.environ) -> bool:
    """True when the CPU flags list AVX512-BF16 or AMX-BF16 (Linux) and oneDNN is not capped below them; False when
    unknown."""
    if environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in _ONEDNN_ISAS_WITHOUT_BF16:
        return False
    try:
        text = cpuinfo.read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            return bool(_NATIVE_BF16_FLAGS & set(line.split(":", 1)[1].split()))
    return False


def resolve_auto_dtype(on_gpu: bool, native_bf16: bool) -> tuple[str, str]:
    """(short name for FSDP mixed precision, vLLM dtype name) that `auto` stands for."""
    return ("bf16", "bfloat16") if on_gpu or native_bf16 else ("fp32", "float32")
