#!/usr/bin/env bash
# GPU check, for a machine with a GPU and python3 with torch (run by the device tool):
#   scripts/gpu-check.sh OUTDIR
# Configures against that python's torch with nvcc for sm_90, builds with all cores, runs the
# gpu-labelled tests and the GPU benchmarks, writes OUTDIR/report.md plus logs, and prints a short
# table last. Debian -dev packages come from .deps/root when the machine lacks them (scripts/gpu-deps.sh).
# Budget: MEMCOMM_GPU_BUDGET_S (default 470 s) for all steps: each step runs under what is left of
# it, and steps past it are reported as skipped, so the report always comes back from one device run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/results/gpu-$(date +%Y%m%d-%H%M)}
mkdir -p "$OUT"
start=$(date +%s)
PY=$(command -v python3)
export PATH="$PATH:/usr/local/cuda/bin"
prefix=()
if [ -d .deps/root/usr ]; then
  export CMAKE_PREFIX_PATH="$PWD/.deps/root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CPATH="$PWD/.deps/root/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$PWD/.deps/root/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$PWD/.deps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_PATH="$PWD/.deps/root/usr/lib/x86_64-linux-gnu/pkgconfig:$PWD/.deps/root/usr/share/pkgconfig"
fi
{
  echo "# memcomm GPU check"
  echo
  echo "- date: $(date -u +%FT%TZ)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo none)"
  echo "- torch: $($PY -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>&1)"
  echo "- nvcc: $(nvcc --version | tail -1)"
} > "$OUT/report.md"

status=()
budget=${MEMCOMM_GPU_BUDGET_S:-470}
step() {  # step NAME COMMAND...: runs within the budget's rest, logs to OUT/NAME.log, records the result
  local name=$1; shift
  local t0=$(date +%s) r rc
  local left=$(( budget - (t0 - start) ))
  if [ "$left" -le 15 ]; then status+=("$name|skipped (budget spent)|0"); return; fi
  timeout "$left" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  if [ $rc = 0 ]; then r=pass; elif [ $rc = 124 ]; then r="FAIL (budget spent)"; else r=FAIL; fi
  status+=("$name|$r|$(( $(date +%s) - t0 ))")
}

step configure cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMCOMM_PYTHON="$PY" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMEMCOMM_WITH_CUDA=ON -DMEMCOMM_WITH_VIEWER=OFF
step build cmake --build build-gpu -j"$(nproc)"
step gpu-tests ctest --test-dir build-gpu -L gpu --output-on-failure --timeout 240
[ -x build-gpu/bin/bench_cupti_overhead ] && step bench-cupti-overhead build-gpu/bin/bench_cupti_overhead 10 20 200
[ -x build-gpu/bin/bench_torch_cuda_alloc ] && step bench-torch-cuda-alloc build-gpu/bin/bench_torch_cuda_alloc
[ -x build-gpu/bin/bench_allocator ] && step bench-allocator build-gpu/bin/bench_allocator --benchmark_min_time=0.2
# The trainer on the GPU: one rank, then two ranks sharing the GPU (Gloo with CUDA tensors).
T=build-gpu/bin/memcomm-train
# The GPU machine may lack Debian's dataset-fashion-mnist: the CNN then trains on the synthetic set.
DATA=(); [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || DATA=(--dataset tabular)
step train-1rank-cuda timeout 120 $T --device cuda --model transformer --steps 60 --batch-size 16 \
  --amp bf16 --trace "$OUT/train1.mct" --summary-json "$OUT/train1.json"
step train-2rank-gloo-cuda timeout 150 $T --device cuda --nproc 2 --model cnn "${DATA[@]}" --steps 60 --accum 2 \
  --trace "$OUT/train2.mct" --summary-json "$OUT/train2.json"
step train-allocator-torch timeout 120 $T --device cuda --model cnn "${DATA[@]}" --steps 60 --allocator torch \
  --summary-json "$OUT/train-torch-alloc.json"
step train-mode-dp timeout 120 $T --device cuda --mode dp --model cnn "${DATA[@]}" --steps 40 --summary-json "$OUT/train-dp.json"
# Python DDP with the GPU machine's torch beside memcomm-train: one rank (NCCL), then two sharing the GPU (Gloo).
step compare-ddp-cuda-1rank timeout 150 $PY bench/trainer/compare_ddp.py --build build-gpu --device cuda --nproc 1 \
  --rounds 2 --steps 100
step compare-ddp-cuda-2rank timeout 200 $PY bench/trainer/compare_ddp.py --build build-gpu --device cuda --nproc 2 \
  --rounds 2 --steps 100 --models cnn
# CUPTI in the traces above (--cupti auto on a GPU): kernels, copies and driver memory per rank.
step trace-info build-gpu/bin/memcomm-trace info "$OUT/train1.rank0.mct" "$OUT/train2.rank0.mct" "$OUT/train2.rank1.mct"

{
  echo
  echo "| step | result | seconds |"
  echo "|---|---|---|"
  for s in "${status[@]}"; do IFS='|' read -r n r t <<< "$s"; echo "| $n | $r | $t |"; done
  echo
  echo "Total: $(( $(date +%s) - start )) s. Logs beside this file."
  echo
  echo '```'
  tail -n 30 "$OUT/gpu-tests.log" 2>/dev/null
  echo '```'
} >> "$OUT/report.md"
# The device tool returns at most 8 files: everything else travels in one archive beside the report.
# (Archived outside OUT first: tar fails on a folder that changes while it reads it.)
logs=$(mktemp --suffix=.tar.gz)
(cd "$OUT" && tar czf "$logs" --exclude=report.md . && find . -type f ! -name report.md -delete && mv "$logs" logs.tar.gz)
tail -n 45 "$OUT/report.md"
for s in "${status[@]}"; do [[ $s == *"|FAIL"* ]] && exit 1; done
exit 0
