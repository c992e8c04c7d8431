#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD/fuzz for SECONDS each, seeded from tests/fuzz/corpus/<target>
# (for the snapshot parsers: slices of the real PyTorch snapshots in ../shared, small enough for
# -max_len). A crash fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
# UBSan only prints and goes on by default: make undefined behaviour a failure like a crash.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
BUILD=${1:-build-fuzz}
SECONDS_EACH=${2:-10}
shopt -s nullglob
targets=("$BUILD"/fuzz/*)
if [ ${#targets[@]} -eq 0 ]; then echo "fuzz: no targets in $BUILD/fuzz"; exit 1; fi
for t in "${targets[@]}"; do
  name=$(basename "$t")
  work=$(mktemp -d); seeds=()
  [ -d "tests/fuzz/corpus/$name" ] && seeds+=("tests/fuzz/corpus/$name")
  echo "fuzz: $name for ${SECONDS_EACH}s"
  if ! "$t" -max_total_time="$SECONDS_EACH" -max_len=65536 -rss_limit_mb=2048 -artifact_prefix="$work/" \
       "$work" "${seeds[@]}" > "$work/log" 2>&1; then
    tail -50 "$work/log"; echo "fuzz: $name FAILED (artifacts in $work)"; exit 1
  fi
  grep -E "^(Done|#[0-9]+ *DONE)" "$work/log" | tail -1 || true
  rm -rf "$work"
done
