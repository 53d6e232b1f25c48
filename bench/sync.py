"""Merged-LoRA weight sync, side by side: merged on the trainer and streamed as full weights (the previous code)
against the adapter alone, folded into the base weights on the replica (`serve.lora_fold`), alternating in one run,
from a Ray worker holding the FSDP engine with the train worker's thread count, as the trainer does.

    python bench/sync.py [--pairs 4]

Workload: make run's config (`configs/quickstart.yaml`: SmolLM2-135M-Instruct, LoRA r=16, `rollout.lora_sync=merged`)
to one vLLM replica (Serve) on the same node. Each sync is timed from the engine's gathers to every replica serving
the new version. Prints each sync's seconds and the medians; the first pair is a warm-up and is left out.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4)
    args = parser.parse_args()

    from app.config import compose_run_config
    from app.import_model import import_model
    from serve import deploy_rollout

    model = import_model("smollm2-135m-instruct", CACHE / "smollm2-135m-instruct")
    cfg = compose_run_config(
        "quickstart", [f"actor_rollout_ref.model.path={model}", "data.train_files=unused", "data.val_files=''"]
    )
    rollout = cfg.actor_rollout_ref.rollout
    threads = int(cfg.trainer.cpus_per_worker)  # the train worker's torch threads (app.trainer.launch)
    ray.init(num_cpus=threads + int(rollout.cpus_per_replica + 0.999), include_dashboard=False, log_to_driver=False)
    try:
        deploy_rollout(rollout, model, "bench-sync", trust_remote_code=False, route_prefix=None)
        syncer = Syncer.options(num_cpus=threads).remote(str(model), cfg.actor_rollout_ref, threads)
        result = ray.get(syncer.run.remote(args.pairs))
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()
    print(
        f"\nmerged-LoRA sync of SmolLM2-135M ({result['mbytes']:.0f} MB of merged {rollout.dtype} weights), "
        f"{args.pairs} alternating pairs"
    )
    for mode, seconds in result["seconds"].items():
        print(f"{mode:<8} " + " ".join(f"{s:6.2f}" for s in seconds))
    trainer = statistics.median(result["seconds"]["trainer"][1:])
    replica = statistics.median(result["seconds"]["replica"][1:])
    print(
        f"median after the first pair: merged on the trainer {trainer:.2f} s, folded on the replica {replica:.2f} s: "
        f"{trainer / replica:.2f}x"
    )
    return 0


@ray.remote
class Syncer:
    """Holds the actor's FSDP engine, built from the run's config as a train worker builds it, and syncs its merged
    weights to the rollout."""

    def __init__(self, model: str, actor_rollout_ref, threads: int) -> None:
        import torch

        from app.engine import make_engine
        from app.roles.factory import actor_engine_spec

        torch.set_num_threads(threads)  # as many as make run's train worker merges with

        spec = actor_engine_spec(
            actor_rollout_ref.model,
            actor_rollout_ref.actor,
            device="cpu",
            seed=0,
            rollout_n=actor_rollout_ref.rollout.n,
        )
        self.engine = make_engine("fsdp2", spec)
        self.engine.init_model()
        self.rollout = actor_rollout_ref.rollout
        self.model = model

    def run(self, pairs: int) -> dict:
        import torch

        from app.trainer.weight_sync import rollout_payload
        from serve import FullWeights, get_rollout_client

        client = get_rollout_client("bench-sync", self.rollout)
        dtype = getattr(torch, self.rollout.dtype)
        payloads = {  # the previous path, and the one `rollout_payload` now picks for lora_sync=merged
            "trainer": lambda: FullWeights(tensors=self.engine.get_per_tensor_param(dtype=dtype, merge_lora=True)),
            "replica": lambda: rollout_payload(self.engine, lora_sync="merged", model_path=self.model, dtype=dtype),
        }
        seconds: dict[str, list[float]] = {mode: [] for mode in payloads}
        version = 0
        for _ in range(pairs):
            for mode, payload in payloads.items():
                version += 1
                start = time.perf_counter()
                client.update_weights(version, payload())
                seconds[mode].append(time.perf_counter() - start)
        mbytes = sum(
            t.numel() * t.element_size() / 1e6
            for _, t in self.engine.get_per_tensor_param(dtype=dtype, merge_lora=True)
        )
        return {"seconds": seconds, "mbytes": mbytes}


if __name__ == "__main__":
    sys.exit(main())
