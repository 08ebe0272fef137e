#!/usr/bin/env bash
# The main job: installs what is missing, builds, then trains and evaluates the
# default config (train lengths 4-16, evaluation up to 128) in a new run
# directory runs/ordering-<timestamp> (earlier runs are kept).
# Extra arguments go to `posenc train` (e.g. --set model.positional.type=sinusoidal).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
./build/posenc train configs/ordering.json --out "runs/ordering-$(date +%Y%m%d-%H%M%S)" "$@"
