#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD/fuzz for SECONDS each, seeded from tests/fuzz/corpus/<target>
# (for the snapshot parsers: slices of the real PyTorch snapshots in ../shared, small enough for
# -max_len). A crash fails the script.
# Targets run MEMCOMM_FUZZ_JOBS at a time (default: the number of cores), each one process on one
# core for its full SECONDS; their results are printed in target order once each batch is done.
set -euo pipefail
cd "$(dirname "$0")/.."
# UBSan only prints and goes on by default: make undefined behaviour a failure like a crash.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
BUILD=${1:-build-asan-fuzz}
SECONDS_EACH=${2:-10}
JOBS=${MEMCOMM_FUZZ_JOBS:-$(nproc)}
shopt -s nullglob
targets=("$BUILD"/fuzz/*)
if [ ${#targets[@]} -eq 0 ]; then echo "fuzz: no targets in $BUILD/fuzz"; exit 1; fi
# Targets that read one format share its seeds: every .mct reader starts from the replay's corpus too,
# the richest (viewer_mct_ingest_fuzz, from its one seed, took minutes to reach what those 29 cover).
# The Kineto readers share theirs alike, JSON and gzip, and the live session the stream decoder's.
declare -A shared_seeds=([viewer_mct_ingest_fuzz]=replay_mct_fuzz [profiler_trace_reader_fuzz]=replay_mct_fuzz
  [profiler_kineto_file_fuzz]=profiler_kineto_reader_fuzz
  [viewer_kineto_ingest_fuzz]="profiler_kineto_reader_fuzz profiler_kineto_file_fuzz"
  [viewer_live_session_fuzz]=profiler_stream_decoder_fuzz
  [replay_kineto_fuzz]="profiler_kineto_reader_fuzz profiler_kineto_file_fuzz")
failed=0
for ((i = 0; i < ${#targets[@]}; i += JOBS)); do
  batch=("${targets[@]:i:JOBS}"); pids=(); works=()
  for t in "${batch[@]}"; do
    name=$(basename "$t")
    work=$(mktemp -d); seeds=()
    [ -d "tests/fuzz/corpus/$name" ] && seeds+=("tests/fuzz/corpus/$name")
    for shared in ${shared_seeds[$name]:-}; do
      [ -d "tests/fuzz/corpus/$shared" ] && seeds+=("tests/fuzz/corpus/$shared")
    done
    echo "fuzz: $name for ${SECONDS_EACH}s"
    "$t" -max_total_time="$SECONDS_EACH" -max_len=65536 -rss_limit_mb=2048 -artifact_prefix="$work/" \
      "$work" "${seeds[@]}" > "$work/log" 2>&1 &
    pids+=($!); works+=("$work")
  done
  for j in "${!pids[@]}"; do
    name=$(basename "${batch[j]}"); work=${works[j]}
    if ! wait "${pids[j]}"; then
      tail -50 "$work/log"; echo "fuzz: $name FAILED (artifacts in $work)"; failed=1
      continue
    fi
    echo "fuzz: $name: $(grep -E "^(Done|#[0-9]+ *DONE)" "$work/log" | tail -1 || true)"
    rm -rf "$work"
  done
  [ $failed = 0 ] || exit 1
done
