"""A reward function that hangs on one call (the first sample of step 1, marked in `marker_dir`): the run must cut
it off after `reward_model.timeout_s`, score it 0, count it, and go on. Otherwise 1 when the answer's digits appear."""

import time
from pathlib import Path


def compute_score(data_source, solution_str, ground_truth, extra_info=None, *, marker_dir):
    marker = Path(marker_dir) / "hung"
    if not marker.exists():
        marker.write_text("1")
        time.sleep(3600)  # never returns: the worker is killed at the timeout
    return float(str(ground_truth) in solution_str)
