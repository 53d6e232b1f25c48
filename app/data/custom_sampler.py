"""verl's custom sampler of training prompts (`data.sampler.class_path` / `class_name`), as verl builds and feeds it.

The class is built once as `cls(data_source=rows, data_config=data)`: `rows` is the training set (`len(rows)`,
`rows[i]` a dict of verl's row fields, SamplerRows), `data` the `data` section as an OmegaConf DictConfig (verl's key
names; `data_config.sampler.<name>` holds the sampler's own settings). `iter(sampler)` yields dataset indices for
one epoch; consecutive `data.gen_batch_size` of them make a batch, and a last, smaller batch is dropped, as verl's
train loader does. Where the class defines `update(batch)` (verl's AbstractCurriculumSampler), the trainer hands it
every trained batch as a SamplerBatch (app.trainer.curriculum).

Resuming: a sampler with `state_dict()` / `load_state_dict()` gets back the state it had when the saved epoch began,
draws that epoch again up to the saved batch, then gets back the state of the saved position; one without draws every
batch of the run again. Either way a sampler whose order follows its seed and state continues where it stopped.
"""

from __future__ import annotations

import copy
import importlib
import itertools
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from app.data.dataset import PromptDataset
from app.data.errors import DataError
from app.data.sampler import BatchPosition

log = logging.getLogger(__name__)

PKG_PREFIX = "pkg://"  # verl's spelling for an importable module instead of a file


def load_sampler_class(class_path: str, class_name: Optional[str]) -> type:
    """The class `class_name` in `class_path` (a .py file, or pkg://<module>); a DataError names the key and what to
    change."""
    key = f"data.sampler.class_path={class_path}"
    if not class_name:
        raise DataError(f"{key} needs data.sampler.class_name, the class in it")
    if class_path.startswith(PKG_PREFIX):
        module_name = class_path[len(PKG_PREFIX) :].replace("/", ".")
        try:
            module = importlib.import_module(module_name)
        except Exception as err:
            raise DataError(f"{key}: importing module {module_name} failed: {type(err).__name__}: {err}") from None
    else:
        from algos.registry import load_module_from_file

        path = os.path.abspath(os.path.expanduser(class_path))
        if not os.path.isfile(path):
            raise DataError(f"{key}: {'a folder, not a .py file' if os.path.isdir(path) else 'no such file'}")
        try:
            module = load_module_from_file(path)
        except Exception as err:
            raise DataError(f"{key}: importing {path} failed: {type(err).__name__}: {err}") from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        import difflib

        classes = sorted(n for n, v in vars(module).items() if isinstance(v, type) and not n.startswith("_"))
        near = difflib.get_close_matches(class_name, classes, n=1)
        hint = f"; did you mean {near[0]}?" if near else f"; classes there: {', '.join(classes) or '(none)'}"
        raise DataError(f"data.sampler.class_name={class_name}: {class_path} defines no class {class_name}{hint}")
    return cls


class SamplerRows:
    """The training prompts as a sampler sees them: `rows[i]` is a dict of verl's row fields (`data_source`,
    `reward_model.ground_truth`, `extra_info`, `ability`, `raw_prompt` (the chat messages), `raw_prompt_ids` (the
    templated prompt's token ids), `index` (extra_info.index, 0 where the row has none, as verl) and `dataset_index`
    (i, the position the sampler yields)). `dataset` is the PromptDataset itself."""

    def __init__(self, dataset: PromptDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict[str, Any]:
        record = self.dataset[i]
        return {
            "data_source": record.data_source,
            "reward_model": {"ground_truth": record.ground_truth},
            "extra_info": record.extra_info,
            "ability": record.ability,
            "raw_prompt": record.messages,
            "raw_prompt_ids": record.prompt_ids,
            "index": (record.extra_info or {}).get("index", 0),
            "dataset_index": i,
        }

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))


@dataclass
class SamplerBatch:
    """One trained batch as `sampler.update(batch)` receives it, in verl DataProto's layout: `batch` holds tensors of
    `(samples, ...)` (`responses`, `response_mask`, `token_level_scores`, `token_level_rewards`, `advantages`, and
    `returns` / `values` where the estimator made them), `non_tensor_batch` numpy arrays of `(samples,)` (`uid`: the
    prompt's group, `dataset_index`: the index the sampler yielded, `index`, `data_source`, and each reward's extra
    fields such as `acc`), `meta_info` the step (`global_steps`, as verl) and the policy version. Rows are every
    rank's samples of the step, prompt-major: the `rollout.n` samples of a prompt are adjacent."""

    batch: dict[str, Any]
    non_tensor_batch: dict[str, Any]
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.non_tensor_batch["uid"])


class CustomBatchSampler(BatchPosition):
    """ResumableBatchSampler's interface (draw / next_batch, epoch, state_dict) over a user's sampler.

    Args:
        sampler: the built user sampler; `iter(sampler)` yields one epoch of dataset indices.
        dataset_size: prompts in the training set (each index must be below it).
        batch_size: indices per batch (data.gen_batch_size).
        name: `class_path:class_name`, for messages and to check a resumed state belongs to the same class.
    """

    def __init__(self, sampler: Any, dataset_size: int, batch_size: int, name: str) -> None:
        if batch_size <= 0:
            raise DataError(f"batch size must be positive, got {batch_size}")
        self.sampler = sampler
        self.dataset_size = dataset_size
        self.batch_size = batch_size
        self.name = name
        self._epoch = 0
        self._batch_in_epoch = 0
        self._indices: Optional[Iterator[Any]] = None
        self._epoch_state: Any = None  # the sampler's own state when this epoch's iterator was made

    def __len__(self) -> int:
        """Batches per epoch: `len(sampler)` (the dataset's size where it has no length) over the batch size."""
        try:
            size = len(self.sampler)
        except TypeError:
            size = self.dataset_size
        return size // self.batch_size

    @property
    def learns(self) -> bool:
        """The sampler takes each trained batch (verl's AbstractCurriculumSampler.update)."""
        return callable(getattr(self.sampler, "update", None))

    def draw(self) -> tuple[int, int, list[int]]:
        """(epoch, batch number in it, indices) of the next batch; an epoch ends when the sampler's iterator holds
        less than a batch."""
        indices = self._take()
        if indices is None:  # that epoch ended: the batch is the next epoch's first
            indices = self._take()
        epoch, number = self._epoch, self._batch_in_epoch - 1
        return epoch, number, indices

    def _take(self) -> Optional[list[int]]:
        """The next batch of this epoch, or None when it has no full batch left (the epoch then ends)."""
        if self._indices is None:
            self._epoch_state = self._own_state()
            self._indices = iter(self.sampler)
        indices = list(itertools.islice(self._indices, self.batch_size))
        if len(indices) < self.batch_size:
            if self._batch_in_epoch == 0:
                raise DataError(
                    f"data.sampler {self.name} yielded {len(indices)} indices for a whole epoch, fewer than one batch "
                    f"of data.gen_batch_size={self.batch_size}"
                )
            self._epoch, self._batch_in_epoch, self._indices = self._epoch + 1, 0, None
            return None
        self._batch_in_epoch += 1
        return [self._checked(i) for i in indices]

    def next_batch(self) -> list[int]:
        return self.draw()[2]

    def _checked(self, index: Any) -> int:
        try:
            value = int(index)
        except (TypeError, ValueError):
            value = None
        if value is None or value != index or not 0 <= value < self.dataset_size:
            raise DataError(
                f"data.sampler {self.name} yielded {index!r}: a sampler yields indices of the training set, integers "
                f"from 0 to {self.dataset_size - 1}"
            )
        return value

    def check(self) -> None:
        """Pre-flight: a first batch of valid indices, and a state a checkpoint can hold (the sampler is then spent:
        build another for the run)."""
        self.draw()
        state = self.state_dict()["state"]
        if state is not None:
            sampler_state_bytes(state)

    def update(self, batch: SamplerBatch) -> None:
        self.sampler.update(batch)

    def _own_state(self) -> Any:
        """A copy of the sampler's `state_dict()` (it moves on as it learns), None where it has none."""
        own = getattr(self.sampler, "state_dict", None)
        return copy.deepcopy(own()) if callable(own) else None

    def state_dict(self) -> dict[str, Any]:
        """The data position, and the sampler's own state where it has one: now, and when this epoch's iterator was
        made (an iterator may fix the epoch's order from the state it starts with)."""
        own = self._own_state()
        return {
            "custom_sampler": self.name,
            "epoch": self._epoch,
            "batch_in_epoch": self._batch_in_epoch,
            "dataset_size": self.dataset_size,
            "batch_size": self.batch_size,
            "state": None if own is None else {"now": own, "epoch_start": self._epoch_state},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()`'s position. With the sampler's own state: the epoch's iterator made again from
        the state it began with and drawn up to the position, then the state of the position put back; without one,
        every draw of the run made again."""
        for key, mine in (("custom_sampler", self.name), ("dataset_size", self.dataset_size)):
            if state.get(key) != mine:
                raise DataError(
                    f"cannot resume data order: the checkpoint's sampler has {key}={state.get(key)!r}, this run's "
                    f"{mine!r}; resuming needs the same data.sampler and training set"
                )
        if state.get("batch_size") != self.batch_size:
            raise DataError(
                f"cannot resume data order: checkpoint has batch_size={state.get('batch_size')!r}, this run has "
                f"{self.batch_size!r}; resuming needs the same dataset and batching"
            )
        restore = getattr(self.sampler, "load_state_dict", None)
        own = state.get("state") if callable(restore) else None
        if own is None and self.learns:
            log.warning(
                "data.sampler %s learns from each batch (update) but has no state_dict / load_state_dict: the resumed "
                "run draws its batches again, and what it learned before the checkpoint is lost",
                self.name,
            )
        target = (int(state["epoch"]), int(state["batch_in_epoch"]))
        self._epoch, self._batch_in_epoch, self._indices = 0, 0, None
        if own is not None:
            self._epoch = target[0]
            if target[1] and own["epoch_start"] is not None:
                restore(copy.deepcopy(own["epoch_start"]))
        while (self._epoch, self._batch_in_epoch) < target:
            self._take()
        if own is not None:
            restore(copy.deepcopy(own["now"]))


def _numpy_globals() -> list[Any]:
    """What torch's weights-only unpickler must be allowed to rebuild numeric numpy arrays and scalars (no objects)."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    kinds = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
    kinds += ("float16", "float32", "float64")
    return [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype] + [
        type(np.dtype(kind)) for kind in kinds
    ]


def save_sampler_state(state: Any, path: str | os.PathLike) -> None:
    """A sampler's `state_dict()` into `path`."""
    with open(path, "wb") as file:
        file.write(sampler_state_bytes(state))


def sampler_state_bytes(state: Any) -> bytes:
    """`state` as save_sampler_state writes it, read back first: a DataError says what a state may hold where it holds
    anything else (so the checkpoint that would not load is never written)."""
    import io

    import torch

    buffer = io.BytesIO()
    try:
        torch.save(state, buffer)
        load_sampler_state(io.BytesIO(buffer.getvalue()))
    except Exception as err:
        raise DataError(
            "data.sampler's state_dict() holds what a checkpoint does not load back: it may hold tensors, numeric "
            f"numpy arrays and scalars, numbers, strings, None, and lists, tuples and dicts of them ({err})"
        ) from None
    return buffer.getvalue()


def load_sampler_state(source: Any) -> Any:
    """What save_sampler_state wrote (a path or a file object), unpickling no object but numeric numpy data."""
    import torch

    with torch.serialization.safe_globals(_numpy_globals()):
        return torch.load(source, weights_only=True)


def build_custom_sampler(data_cfg: Any, dataset: PromptDataset, batch_size: int) -> CustomBatchSampler:
    """The user's sampler of `data.sampler`, built as verl builds it, in ResumableBatchSampler's interface."""
    from omegaconf import OmegaConf

    ref = data_cfg.sampler
    cls = load_sampler_class(ref.class_path, ref.class_name)
    config = OmegaConf.create(data_config_dict(data_cfg))
    name = f"{ref.class_path}:{ref.class_name}"
    try:
        sampler = cls(data_source=SamplerRows(dataset), data_config=config)
    except Exception as err:
        raise DataError(
            f"data.sampler {name}: {ref.class_name}(data_source=..., data_config=...) failed: {type(err).__name__}: "
            f"{err}"
        ) from err
    if not callable(getattr(sampler, "__iter__", None)):
        raise DataError(f"data.sampler {name}: {ref.class_name} has no __iter__; a sampler yields dataset indices")
    return CustomBatchSampler(sampler, len(dataset), batch_size, name)


def data_config_dict(data_cfg: Any) -> dict[str, Any]:
    """The `data` section as verl's sampler reads it: every key by verl's name, gen_batch_size resolved, and the
    sampler's own settings beside class_path and class_name under `sampler`."""
    import dataclasses

    plain = dataclasses.asdict(data_cfg)
    options = plain["sampler"].pop("options")
    plain["sampler"] |= options
    return plain
