"""Loading and validating a config imports neither torch nor Ray (issue 44: a config mistake ends in seconds): the
checks read the algorithms' names and traits from algos.catalog, not the tensor code. Run in a fresh interpreter,
since this test session has imported both already."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]

LOAD_QUICKSTART = """
import sys

import app.config
from hydra import compose, initialize_config_dir

with initialize_config_dir(config_dir=sys.argv[1], version_base=None):
    cfg = app.config.load_config(compose(config_name="quickstart"))
filled = cfg.actor_rollout_ref.rollout.response_length == cfg.data.max_response_length  # by validation
print(cfg.algorithm.adv_estimator, filled, *sorted(m for m in ("torch", "ray") if m in sys.modules))
"""


def test_the_quickstart_config_loads_and_validates_without_torch_or_ray():
    done = subprocess.run(
        [sys.executable, "-c", LOAD_QUICKSTART, str(ROOT / "configs")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # validated (the quickstart leaves rollout.response_length to be derived), and nothing heavy imported on the way
    assert done.stdout.split() == ["grpo", "True"], done.stdout
