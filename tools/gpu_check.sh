#!/usr/bin/env bash
# One command for a GPU machine with torch: build everything (CUDA for this GPU), run the C++ CPU
# tests and every GPU test (C++ and Python), compute-sanitizer memcheck + racecheck, `pip install .`
# and a check of the installed package, the GPU benchmarks (quick); print a one-screen summary, all
# within 10 minutes on an H100. Logs and results go to $OUT (or ./gpu_check_out).
#   GPU_CHECK_BENCH=quick|full|none (default quick) GPU_CHECK_SANITIZER=0 to skip the sanitizer
#   GPU_CHECK_MEMCHECK_FILTER='*Glu*' narrows memcheck
#   GPU_CHECK_PIP=0 skips `pip install .` and its check    CUDA_ARCH (default: this GPU's, e.g. 90)
#   GPU_CHECK_PYTEST_MARK='' runs the CPU tests too (default 'gpu or multigpu': CI runs the rest)
#   GPU_CHECK_PYTEST_ARGS="-k rms" narrows pytest         GPU_CHECK_E2E=1 adds the training benchmark
#   GPU_CHECK_E2E_ARGS="--compile --batch 4" passes options to it  GPU_CHECK_TESTS=0 skips the tests
#   GPU_CHECK_BENCHES="bench_glu bench_rope" runs only those benchmarks (default: all)
#   GPU_CHECK_DEMO=1 runs the training demo on CUDA (examples/train_demo.py, what `make demo` runs)
#   GPU_CHECK_DIST=1 adds the 2-GPU FSDP2/DDP benchmark (examples/distributed/train_fsdp.py)
#   GPU_CHECK_CTEST_JOBS=8 GPU tests at once; pytest and racecheck run beside them and memcheck
#   GPU_CHECK_CTEST_TIMEOUT=300 seconds one GPU test may run before ctest kills it
#   GPU_CHECK_PYTEST_WORKERS=N pytest processes (default 3/4 of the cores, at most 12; 1: one)
# Needs Google Highway (Debian/Ubuntu: libhwy-dev); a GPU machine without it and without a network
# takes it from .gpu_deps/hwy, an install prefix that tools/gpu_deps.sh copies from this machine's.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT_DIR=${OUT:-$PWD/gpu_check_out}
LOGS=$OUT_DIR/logs
mkdir -p "$LOGS"
PY=${PYTHON:-python3}
BUILD=build/gpu
JOBS=$(nproc)
ARCH=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)}
ARCH=${ARCH:-90}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
summary=()

step() {  # step NAME COMMAND...: runs it, logs to $LOGS/NAME.log, records status and time
  local name=$1; shift
  local t0=$SECONDS status
  echo ">>> $name" >&2
  if "$@" >"$LOGS/$name.log" 2>&1; then status=PASS; else status=FAIL; fi
  record "$name" "$status" $((SECONDS - t0))
}

record() {  # record NAME STATUS SECONDS: the summary line, with the log's last verdict
  local note
  note=$(grep -E "tests passed|passed|failed|error:|Error|SUMMARY" "$LOGS/$1.log" | tail -1 | sed "s/^=* *//" | cut -c1-90)
  summary+=("$(printf '%-14s %-5s %5ss  %s' "$1" "$2" "$3" "$note")")
  [ "$2" = PASS ]
}

# step_in_background NAME COMMAND...: a step that runs beside the steps after it (host-bound work
# such as pytest beside the GPU-bound gtests, as one device call must fit in 10 minutes);
# step_join NAME waits for it and records it.
declare -A background_pids
step_in_background() {
  local name=$1; shift
  echo ">>> $name (in the background)" >&2
  (
    t0=$SECONDS
    if "$@" >"$LOGS/$name.log" 2>&1; then status=PASS; else status=FAIL; fi
    echo "$status $((SECONDS - t0))" >"$LOGS/$name.status"
  ) &
  background_pids[$name]=$!
}

step_join() {
  local status=FAIL seconds=0
  wait "${background_pids[$1]}"
  [ -f "$LOGS/$1.status" ] && read -r status seconds <"$LOGS/$1.status"
  rm -f "$LOGS/$1.status"
  record "$1" "$status" "$seconds"
}

info() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -2
  date -u
}

if [ -d .gpu_deps/hwy ]; then
  export CMAKE_PREFIX_PATH=$PWD/.gpu_deps/hwy${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  hwy_lib=$(dirname "$(find "$PWD/.gpu_deps/hwy" -name 'libhwy.so*' | head -1)")
  export LD_LIBRARY_PATH=$hwy_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# A compiler without a shared libstdc++ (seen on a GPU image: CXX=/opt/gcc/bin/g++) would link a
# second, static copy into the torch module; prefer the system g++ then.
if [ -n "${CXX:-}" ] && [[ "$("$CXX" -print-file-name=libstdc++.so 2>/dev/null)" != /* ]] &&
  [ -x /usr/bin/g++ ]; then
  echo "gpu_check: $CXX has no shared libstdc++; using /usr/bin/g++ (also as nvcc's host compiler)" >&2
  export CXX=/usr/bin/g++
  # nvcc's host compiler adds its own library directories to the link line, so -lstdc++ would
  # still find that compiler's static libstdc++.a.
  export CUDAHOSTCXX=/usr/bin/g++
fi

configure_and_build() {
  local gtest=()
  [ -d .gpu_deps/googletest ] && gtest=(-DTIGON_GTEST_SOURCE_DIR="$PWD/.gpu_deps/googletest")
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIGON_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DTIGON_BUILD_TESTS=ON -DTIGON_BUILD_TORCH=ON \
    -DCMAKE_PREFIX_PATH="$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
    -DPython_EXECUTABLE="$(command -v "$PY")" "${gtest[@]}" &&
    cmake --build "$BUILD" -j "$JOBS"
}

# The torch module must link the shared libstdc++ torch uses (see bindings/torch/CMakeLists.txt).
link_check() {
  local so
  so=$(ls "$BUILD"/bindings/torch/_tigon_torch*.so | head -1)
  readelf -d "$so" | grep NEEDED
  readelf -d "$so" | grep -q 'libstdc++' || {
    echo "error: $so does not link libstdc++ dynamically; link command and flags:"
    ninja -C "$BUILD" -t commands "${so#"$BUILD"/}" | tail -1
    env | grep -iE '^(LDFLAGS|CXXFLAGS|CFLAGS|CXX|CC)='
    return 1
  }
}

ctest_cpu() { ctest --test-dir "$BUILD" -L cpu -j "$JOBS" --output-on-failure; }
# GPU tests in parallel (GPU_CHECK_CTEST_JOBS, default 8): they are small or host-bound, and ran
# side by side with pytest without a failure on an H100 (2026-12-05).
ctest_gpu() {
  ctest --test-dir "$BUILD" -L gpu -j "${GPU_CHECK_CTEST_JOBS:-8}" --output-on-failure \
    --timeout "${GPU_CHECK_CTEST_TIMEOUT:-300}"
}

# memcheck: every CUDA test but the >2^31-element ones (minutes under the tool) and the deliberate
# invalid-device error; racecheck (slower): the small and edge-case ones. Racecheck runs in the
# background beside the GPU tests and memcheck (each tool is bound by its own host-side work).
memcheck() {
  compute-sanitizer --tool memcheck --error-exitcode 1 "$BUILD/tests/tigon_cuda_tests" \
    --gtest_filter="${GPU_CHECK_MEMCHECK_FILTER:-*}-*Huge*:*InvalidDevice*"
}
racecheck() {
  compute-sanitizer --tool racecheck --error-exitcode 1 "$BUILD/tests/tigon_cuda_tests" \
    --gtest_filter='*Small*:*Edge*:CrossEntropyCudaSlices.*:*Strided*:*Unaligned*:*InPlace*:*Determin*:*Configs*:Slices/*v32776*:Slices/*v65544*:Slices/*v131080*:Slices/*rows1_*-*InvalidDevice*'
}

# pytest over GPU_CHECK_PYTEST_WORKERS processes (default: 3/4 of the cores, at most 12, since
# each holds a CUDA context on the one GPU; one CPU thread each; 1: one process) where
# pytest-xdist is installed. One process took 8+ minutes beside the GPU
# tests and the sanitizer on an H100; 6 workers of 2 threads took 424 s for 1684 tests, the last
# 3 minutes of it alone on a 16-core machine (2026-12-05), so more single-threaded workers.
# By default only the tests marked gpu or multigpu: the others are CI's (`make test`), and the
# slowest of them, the CPU torch.compile tests (115-142 s each on one thread, 2026-12-06), held
# pytest at 431 s, past what the GPU tests and memcheck take beside it.
pytest_all() {
  local workers=() threads=${OMP_NUM_THREADS:-} n=${GPU_CHECK_PYTEST_WORKERS:-$((JOBS * 3 / 4 < 12 ? JOBS * 3 / 4 : 12))}
  if [ "$n" -gt 1 ] && "$PY" -c 'import xdist' 2>/dev/null; then
    workers=(-n "$n")
    threads=${threads:-1}
  fi
  env ${threads:+OMP_NUM_THREADS=$threads} \
    TIGON_TORCH_LIBRARY="$(ls "$BUILD"/bindings/torch/_tigon_torch*.so | head -1)" PYTHONPATH=python \
    "$PY" -m pytest tests/python -q -rs -p no:cacheprovider --timeout 900 --durations=10 \
    -m "${GPU_CHECK_PYTEST_MARK-gpu or multigpu}" ${workers[@]+"${workers[@]}"} ${GPU_CHECK_PYTEST_ARGS:-}
}

# The package as users install it (its own build in build/py), then one CUDA op from the installed
# copy, away from the source tree, against torch's RMSNorm.
pip_install() {
  "$PY" -m pip install --no-build-isolation --no-deps -v . \
    -Ccmake.define.CMAKE_CUDA_ARCHITECTURES="$ARCH" &&
    (cd /tmp && "$PY" -c '
import torch, tigon
assert tigon.has_cuda_kernels(), "installed tigon has no CUDA kernels"
x = torch.randn(8, 4096, device="cuda")
w = torch.randn(4096, device="cuda")
torch.testing.assert_close(tigon.ops.rms_norm(x, w), torch.nn.functional.rms_norm(x, (4096,), w, 1e-6))
print("installed tigon", tigon.__version__, "from", tigon.__file__, "ran RMSNorm on", torch.cuda.get_device_name())')
}

# Every op's benchmark (the end-to-end training benchmark only with GPU_CHECK_E2E=1); results
# (CSV/JSON/PNG) go into the logs archive.
bench() {
  local mode=${GPU_CHECK_BENCH:-quick} args=() rc=0 script name
  [ "$mode" = quick ] && args=(--quick)
  for script in benchmarks/python/bench_*.py; do
    name=$(basename "$script" .py)
    [ -n "${GPU_CHECK_BENCHES:-}" ] && [[ " $GPU_CHECK_BENCHES " != *" $name "* ]] && continue
    local opts=("${args[@]}")
    if [ "$name" = bench_e2e_train ]; then  # full size unless its own options say otherwise
      [ "${GPU_CHECK_E2E:-0}" != 1 ] && continue
      read -ra opts <<<"${GPU_CHECK_E2E_ARGS:-}"
    fi
    echo "=== $name"
    local t0=$SECONDS
    TIGON_TORCH_LIBRARY=$(ls "$BUILD"/bindings/torch/_tigon_torch*.so | head -1) PYTHONPATH=python \
      "$PY" "$script" --device cuda --out "$LOGS/results" "${opts[@]}" ||
      { rc=1; echo "FAILED: $name"; }
    echo "=== $name took $((SECONDS - t0)) s"
  done
  return $rc
}

# The README's `make demo` job on this GPU (HF vs tigon, bf16, the CUDA default size).
demo() {
  TIGON_TORCH_LIBRARY=$(ls "$BUILD"/bindings/torch/_tigon_torch*.so | head -1) PYTHONPATH=python \
    "$PY" examples/train_demo.py --device cuda --out "$LOGS/demo"
}

# Multi-GPU training, HF vs tigon (docs/benchmarks.md), with GPU_CHECK_DIST=1 on >= 2 GPUs.
dist_bench() {
  local n cfg
  n=$(nvidia-smi -L | wc -l)
  [ "$n" -ge 2 ] || { echo "needs 2 GPUs, found $n"; return 1; }
  mkdir -p "$LOGS/results"
  for cfg in "fsdp" "fsdp --grad-ckpt" "ddp"; do
    echo "=== dist $cfg"
    TIGON_TORCH_LIBRARY=$(ls "$BUILD"/bindings/torch/_tigon_torch*.so | head -1) PYTHONPATH=python \
      "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 \
      examples/distributed/train_fsdp.py --compare --model-size 1b --seq 2048 --batch 4 \
      --steps 30 --wrap $cfg --out "$LOGS/results/dist_${cfg// /_}.json" || return 1
  done
}

step info info
if step build configure_and_build; then
  step link-check link_check
  pip=${GPU_CHECK_PIP:-1}
  if [ "${GPU_CHECK_TESTS:-1}" = 1 ]; then
    step ctest-cpu ctest_cpu
    sanitize=${GPU_CHECK_SANITIZER:-1}
    step_in_background pytest pytest_all
    [ "$sanitize" = 1 ] && step_in_background racecheck racecheck
    step ctest-gpu ctest_gpu
    # pip's build beside memcheck, one host-bound process that leaves most cores idle (on an H100,
    # 2026-12-06, pytest had finished before the GPU tests did).
    [ "$pip" = 1 ] && step_in_background pip-install pip_install
    [ "$sanitize" = 1 ] && step memcheck memcheck
    [ "$sanitize" = 1 ] && step_join racecheck
    step_join pytest
    [ "$pip" = 1 ] && step_join pip-install
  elif [ "$pip" = 1 ]; then
    step pip-install pip_install
  fi
  [ "${GPU_CHECK_DEMO:-0}" = 1 ] && step demo demo
  [ "${GPU_CHECK_BENCH:-quick}" != none ] && step bench bench
  [ "${GPU_CHECK_DIST:-0}" = 1 ] && step dist-bench dist_bench
fi

echo
echo "== tigon gpu_check: $(head -2 "$LOGS/info.log" | tail -1), $SECONDS s in all =="
printf '%s\n' "${summary[@]}"
[ -f "$LOGS/bench.log" ] && grep -E "^=== |copy ceiling|FAILED" "$LOGS/bench.log"
[ -f "$LOGS/demo.log" ] && tail -12 "$LOGS/demo.log"
[ -f "$LOGS/dist-bench.log" ] && grep -E "^=== |tok/s over|loss agreement" "$LOGS/dist-bench.log"
tar -C "$OUT_DIR" -czf "$OUT_DIR/logs.tgz" logs && rm -rf "$LOGS"
! printf '%s\n' "${summary[@]}" | grep -q " FAIL "
