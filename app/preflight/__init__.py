"""Driver-side pre-flight: what a run needs beyond a valid config (model folders, the tokenizer's chat template, the
custom reward file, a resumable checkpoint of this model, a free HTTP port, a cluster that answers), checked before
Ray starts. Each failure is a PreflightError: one line naming the key, path or value and what to change."""

from app.preflight.errors import PreflightError
from app.preflight.run import CHECKS, Check, run_preflight

__all__ = ["CHECKS", "Check", "PreflightError", "run_preflight"]
