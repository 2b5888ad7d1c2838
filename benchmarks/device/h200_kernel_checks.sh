#!/usr/bin/env bash
# The H200 checks that a change to the Triton kernels needs, in one device call of at most about 9 minutes:
#   1. fp4lab verify --device cuda --elements 1e9: quantize, dequantize and fake quantization against the numpy
#      reference, bit for bit (about 130 s);
#   2. benchmarks/device/h200_library_fields_check.py: the directed roundings and the scale-rule fields on the
#      compiled kernels (under a minute);
#   3. benchmarks/h200_mma_check.py: the tensor-core emulation kernels against the CPU model (stops adding cases
#      after MMA_BUDGET seconds, default 150);
#   4. benchmarks/bench_mma.py --gpu: their speed.
# Each step writes its log and results under $OUT as it runs (a call cut short keeps what finished) and one line
# "STEP rc=N seconds=S" to $OUT/summary.txt. Run from the repository root with fp4lab importable:
#   OUT=$OUT PYTHONPATH=. bash benchmarks/device/h200_kernel_checks.sh
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
export OUT NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-16}
PY=${PYTHON:-python3}

step() {  # NAME LIMIT_S COMMAND...
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "$name rc=$rc seconds=$(( $(date +%s) - start ))" | tee -a "$OUT/summary.txt"
}

step verify 240 "$PY" -m fp4lab.cli verify --device cuda --elements 1e9 --workers 15 --json-out "$OUT/verify.json"
step library_fields 90 "$PY" benchmarks/device/h200_library_fields_check.py
step mma_check $(( ${MMA_BUDGET:-150} + 60 )) "$PY" benchmarks/h200_mma_check.py --budget "${MMA_BUDGET:-150}"
step bench_mma 90 "$PY" benchmarks/bench_mma.py --gpu
