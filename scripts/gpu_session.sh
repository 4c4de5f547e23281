#!/bin/bash
# One device-machine call of a GPU session (kernels/cuda/README.md says how to
# pack .devtools first): the CUDA op tests and greedy identity on the GPU, the
# CLI's greedy text at --gpu-layers 0/-1/3, `bench:gpu` on the 1.1B random
# llama (Q4_0, Q8_0, F16), then `deno task bench` on the machine's CPU cores
# against llama.cpp's own pick of CPU variant. The device has no network and
# no deno: deno, the llama.cpp oracle and the one fixture come from .devtools;
# `deno task` is avoided there (it installs the npm imports first and fails
# offline), `deno run` of each entry point needs none of them.
#
#   bash scripts/gpu_session.sh [SHAPE=1.1b] [THREADS=nproc] [END_S=470]
#
# END_S: seconds from the start by which the CPU bench is cut off (its
# finished files are already printed). SKIP_TESTS=1 leaves out the tests.
# Logs go to $OUT (the device tool's folder) or /tmp/out.
set -u
cd "$(dirname "$0")/.."
SHAPE=${1:-1.1b}
TH=${2:-$(nproc)}
END_S=${3:-470}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[t+$(($(date +%s) - t0))s] $*"; }
if ! command -v deno >/dev/null || [ -n "${FORCE_DENO:-}" ]; then
  xz -dc .devtools/deno.xz >/tmp/deno && chmod +x /tmp/deno && export PATH=/tmp:$PATH
fi
export DENO_DIR=/tmp/denodir DENO_NO_UPDATE_CHECK=1
mkdir -p .cache && tar -C .cache -xJf .devtools/oracle.tar.xz
[ -e ../shared ] || ln -sfn "$PWD/.devtools/shared" ../shared
{
  el sys
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node\(|L3'
  grep -m1 flags /proc/cpuinfo
  free -g | head -2
  uptime
  deno --version | head -1
  nvcc --version | tail -2
} >"$OUT/sys.txt" 2>&1
cat "$OUT/sys.txt"
el build
deno run -A ffi/build.ts >/dev/null && deno run -A ffi/cuda_build.ts 2>&1 | tail -3
# The models for both benches, written while the tests run.
deno run -A scripts/gpu_session_models.ts "$SHAPE" "$TH" >"$OUT/prep.txt" 2>&1 &
PREP=$!
if [ -z "${SKIP_TESTS:-}" ]; then
  el cuda tests
  LLM_EDGE_CUDA_NMSE_LOG=1 timeout 200 deno test -A --no-check=remote tests/cuda_build_test.ts \
    tests/cuda_ops_test.ts tests/cuda_backend_test.ts >"$OUT/cuda_tests.txt" 2>&1
  RC=$?
  echo "cuda tests rc=$RC"
  grep -v '^nmse' "$OUT/cuda_tests.txt" | sed 's/\x1b\[[0-9;]*m//g' |
    grep -E 'passed|failed|FAILED|=>|Error|error' | head -40
  if [ $RC != 0 ]; then
    el sanitizer
    timeout 90 compute-sanitizer --tool memcheck --print-limit 30 deno test -A --no-check=remote \
      tests/cuda_ops_test.ts --filter "NMSE per case" >"$OUT/sanitizer.txt" 2>&1
    grep -E "ERROR SUMMARY|Invalid|at 0x" "$OUT/sanitizer.txt" | head -20
  fi
fi
el generate
for n in 0 -1 3; do
  echo "--gpu-layers $n:"
  timeout 60 deno run -A lib/cli/generate.ts -m models/tolstoy-6m-f16.gguf -p "Happy families" \
    -n 32 --temp 0 --gpu-layers $n 2>&1
  echo
done >"$OUT/gen.txt" 2>&1
cat "$OUT/gen.txt"
el wait for the models
wait $PREP
tail -5 "$OUT/prep.txt"
el gpu bench
for t in q4_0 q8_0 f16; do
  f=.cache/bench/random-$SHAPE-f16$([ $t = f16 ] || echo "-$t").gguf
  timeout 60 deno run -A bench/gpu.ts -m "$f" --gpu-layers -1 -p 512 -n 128 --reps 3 2>&1
done >"$OUT/gpu_bench.txt"
cat "$OUT/gpu_bench.txt"
el cpu bench
uptime
left=$((END_S - ($(date +%s) - t0)))
echo "cpu bench: ${left}s left"
timeout $left deno run -A bench/bench.ts --shape "$SHAPE" --threads "$TH" -p 512 -n 128 --reps 3 \
  --types q4_0,q8_0,q4_k_m --no-tokenizer --no-sampling >"$OUT/bench_cpu.txt" 2>&1
echo "cpu bench rc=$?"
grep -v '^bench:' "$OUT/bench_cpu.txt"
el done
uptime
