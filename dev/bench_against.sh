#!/usr/bin/env bash
# Benchmarks this tree's tigon against another checkout's in one run on one GPU, so that a change
# that must not cost speed can be checked against the peers of the same run: builds both torch
# libraries (in parallel), then runs each benchmark once against each, every provider both times
# (the peers' two measurements show the run's noise). Results: $OUT (or ./bench_against_out)/
# {new,old}/, and a table of tigon's new/old time ratios per benchmark, shape and phase.
#   dev/bench_against.sh OLD_TREE [BENCH ...]   (default: the four op benchmarks)
#   BENCH_ARGS="--quick" (default) is passed to every benchmark
set -euo pipefail
old=$(realpath "$1")
shift
benches=("$@")
[ ${#benches[@]} -eq 0 ] && benches=(bench_rms_norm bench_cross_entropy bench_glu bench_rope)
PY=${PYTHON:-python3}
OUT_DIR=${OUT:-$PWD/bench_against_out}
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
export PYTHONUNBUFFERED=1

build() {  # build TREE: its torch operator library in TREE/build/against
  cmake -S "$1" -B "$1/build/against" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIGON_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DTIGON_BUILD_TESTS=OFF -DTIGON_BUILD_TORCH=ON \
    -DCMAKE_PREFIX_PATH="$prefix" -DPython_EXECUTABLE="$(command -v "$PY")" >/dev/null &&
    cmake --build "$1/build/against" -j "$(($(nproc) / 2))" >/dev/null
}
t0=$SECONDS
build "$PWD" & new_pid=$!
build "$old" & old_pid=$!
wait "$new_pid" && wait "$old_pid"
echo "built both in $((SECONDS - t0)) s"

for bench in "${benches[@]}"; do
  for side in new old; do
    tree=$PWD
    [ "$side" = old ] && tree=$old
    echo "=== $bench ($side: $tree)"
    TIGON_TORCH_LIBRARY=$(ls "$tree"/build/against/bindings/torch/_tigon_torch*.so) \
      PYTHONPATH="$tree/python" "$PY" "benchmarks/python/$bench.py" --device cuda \
      --out "$OUT_DIR/$side" ${BENCH_ARGS---quick} || echo "FAILED: $bench ($side)"
  done
done

# new / old time of each tigon row (same provider, shape and phase in both runs).
"$PY" - "$OUT_DIR" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for new in sorted((out / "new").glob("*.json")):
    old = out / "old" / new.name
    if not old.exists():
        continue
    rows = {}
    for side, path in (("new", new), ("old", old)):
        for r in json.loads(path.read_text())["results"]:
            key = tuple((k, v) for k, v in r.items() if not isinstance(v, float))
            rows.setdefault(key, {})[side] = r
    print(f"\n{new.stem}: new/old time (< 1: faster now)")
    for key, both in rows.items():
        if len(both) < 2:
            continue
        ratios = [f"{k} {both['new'][k] / both['old'][k]:.3f}" for k in both["new"]
                  if k.endswith(("_ms", "_us")) and both["old"].get(k)]
        print("  " + ", ".join(f"{k}={v}" for k, v in key) + ": " + ", ".join(ratios))
PY
