"""Merged-LoRA weight sync, side by side: the payload's tensors joined into one safetensors buffer first (the previous
code, `safetensors.torch.save`) against sent as unjoined parts (`serve.payload.SafetensorsChunk`), alternating in one
run, from a Ray worker holding the FSDP engine, as the trainer does.

    python bench/sync.py [--pairs 4] [--chunk-mib 1024]

Workload: make run's config (`configs/quickstart.yaml`: SmolLM2-135M-Instruct, LoRA r=16, `rollout.lora_sync=merged`),
so the adapter is merged into the weights for each sync, to one vLLM replica (Serve) on the same node. Prints each
sync's seconds and the medians; the first pair is a warm-up and is left out.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import ray

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CACHE = REPO / ".cache" / "bench"


def joined_chunks(pairs, chunk_bytes: int):
    """The previous encoding: each chunk's tensors serialised by safetensors into one buffer, then sent."""
    import numpy as np
    from safetensors.torch import save

    from serve.payload import SafetensorsChunk

    def joined(chunk: dict) -> SafetensorsChunk:
        return SafetensorsChunk(header=b"", parts=[np.frombuffer(save(chunk), dtype=np.uint8)])

    chunk, size = {}, 0
    for name, tensor in pairs:
        nbytes = tensor.numel() * tensor.element_size()
        if chunk and size + nbytes > chunk_bytes:
            yield joined(chunk)
            chunk, size = {}, 0
        chunk[name] = tensor.contiguous()
        size += nbytes
    yield joined(chunk)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--chunk-mib", type=int, default=None, help="payload chunk size (default: the library's)")
    args = parser.parse_args()

    from hydra import compose, initialize_config_dir

    from app.config import load_config
    from app.import_model import import_model
    from serve import deploy_rollout
    from serve.payload import DEFAULT_CHUNK_BYTES

    model = import_model("smollm2-135m-instruct", CACHE / "smollm2-135m-instruct")
    with initialize_config_dir(str(REPO / "configs"), version_base=None):
        cfg = load_config(compose("quickstart", overrides=[f"actor_rollout_ref.model.path={model}",
                                                           "data.train_files=unused", "data.val_files=''"]))
    rollout = cfg.actor_rollout_ref.rollout
    chunk_bytes = (args.chunk_mib << 20) if args.chunk_mib else DEFAULT_CHUNK_BYTES
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        deploy_rollout(rollout, model, "bench-sync", trust_remote_code=False, route_prefix=None)
        syncer = Syncer.options(num_cpus=1).remote(str(model), cfg.actor_rollout_ref)
        result = ray.get(syncer.run.remote(args.pairs, chunk_bytes))
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()
    print(f"\nmerged-LoRA sync of SmolLM2-135M ({result['mbytes']:.0f} MB {rollout.dtype}), {args.pairs} alternating "
          f"pairs, chunks of {chunk_bytes >> 20} MiB")
    for mode, seconds in result["seconds"].items():
        print(f"{mode:<8} " + " ".join(f"{s:6.2f}" for s in seconds))
    joined = statistics.median(result["seconds"]["joined"][1:])
    parts = statistics.median(result["seconds"]["parts"][1:])
    print(f"median after the first pair: joined {joined:.2f} s, parts {parts:.2f} s: {joined / parts:.2f}x")
    return 0


@ray.remote
class Syncer:
    """Holds the actor's FSDP engine, built from the run's config as a train worker builds it, and syncs its merged
    weights to the rollout."""

    def __init__(self, model: str, actor_rollout_ref) -> None:
        from app.engine import make_engine
        from app.roles.factory import actor_engine_spec

        spec = actor_engine_spec(actor_rollout_ref.model, actor_rollout_ref.actor, device="cpu",
                                 rollout_n=actor_rollout_ref.rollout.n)
        self.engine = make_engine("fsdp2", spec)
        self.engine.init_model()
        self.rollout = actor_rollout_ref.rollout

    def run(self, pairs: int, chunk_bytes: int) -> dict:
        import serve.client
        from serve import FullWeights, get_rollout_client

        client = get_rollout_client("bench-sync", self.rollout)
        unjoined = serve.client.iter_encoded_chunks
        seconds: dict[str, list[float]] = {"joined": [], "parts": []}
        version, mbytes = 0, 0.0
        for _ in range(pairs):
            for mode, encoder in (("joined", joined_chunks), ("parts", unjoined)):
                serve.client.iter_encoded_chunks = encoder
                version += 1
                start = time.perf_counter()
                client.update_weights(version, FullWeights(tensors=self.engine.get_per_tensor_param(
                    merge_lora=True)), chunk_bytes=chunk_bytes)
                seconds[mode].append(time.perf_counter() - start)
        serve.client.iter_encoded_chunks = unjoined
        for _, tensor in self.engine.get_per_tensor_param(merge_lora=True):
            mbytes += tensor.numel() * tensor.element_size() / 1e6
        return {"seconds": seconds, "mbytes": mbytes}


if __name__ == "__main__":
    sys.exit(main())
