"""The policy store: what a replacement replica replays, and that its actor's process stays small."""

import subprocess
import sys
from pathlib import Path

from serve.policy_store import PolicyStore
from serve.types import WirePayload


def test_a_lora_payload_is_replayed_after_the_last_full_weights_and_a_full_one_starts_the_chain_again():
    store = PolicyStore()
    assert store.latest() == (0, [])
    full, lora1, lora2, full2 = (
        WirePayload(kind="full", nbytes=1),
        WirePayload(kind="lora", nbytes=2),
        WirePayload(kind="lora", nbytes=3),
        WirePayload(kind="full", nbytes=4),
    )
    store.publish(1, full)
    store.publish(2, lora1)
    assert store.latest() == (2, [full, lora1])
    store.publish(3, lora2)  # a newer adapter replaces the older one, not the base weights
    assert store.latest() == (3, [full, lora2])
    store.publish(4, full2)
    assert store.latest() == (4, [full2])
    merged = WirePayload(kind="merged_lora", nbytes=5)
    store.publish(5, merged)  # folds into the model folder's base weights: replayed alone
    assert store.latest() == (5, [merged])


def test_the_store_and_its_payload_type_import_neither_ray_serve_nor_fastapi():
    # the store's actor process imports just these; Ray Serve and FastAPI cost it ~65 MB
    code = (
        "import sys, serve.policy_store, serve.types\n"
        "print([m for m in ('ray.serve', 'fastapi', 'serve.client', 'serve.deployment') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
