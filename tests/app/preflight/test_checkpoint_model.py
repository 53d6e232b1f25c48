"""Which saved tensors fit the model being trained (the DCP index against the model's shapes)."""

from app.preflight.checkpoint_model import first_mismatch

MODEL = {
    "model.embed_tokens.weight": (100, 64),
    "model.layers.0.self_attn.q_proj.weight": (64, 64),
    "model.layers.0.mlp.up_proj.weight": (128, 64),
}
LORA = "base_model.model.model.layers.0.mlp.up_proj"


def test_the_same_model_fits():
    assert first_mismatch(dict(MODEL), MODEL, lora_rank=0) is None


def test_another_width_is_named_with_both_shapes():
    saved = {**MODEL, "model.embed_tokens.weight": (100, 576)}
    assert first_mismatch(saved, MODEL, 0) == "its model.embed_tokens.weight is [100, 576], this model's is [100, 64]"


def test_a_lora_checkpoint_fits_its_rank_and_layer_sizes():
    saved = {f"{LORA}.lora_A.default.weight": (8, 64), f"{LORA}.lora_B.default.weight": (128, 8)}
    assert first_mismatch(saved, MODEL, lora_rank=8) is None
    assert first_mismatch(saved, MODEL, lora_rank=16) == (
        f"its adapter {LORA}.lora_A.default.weight has rank 8, actor_rollout_ref.model.lora_rank=16"
    )
    assert "trains no adapter" in first_mismatch(saved, MODEL, lora_rank=0)
    wide = {f"{LORA}.lora_A.default.weight": (8, 576)}
    assert "does not take" in first_mismatch(wide, MODEL, lora_rank=8)


def test_a_tensor_the_model_lacks():
    saved = {"model.layers.5.mlp.up_proj.weight": (128, 64)}
    assert (
        first_mismatch(saved, MODEL, 0) == "it holds model.layers.5.mlp.up_proj.weight, which this model has no "
        "tensor for"
    )
