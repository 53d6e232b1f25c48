"""Ray Tune sweeps of training runs: the sweep spec, the trial trainable, resources, results. Entry: `app.sweep`."""

from app.tuning.runner import SweepOutcome, run_sweep
from app.tuning.spec import ParamSpace, SweepSpec, parse_sweep, resolve_params

__all__ = ["ParamSpace", "SweepOutcome", "SweepSpec", "parse_sweep", "resolve_params", "run_sweep"]
