#!/usr/bin/env bash
# Run HERE (a machine with Debian's package mirror) before a GPU check: the GPU machine has CUDA,
# CMake, ninja and python3+torch, but none of the Debian -dev packages memcomm builds against.
# This downloads them and unpacks them into .deps/root (git-ignored), which the device tool carries
# (`carry: [".deps"]`) and scripts/gpu-check.sh puts on CMake's search path.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(catch2 libcli11-dev nlohmann-json3-dev libfmt-dev libfmt9 libzstd-dev libzstd1 liblz4-dev liblz4-1
      libxxhash-dev libxxhash0 libgloo-dev
      libbenchmark-dev libbenchmark1debian zlib1g-dev libsimdjson-dev libsimdjson14)
rm -rf .deps && mkdir -p .deps/debs .deps/root
(cd .deps/debs && apt-get download "${PKGS[@]}" >/dev/null)
for d in .deps/debs/*.deb; do dpkg -x "$d" .deps/root; done
# zlib1g-dev's libz.so points at the runtime library it does not ship, and CMake would then take
# its non-PIC libz.a, which the Python module cannot link: point it at the GPU machine's own.
rm -f .deps/root/usr/lib/x86_64-linux-gnu/libz.a
ln -sfn /usr/lib/x86_64-linux-gnu/libz.so.1 .deps/root/usr/lib/x86_64-linux-gnu/libz.so
rm -rf .deps/debs
echo "gpu-deps: unpacked ${#PKGS[@]} packages into .deps/root ($(du -sh .deps | cut -f1))"
