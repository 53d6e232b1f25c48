#!/usr/bin/env bash
# A Ray Tune sweep over the quickstart (configs/sweep/grpo_small.yaml): learning rate and KL coefficient, ASHA
# stopping weak trials on the validation reward. Results: outputs/sweeps/grpo_small/ (results.md, best.yaml).
set -euo pipefail
python -m app.sweep --config-name sweep/grpo_small search.num_samples=4 "$@"
python -m app.plot outputs/sweeps/grpo_small --output outputs/sweeps/grpo_small/curves.png
