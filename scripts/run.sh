#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs the default
# comparison (configs/ordering_compare.json: every scheme x both attention
# variants, trained on lengths 4-16, evaluated up to 128) into
# runs/ordering_compare/: summary.md, figures/ and report.md.
# Rerunning continues where it stopped (finished runs are kept).
# Extra arguments go to `posenc compare` (e.g. --full for 3 seeds and CLS pooling, --jobs 1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
./build/posenc compare configs/ordering_compare.json "$@"
