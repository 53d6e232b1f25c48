"""A reward function that kills the process it runs in, once: at the first sample of step 2 (it counts its calls in
`marker_dir`). With `reward_model.num_workers=0` that process is the Ray Train worker, so a run sees a worker die
mid-step, after step 1's checkpoint. Otherwise it scores 1 when the answer's digits appear in the response."""

import os
import signal
from pathlib import Path


def compute_score(data_source, solution_str, ground_truth, extra_info=None, *, marker_dir, samples_per_step):
    marker = Path(marker_dir)
    calls = marker / "calls"
    n = int(calls.read_text()) if calls.exists() else 0
    calls.write_text(str(n + 1))
    if n == samples_per_step and not (marker / "killed").exists():
        (marker / "killed").write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return float(str(ground_truth) in solution_str)
