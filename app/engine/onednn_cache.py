"""A smaller oneDNN primitive cache for a training process on a CPU.

torch runs bf16 matmuls on a CPU through oneDNN, which builds a primitive for each distinct shape and keeps up to 1024
of them. Packed micro-batches have a new token count almost every time, so the cache mostly holds shapes that never
come back. `python bench/actor_memory.py` (make run's update shape, 10-14 updates): the process after the last update
2.28-2.48 GiB with the default cache, 1.97-2.21 with 128 entries (still more than one micro-batch's forward and
backward reuse across the 30 layers); the growth that remains is oneDNN's kernels, which this cache does not hold.
The update took 3.6% longer on average over six alternating pairs (-2% to +9%, inside this box's drift).
"""

from __future__ import annotations

import os

ENV = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
TRAINING_CAPACITY = 128


def bound_primitive_cache(capacity: int = TRAINING_CAPACITY) -> bool:
    """Set oneDNN's cache capacity for this process unless the environment already does (the user's value wins).

    oneDNN reads the variable when it first builds a primitive, so call this before the process's first matmul.
    Returns whether it set the value."""
    if ENV in os.environ:
        return False
    os.environ[ENV] = str(capacity)
    return True
