#!/usr/bin/env bash
# valgrind memcheck over a short run of demos/train_toy:
# any invalid access, use of uninitialized memory, or definitely / indirectly
# lost block fails the test.
#
#   memcheck.sh TRAIN_TOY OUT_DIR NATIVE SANITIZE
#
# Exits 77 (CTest: skipped) when valgrind is missing, when the build uses
# AddressSanitizer (SANITIZE=ON; the two cannot run together), or when the
# library was built with -march=native (NATIVE=ON) on a CPU with AVX-512,
# which valgrind cannot decode: .ci/run runs this test in a portable build
# (XTGRAD_NATIVE=OFF).
set -euo pipefail
train_toy=$1
out=$2
native=${3:-OFF}
sanitize=${4:-OFF}
if ! command -v valgrind >/dev/null 2>&1; then
  echo "memcheck: valgrind is not installed (apt-get install valgrind): skipped"
  exit 77
fi
if [[ $sanitize == ON ]]; then
  echo "memcheck: an AddressSanitizer build cannot run under valgrind: skipped"
  exit 77
fi
if [[ $native == ON ]] && grep -qw avx512f /proc/cpuinfo; then
  echo "memcheck: -march=native on an AVX-512 CPU, which valgrind cannot run: skipped" \
    "(configure with -DXTGRAD_NATIVE=OFF, as .ci/run does)"
  exit 77
fi
rm -rf "$out"
mkdir -p "$out"
log=$out/valgrind.log
# One BLAS thread: valgrind serializes threads anyway, and OpenBLAS's thread
# pool only adds noise.
status=0
OPENBLAS_NUM_THREADS=1 valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
  --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
  --track-origins=yes --log-file="$log" \
  "$train_toy" --steps 50 --seed 1 --out "$out/run" >"$out/stdout.txt" 2>&1 || status=$?
grep -E "ERROR SUMMARY|definitely lost|indirectly lost|Invalid|uninitialised" "$log" || true
if [[ $status -ne 0 ]]; then
  echo "memcheck: FAILED (exit $status); the full report is in $log:"
  cat "$log"
  exit 1
fi
echo "memcheck: no errors and no leaks"
