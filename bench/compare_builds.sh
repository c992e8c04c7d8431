#!/usr/bin/env bash
# Side by side, in one run: the same benchmarks from two build folders (e.g. the commit before a
# restructuring and after it), alternated ROUNDS times so that both see the same machine load.
# Prints one line per benchmark and round, then the medians and the after/before ratio.
#
#   bench/compare_builds.sh BEFORE_BUILD AFTER_BUILD [ROUNDS (default 5)]
#
# What it runs from each build's bin/ (each must exist in both):
#   load:   bench_load TRACE 1        (a fresh process per load, as memcomm-view pays; CPU seconds of
#                                      "load + indexes", robust on a shared machine)
#   record: bench_profiler            (BM_RecordPretimed and BM_PhaseScope, ns per event, wall time)
#   replay: bench_replay --policy P SNAPSHOT (M replay events/s, median of its repeats; the largest
#           snapshot of ../shared/traces/pytorch-snapshots unless MEMCOMM_COMPARE_SNAPSHOT is set)
# The trace is written once with AFTER's bench_make_trace (MEMCOMM_COMPARE_EVENTS events, default 3e6).
set -euo pipefail
if [ $# -lt 2 ] || [ "${1:-}" = --help ]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = --help ] && exit 0 || exit 2
fi
before=$1 after=$2 rounds=${3:-5}
for b in "$before" "$after"; do
  for t in bench_load bench_profiler bench_replay bench_make_trace; do
    [ -x "$b/bin/$t" ] || { echo "compare_builds: $b/bin/$t is missing: build it first" >&2; exit 2; }
  done
done
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trace=$work/trace.mct
snapshot=${MEMCOMM_COMPARE_SNAPSHOT:-$(ls -S ../shared/traces/pytorch-snapshots/*.pickle 2>/dev/null | head -1)}
[ -f "$snapshot" ] || { echo "compare_builds: no snapshot (set MEMCOMM_COMPARE_SNAPSHOT)" >&2; exit 2; }
"$after/bin/bench_make_trace" "$trace" "${MEMCOMM_COMPARE_EVENTS:-3e6}" 2 >/dev/null

load_cpu() { "$1/bin/bench_load" "$trace" 1 | awk '/load \+ indexes/ { for (i = 1; i <= NF; i++) if ($i == "cpu") { print $(i+1); exit } }'; }
record_ns() {
  "$1/bin/bench_profiler" --benchmark_filter="$2" --benchmark_format=csv 2>/dev/null |
    awk -F, -v want="$3" 'index($1, want) == 2 { print $3; exit }'
}
replay_eps() {  # M events/s from the replay-speed table: | policy | events | seconds | M events/s | goal |
  "$1/bin/bench_replay" --policy "$2" "$snapshot" 2>/dev/null |
    awk -F'|' -v p="$2" '{ gsub(/ /, "", $2) } $2 == p && NF >= 6 { gsub(/ /, "", $5); print $5; exit }'
}

declare -A vals
measure() {  # name, build label, command...
  local name=$1 label=$2; shift 2
  local v; v=$("$@")
  printf '%-28s %-7s %s\n' "$name" "$label" "${v:-?}"
  vals[$name,$label]+="${v:-nan} "
}
for r in $(seq 1 "$rounds"); do
  for pair in "before:$before" "after:$after"; do
    label=${pair%%:*} dir=${pair#*:}
    measure "load+indexes cpu s" "$label" load_cpu "$dir"
    measure "record pretimed ns" "$label" record_ns "$dir" 'BM_RecordPretimed' 'BM_RecordPretimed/real_time/threads:1'
    measure "phase scope ns" "$label" record_ns "$dir" 'BM_PhaseScope$' 'BM_PhaseScope'
    measure "replay memcomm M ev/s" "$label" replay_eps "$dir" memcomm
    measure "replay pytorch M ev/s" "$label" replay_eps "$dir" pytorch
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo
printf '%-28s %14s %14s %8s\n' benchmark "before (med)" "after (med)" ratio
for name in "load+indexes cpu s" "record pretimed ns" "phase scope ns" "replay memcomm M ev/s" "replay pytorch M ev/s"; do
  b=$(echo "${vals[$name,before]}" | median) a=$(echo "${vals[$name,after]}" | median)
  printf '%-28s %14s %14s %8s\n' "$name" "$b" "$a" "$(awk -v a="$a" -v b="$b" 'BEGIN { if (b + 0 == 0) print "?"; else printf "%.3f", a / b }')"
done
