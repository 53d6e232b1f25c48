"""Give freed heap memory back to the operating system.

glibc keeps memory that Python or torch freed in its arenas for reuse, so a process that once held a large
temporary (a weight payload, a batch's activations) keeps that resident size for the rest of its life.
``malloc_trim(0)`` returns the free pages. Every process of a job counts towards the machine's memory, so the
replica and the vLLM worker call this once a weight load's temporaries are gone. The trainer does not between steps:
its next update needs the same pages again, and faulting them back in cost more time than the memory was worth. It
does before a validation, where it idles holding its last update's high-water mark while the replicas generate the
validation answers, the moment a CPU run's memory peaked (docs/performance.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


@functools.cache
def _libc():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def release_free_heap() -> bool:
    """Collect garbage, then trim the heap; False where the C library has no ``malloc_trim`` (not glibc)."""
    gc.collect()
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is None:
        return False
    trim(0)
    return True
