#!/usr/bin/env bash
# The main job on the embedded default: sets up what is missing, builds Release into build/, and
# trains the CNN on Fashion-MNIST with 2 data-parallel ranks (Gloo on CPU), gradient accumulation 2,
# printing falling loss, the evaluation accuracy and the run summary.
# Extra arguments go to memcomm-train (e.g. scripts/demo.sh --steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Only what the demo runs: a full build is some 270 targets, most of them tests (scripts/test.sh).
MEMCOMM_BUILD_TARGETS=memcomm-train scripts/build.sh
mkdir -p out
build/bin/memcomm-train --nproc 2 --model cnn --dataset fashion-mnist --accum 2 --batch-size 32 \
  --steps 300 --log-interval 25 --trace out/demo.mct --summary-json out/demo-summary.json "$@"
echo "demo: summary written to $PWD/out/demo-summary.json"
echo "demo: open the trace (one file per rank) with: $PWD/build/bin/memcomm-view $PWD/out/demo.rank*.mct"
echo "      (the demo builds memcomm-train only; build the viewer with: cmake --build build --target memcomm-view)"
