"""Run a function as two data-parallel ranks would: two threads, each with its part of a batch and a `batch_sum`
(algos.masked.BatchSum) that all-reduces between them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import torch


class _AllReduce:
    """A sum over two threads: each hands in its tensor and gets both summed, in the order they call."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=30)  # a rank that never arrives fails the test, not hangs it
        self.slots: list[Any] = [None, None]

    def for_rank(self, rank: int) -> Callable[[torch.Tensor], torch.Tensor]:
        def batch_sum(tensor: torch.Tensor) -> torch.Tensor:
            self.slots[rank] = tensor
            self.barrier.wait()
            total = self.slots[0] + self.slots[1]
            self.barrier.wait()  # both have read before either hands in its next tensor
            return total

        return batch_sum


def on_two_ranks(fn: Callable[..., Any], parts: Sequence[dict[str, Any]]) -> list[Any]:
    """[fn(**parts[0], batch_sum=...), fn(**parts[1], batch_sum=...)], run at once; a rank's error is raised here."""
    reduce = _AllReduce()
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(fn, **part, batch_sum=reduce.for_rank(rank)) for rank, part in enumerate(parts)]
        return [future.result() for future in futures]


class TwoRankEngine:
    """The engine's `all_reduce(tensor, op)` ("sum", "mean", "max") between two threads, as rank `dp_rank` sees it."""

    dp_world_size = 2

    def __init__(self, rank: int, exchange: _AllReduce) -> None:
        self.dp_rank, self._exchange = rank, exchange

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        exchange = self._exchange
        exchange.slots[self.dp_rank] = tensor
        exchange.barrier.wait()
        both = torch.stack(exchange.slots)
        exchange.barrier.wait()
        return {"sum": both.sum(0), "mean": both.mean(0), "max": both.max(0).values}[op]


def with_two_engines(fn: Callable[[TwoRankEngine], Any]) -> list[Any]:
    """[fn(rank 0's engine), fn(rank 1's engine)], run at once; a rank's error is raised here."""
    exchange = _AllReduce()
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(fn, TwoRankEngine(rank, exchange)) for rank in range(2)]
        return [future.result() for future in futures]
