#!/bin/bash
# One device-machine call of a GPU session (kernels/cuda/README.md says how to
# pack .devtools first). The device has no network and no deno: deno, the
# llama.cpp oracle, the npm packages the server imports and the one fixture
# come from .devtools; `deno task` is avoided there (it installs every npm
# import of deno.json first and fails offline), `deno run` of each entry point
# needs only its own.
#
#   STEPS="..." bash scripts/gpu_session.sh [SHAPE=1.1b] [THREADS=nproc] [END_S=470]
#
# STEPS (default "cuda gen gpubench cpubench"), in this order when named:
#   cuda      the CUDA op tests and greedy identity on the GPU (while the
#             bench models are written)
#   gen       the CLI's greedy text at --gpu-layers 0/-1/3
#   gpubench  `bench:gpu` on the random llama (Q4_0, Q8_0, F16)
#   server    `bench:server` on tolstoy-6m, 1 and 16 clients (SERVER_S seconds each)
#   paired    `bench:paired` at THREADS on F16, Q8_0, Q4_0, Q4_K_M with --pp 512
#   profile   LE_PROFILE per-op times of a generation at THREADS (F16, Q8_0)
#   fast      `deno task bench` at THREADS on the Q8_0 file, ours with the
#             default and then the fast matmulOrder (--fast)
#   cpubench  `deno task bench` at THREADS against llama.cpp's own CPU variant
#             (cut off at END_S seconds from the start; finished files print)
# MODEL_TYPES: the quantized files to write (default q8_0,q4_0,q4_k_m);
# SERVER_ARGS: more flags for bench:server (e.g. --threads 4).
# Logs go to $OUT (the device tool's folder) or /tmp/out.
set -u
cd "$(dirname "$0")/.."
SHAPE=${1:-1.1b}
TH=${2:-$(nproc)}
END_S=${3:-470}
OUT=${OUT:-/tmp/out}
STEPS=${STEPS:-cuda gen gpubench cpubench}
SERVER_S=${SERVER_S:-30}
CPU_TYPES=${CPU_TYPES:-q4_0,q8_0,q4_k_m}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[t+$(($(date +%s) - t0))s] $*"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }
left() { echo $((END_S - ($(date +%s) - t0))); }
if ! command -v deno >/dev/null || [ -n "${FORCE_DENO:-}" ]; then
  xz -dc .devtools/deno.xz >/tmp/deno && chmod +x /tmp/deno && export PATH=/tmp:$PATH
fi
export DENO_DIR=${DENO_DIR:-/tmp/denodir} DENO_NO_UPDATE_CHECK=1
mkdir -p "$DENO_DIR" .cache && tar -C .cache -xJf .devtools/oracle.tar.xz
[ -f .devtools/npm.tar.xz ] && tar -C "$DENO_DIR" -xJf .devtools/npm.tar.xz
[ -e ../shared ] || ln -sfn "$PWD/.devtools/shared" ../shared
{
  el sys
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node\(|L3|MHz'
  grep -m1 flags /proc/cpuinfo
  free -g | head -2
  uptime
  deno --version | head -1
  nvcc --version | tail -2
} >"$OUT/sys.txt" 2>&1
cat "$OUT/sys.txt"
el build
deno run -A ffi/build.ts >/dev/null || echo "cpu build failed"
if has cuda || has gen || has gpubench; then deno run -A ffi/cuda_build.ts 2>&1 | tail -3; fi
f16=.cache/bench/random-$SHAPE-f16.gguf
model() { echo ".cache/bench/random-$SHAPE-f16$([ "$1" = f16 ] || echo "-$1").gguf"; }
# The bench models, written while the GPU tests run.
PREP=
if has gpubench || has paired || has profile || has fast || has cpubench; then
  deno run -A scripts/gpu_session_models.ts "$SHAPE" "$TH" "${MODEL_TYPES:-q8_0,q4_0,q4_k_m}" \
    >"$OUT/prep.txt" 2>&1 &
  PREP=$!
fi
if has cuda; then
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
if has gen; then
  el generate
  for n in 0 -1 3; do
    echo "--gpu-layers $n:"
    timeout 60 deno run -A lib/cli/generate.ts -m models/tolstoy-6m-f16.gguf -p "Happy families" \
      -n 32 --temp 0 --gpu-layers $n 2>&1
    echo
  done >"$OUT/gen.txt" 2>&1
  cat "$OUT/gen.txt"
fi
if [ -n "$PREP" ]; then
  el wait for the models
  wait $PREP
  tail -5 "$OUT/prep.txt"
fi
if has gpubench; then
  el gpu bench
  for t in q4_0 q8_0 f16; do
    timeout 60 deno run -A bench/gpu.ts -m "$(model $t)" --gpu-layers -1 -p 512 -n 128 --reps 3 2>&1
  done >"$OUT/gpu_bench.txt"
  cat "$OUT/gpu_bench.txt"
fi
if has server; then
  el server bench
  timeout $((SERVER_S * 2 + 60)) deno run -A bench/server.ts --clients 1,16 --seconds "$SERVER_S" \
    --warmup 10 ${SERVER_ARGS:-} >"$OUT/server.txt" 2>&1
  echo "server bench rc=$?"
  grep -v 'RSS MiB each second' "$OUT/server.txt"
fi
if has paired; then
  el paired bench, $TH threads
  for t in f16 q8_0 q4_0 q4_k_m; do
    [ "$(left)" -gt 30 ] || break
    uptime
    timeout $(($(left) - 10)) deno run -A bench/paired.ts -m "$(model $t)" -t "$TH" --rounds 6 \
      --burst 16 --pp 512 2>&1
  done >"$OUT/paired.txt" 2>&1
  cat "$OUT/paired.txt"
fi
if has profile; then
  el profile, $TH threads
  for t in f16 q8_0; do
    [ "$(left)" -gt 30 ] || break
    echo "== $t"
    LE_PROFILE=1 timeout 60 deno run -A lib/cli/generate.ts -m "$(model $t)" -p "Hi" -n 32 \
      --temp 0 -t "$TH" 2>&1 | grep -E 'generation|le_profile'
  done >"$OUT/profile.txt" 2>&1
  cat "$OUT/profile.txt"
fi
if has fast; then
  el fast matmul order, $TH threads
  for f in "" --fast; do
    [ "$(left)" -gt 30 ] || break
    timeout "$(left)" deno run -A bench/bench.ts --model "$(model q8_0)" --threads "$TH" -p 512 \
      -n 128 --reps "${CPU_REPS:-3}" --no-tokenizer --no-sampling $f 2>&1 | grep -v '^bench:'
  done >"$OUT/fast.txt" 2>&1
  cat "$OUT/fast.txt"
fi
if has cpubench; then
  el cpu bench
  uptime
  echo "cpu bench: $(left)s left"
  timeout "$(left)" deno run -A bench/bench.ts --shape "$SHAPE" --threads "$TH" -p 512 -n 128 \
    --reps "${CPU_REPS:-3}" --types "$CPU_TYPES" --no-tokenizer --no-sampling >"$OUT/bench_cpu.txt" 2>&1
  echo "cpu bench rc=$?"
  grep -v '^bench:' "$OUT/bench_cpu.txt"
fi
el done
uptime
