"""The console of a run: one line per step, printed by the driver, with a progress bar when stdout is a terminal.

Rank 0 (the `console` logger, `ProgressWriter`) appends each step's few watched metrics to `<run dir>/progress.jsonl`;
the driver follows that file (`follow_progress`) and prints. A bar drawn from inside a Ray worker does not render:
Ray streams worker output line by line, so carriage returns turn every redraw into a new line. The driver owns a
real terminal. On a multi-node cluster whose nodes do not share the run folder the driver sees no file and prints
no step lines; metrics.jsonl and the other loggers are unaffected.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from pathlib import Path
from typing import Iterator, Optional

PROGRESS_FILE = "progress.jsonl"
# critic/score is the trained batch; reward/score every sample generated (they differ under dynamic sampling)
WATCHED = ("critic/score/mean", "reward/score/mean", "val-core/reward/mean", "timing_s/step")
POLL_S = 0.5


class ProgressWriter:
    """Rank 0's side: a header line {total_steps, start_step}, then {step, watched metrics} per step."""

    def __init__(self, path: Path, total_steps: int, start_step: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a")  # a restarted worker group appends a new header; the reader takes the latest
        self._write({"total_steps": total_steps, "start_step": start_step})

    def _write(self, row: dict) -> None:
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._write({"step": step, **{k: float(metrics[k]) for k in WATCHED if k in metrics}})

    def close(self) -> None:
        self._file.close()


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


class StepLines:
    """Turns the progress file's rows into console lines; keeps the step times for the ETA."""

    def __init__(self) -> None:
        self.total: Optional[int] = None
        self.start: int = 0
        self.last_step = -1
        self._step_seconds: list[float] = []

    def line(self, row: dict) -> Optional[str]:
        if "total_steps" in row:
            self.total, self.start = int(row["total_steps"]), int(row.get("start_step", 0))
            return None
        step = int(row["step"])
        if step <= self.last_step:  # a restarted worker group repeats steps already shown
            return None
        self.last_step = step
        val = row.get("val-core/reward/mean")
        if "timing_s/step" not in row:  # a validation outside a step: before training, or a validation-only run's
            if val is None:
                return None
            return (
                f"validation before training: reward {val:.3f}"
                if step == 0
                else f"validation at step {step}: reward {val:.3f}"
            )
        self._step_seconds.append(row["timing_s/step"])
        parts = [f"step {step}/{self.total}" if self.total else f"step {step}"]
        if "critic/score/mean" in row:
            reward = f"reward {row['critic/score/mean']:.3f}"
            # only dynamic sampling trains on fewer samples than were scored (the overlong penalty alone also sets the
            # two means apart); the trained batch's mean is summed in float32, all samples' in float64, so one mean
            # may differ in its 8th digit and even print differently on a rounding boundary (0.2125)
            every = row.get("reward/score/mean")
            filtered = "filter_groups/generated_groups" in row
            if filtered and every is not None and abs(every - row["critic/score/mean"]) > 1e-6:
                reward += f" (all samples {every:.3f})"
            parts.append(reward)
        if val is not None:
            parts.append(f"validation {val:.3f}")
        parts.append(f"{row['timing_s/step']:.1f} s")
        if self.total:
            mean = sum(self._step_seconds) / len(self._step_seconds)
            parts.append(f"ETA {format_duration(mean * max(0, self.total - step))}")
        return " | ".join(parts)


class _Follower:
    def __init__(self, path: Path, out=None) -> None:
        self.path = path
        self.out = out or sys.stdout
        self.lines = StepLines()
        self._offset = 0
        self._bar = None
        self._bar_wanted = hasattr(self.out, "isatty") and self.out.isatty()

    def poll(self) -> None:
        """Print what the file gained since the last poll (complete lines only)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size < self._offset:  # replaced: read it from the start (steps already shown are skipped)
            self._offset = 0
        with self.path.open() as f:
            f.seek(self._offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind("\n") + 1]
        self._offset += len(complete.encode())
        for raw in complete.splitlines():
            if raw.strip():
                self._show(json.loads(raw))

    def _show(self, row: dict) -> None:
        text = self.lines.line(row)
        if self._bar_wanted and self.lines.total and self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.lines.total,
                initial=self.lines.start,
                desc="train",
                unit="step",
                file=self.out,
                dynamic_ncols=True,
                leave=True,
            )
        if text is not None:
            if self._bar is not None:
                self._bar.write(text, file=self.out)
                self._bar.update(max(0, self.lines.last_step - self._bar.n))
            else:
                print(text, file=self.out, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


@contextlib.contextmanager
def follow_progress(out_dir: Path, out=None) -> Iterator[None]:
    """Print the run's step lines while the block runs (on the driver, around the trainer's fit)."""
    path = Path(out_dir) / PROGRESS_FILE
    path.unlink(missing_ok=True)  # an earlier run's lines are not this run's
    follower = _Follower(path, out)
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(POLL_S):
            follower.poll()

    thread = threading.Thread(target=loop, name="rayrl-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        follower.poll()  # the last step's line
        follower.close()
