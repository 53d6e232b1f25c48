"""`auto` precision: bf16 where the hardware computes it natively, fp32 on CPUs that would emulate it."""

import pytest

from app.config import load_config
from app.engine.precision import cpu_has_native_bf16, resolve_auto_dtype

AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path):
    for text, native in ((AVX2_ONLY, False), (SAPPHIRE, True), ("processor\t: 0\n", False)):
        (tmp_path / "cpuinfo").write_text(text)
        assert cpu_has_native_bf16(tmp_path / "cpuinfo", {}) is native
    assert cpu_has_native_bf16(tmp_path / "missing", {}) is False


def test_onednn_capped_below_bf16_makes_it_emulated(tmp_path):
    # ONEDNN_MAX_CPU_ISA=AVX2 on a bf16 CPU: oneDNN then runs bf16 matmuls without the CPU's bf16 instructions
    (tmp_path / "cpuinfo").write_text(SAPPHIRE)
    for cap, native in (("AVX2", False), ("avx512_core", False), ("AVX512_CORE_BF16", True), ("", True)):
        assert cpu_has_native_bf16(tmp_path / "cpuinfo", {"ONEDNN_MAX_CPU_ISA": cap}) is native, cap
    assert cpu_has_native_bf16(tmp_path / "cpuinfo", {}) is True


def test_auto_is_bf16_on_gpus_and_native_cpus_and_fp32_elsewhere():
    assert resolve_auto_dtype(on_gpu=True, native_bf16=False) == ("bf16", "bfloat16")
    assert resolve_auto_dtype(on_gpu=False, native_bf16=True) == ("bf16", "bfloat16")
    assert resolve_auto_dtype(on_gpu=False, native_bf16=False) == ("fp32", "float32")


BASE = {
    "data": {"train_files": "t.parquet", "train_batch_size": 4},
    "actor_rollout_ref": {"model": {"path": "/m"}, "actor": {"ppo_mini_batch_size": 4}, "rollout": {"n": 2}},
    "algorithm": {"adv_estimator": "grpo"},
    "trainer": {"num_workers": 1},
}


@pytest.mark.parametrize("native, short, long", [(True, "bf16", "bfloat16"), (False, "fp32", "float32")])
def test_validation_resolves_auto_once_and_keeps_explicit_choices(monkeypatch, native, short, long):
    monkeypatch.setattr("app.engine.precision.cpu_has_native_bf16", lambda: native)
    cfg = load_config(BASE)
    arr = cfg.actor_rollout_ref
    assert arr.rollout.dtype == long
    assert {
        arr.actor.fsdp_config.mixed_precision.param_dtype,
        arr.ref.fsdp_config.mixed_precision.param_dtype,
        cfg.critic.model.fsdp_config.mixed_precision.param_dtype,
    } == {short}
    explicit = load_config(
        {**BASE, "actor_rollout_ref": {**BASE["actor_rollout_ref"], "rollout": {"n": 2, "dtype": "float16"}}}
    )
    assert explicit.actor_rollout_ref.rollout.dtype == "float16"


def test_unresolved_auto_never_reaches_the_rollout_engine():
    from app.config.schema import RolloutConfig
    from serve.deployment import engine_spec_from_config

    with pytest.raises(ValueError, match="dtype 'auto' reached the rollout engine unresolved"):
        engine_spec_from_config(RolloutConfig(), "/m", trust_remote_code=False)
