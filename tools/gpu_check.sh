#!/usr/bin/env bash
# One command for a GPU machine with torch: build everything (CUDA for this GPU), run every C++ and
# Python test (GPU ones included), compute-sanitizer memcheck + racecheck, the GPU benchmarks; print
# a one-screen summary. Logs and results go to $OUT (or ./gpu_check_out).
#   GPU_CHECK_BENCH=quick|full|none (default full)   GPU_CHECK_SANITIZER=0 to skip the sanitizer
#   GPU_CHECK_PIP=1 also checks `pip install .`        CUDA_ARCH (default: this GPU's, e.g. 90)
set -uo pipefail
cd "$(dirname "$0")/.."
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
  local note
  note=$(grep -E "tests passed|passed|failed|error:|Error" "$LOGS/$name.log" | tail -1 | cut -c1-90)
  summary+=("$(printf '%-14s %-5s %5ss  %s' "$name" "$status" $((SECONDS - t0)) "$note")")
  [ "$status" = PASS ]
}

info() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -2
  date -u
}

configure_and_build() {
  local gtest=()
  [ -d .gpu_deps/googletest ] && gtest=(-DTIGON_GTEST_SOURCE_DIR="$PWD/.gpu_deps/googletest")
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIGON_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DTIGON_BUILD_TESTS=ON -DTIGON_BUILD_TORCH=ON \
    -DCMAKE_PREFIX_PATH="$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
    -DPython_EXECUTABLE="$(command -v "$PY")" "${gtest[@]}" &&
    cmake --build "$BUILD" -j "$JOBS"
}

ctest_cpu() { ctest --test-dir "$BUILD" -L cpu -j "$JOBS" --output-on-failure; }
ctest_gpu() { ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 300; }

sanitizer() {
  local bin=$BUILD/tests/tigon_cuda_tests filter='*Small*:*Edge*:*Strided*:*Unaligned*:*InPlace*:*CrossEntropyCuda*'
  compute-sanitizer --tool memcheck --error-exitcode 1 "$bin" --gtest_filter="$filter" &&
    compute-sanitizer --tool racecheck --error-exitcode 1 "$bin" --gtest_filter="$filter"
}

pytest_all() {
  TIGON_TORCH_LIBRARY=$(ls "$BUILD"/bindings/torch/_tigon_torch*.so | head -1) PYTHONPATH=python \
    "$PY" -m pytest tests/python -q -rs -p no:cacheprovider --timeout 900
}

pip_install() { "$PY" -m pip install --no-build-isolation --no-deps -v . -Ccmake.define.CMAKE_CUDA_ARCHITECTURES="$ARCH" &&
  (cd /tmp && "$PY" -c 'import tigon; assert tigon.has_cuda_kernels(); print("installed tigon", tigon.__version__, "with CUDA kernels")'); }

bench() {
  local mode=${GPU_CHECK_BENCH:-full} args=()
  [ "$mode" = quick ] && args=(--quick)
  TIGON_TORCH_LIBRARY=$(ls "$BUILD"/bindings/torch/_tigon_torch*.so | head -1) PYTHONPATH=python \
    "$PY" benchmarks/python/bench_rms_norm.py --device cuda --out "$OUT_DIR" "${args[@]}" &&
  TIGON_TORCH_LIBRARY=$(ls "$BUILD"/bindings/torch/_tigon_torch*.so | head -1) PYTHONPATH=python \
    "$PY" benchmarks/python/bench_cross_entropy.py --device cuda --out "$OUT_DIR" "${args[@]}"
}

step info info
if step build configure_and_build; then
  step ctest-cpu ctest_cpu
  step ctest-gpu ctest_gpu
  [ "${GPU_CHECK_SANITIZER:-1}" = 1 ] && step sanitizer sanitizer
  step pytest pytest_all
  [ "${GPU_CHECK_PIP:-0}" = 1 ] && step pip-install pip_install
  [ "${GPU_CHECK_BENCH:-full}" != none ] && step bench bench
fi

echo
echo "== tigon gpu_check: $(head -2 "$LOGS/info.log" | tail -1) =="
printf '%s\n' "${summary[@]}"
[ -f "$LOGS/bench.log" ] && sed -n '/copy ceiling (this run)/,$p' "$LOGS/bench.log" | head -40
tar -C "$OUT_DIR" -czf "$OUT_DIR/logs.tgz" logs && rm -rf "$LOGS"
! printf '%s\n' "${summary[@]}" | grep -q " FAIL "
