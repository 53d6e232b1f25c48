#!/usr/bin/env bash
# The CPU quickstart step by step (what `make run` does): GRPO + LoRA on SmolLM2-135M-Instruct, built-in arithmetic task.
set -euo pipefail
python -m app.import_model --source smollm2-135m-instruct --output models/smollm2-135m-instruct
python -m app.prepare arithmetic --output data/arithmetic
python -m app.train --config-name quickstart "$@"
python -m app.plot outputs/quickstart --output outputs/quickstart/reward_curve.png
