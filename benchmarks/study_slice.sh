#!/usr/bin/env bash
# One slice of a study plan on one H200 (docs/study.md, "The study, in slices"), from the repository root:
#
#   OUT=/path/to/results DONE=docs/results/study/packs STUDY_CODE=.study-code bash benchmarks/study_slice.sh
#
# It trains the plan's runs that the packs under DONE (plain or gzip-compressed) do not hold as done, and writes
# small files only:
#   $OUT/$NAME/runs.jsonl      every run of the slice: configuration, code version, corpus (files, bytes,
#                              fingerprint), logged rows (NAME: slice)
#   $OUT/$NAME/slice.json      the command, times, device, each run's status, the shard processes' log tails
#   $OUT/status.txt            the whole plan's status after the slice (done / partial / missing / failed)
# Which runs: by default whole seeds, at most MAX_RUNS (default 13) missing runs, one process per run
# (benchmarks/study_next_slice.py), so the slice ends when its last run does and cuts nothing off. With PROCS set,
# the plan's missing runs in plan order as PROCS processes side by side, each starting its next run when one
# ends, until MAX_MINUTES. Either way no step starts after MAX_MINUTES (default 8.5). STUDY_ARGS goes to `study`
# (for example "--sizes s2m"; with --seeds or --recipes in it, set PROCS).
# STUDY_CODE (default: this checkout) is the folder whose fp4lab/ and examples/ run: a study runs one code
# version from its first slice to its last, so later slices run the study's frozen tree (docs/study.md, "One code
# version"), not the checkout. Extra packages (pydantic, ...) go on PYTHONPATH, never into site-packages: the
# python-packages corpus is that folder, and its fingerprint must be the same in every slice. Run folders
# (checkpoints) go to a temporary folder and are not kept, so only runs finished inside the slice count as done.
# MPS=1 starts a CUDA MPS control daemon for the slice (and quits it at the end), so that the runs' kernels share
# the GPU at once instead of in turns; $OUT/mps.txt says whether it ran. The arithmetic is the same either way:
# benchmarks/study_compare_packs.py checks a probe slice's losses against packed ones bit for bit.
set -euo pipefail
OUT=${OUT:?set OUT to the folder for the results}
CODE=$(cd "${STUDY_CODE:-.}" && pwd)
PLAN=${PLAN:-examples/study/plan.toml}
NAME=${NAME:-slice}
PY=${PYTHON:-python3}
export PYTHONPATH=$CODE${PYTHONPATH:+:$PYTHONPATH} OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
mkdir -p "$OUT"
if [ -n "${MPS:-}" ]; then
    CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d) CUDA_MPS_LOG_DIRECTORY=$(mktemp -d)
    export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    if ! nvidia-cuda-mps-control -d; then
        echo "off: nvidia-cuda-mps-control -d failed" | tee "$OUT/mps.txt" >&2
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    elif ! timeout 120 "$PY" -c "import torch; torch.ones(1, device='cuda').add_(1).cpu()"; then
        # a client that cannot reach the daemon's server would fail (or hang) every run of the slice
        echo quit | nvidia-cuda-mps-control || true
        echo "off: a CUDA client failed under the MPS daemon" | tee "$OUT/mps.txt" >&2
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    else
        trap 'echo quit | nvidia-cuda-mps-control || true' EXIT
        echo "on" > "$OUT/mps.txt"
    fi
fi
if [ -n "${DONE:-}" ]; then  # the packs, gzip-compressed ones unpacked (the study's frozen tree reads runs.jsonl)
    [ -d "$DONE" ] || { echo "DONE: $DONE is not a folder" >&2; exit 2; }
    PLAIN=$(mktemp -d)
    cp -R "$DONE/." "$PLAIN/"
    find "$PLAIN" -name runs.jsonl.gz -exec gzip -d {} +
    DONE=$PLAIN
fi
SELECT=
if [ -z "${PROCS:-}" ]; then
    NEXT=$($PY "$(dirname "$0")/study_next_slice.py" "$CODE/$PLAN" ${DONE:+--done-from "$DONE"} \
        --max-runs "${MAX_RUNS:-13}" ${STUDY_ARGS:-})
    if [ -z "$NEXT" ]; then
        echo "every run of $PLAN is done"
    else
        read -r SEEDS PROCS <<< "$NEXT"
        SELECT="--seeds $SEEDS"
        echo "this slice: seeds $SEEDS, $PROCS processes"
    fi
fi
if [ -n "${PROCS:-}" ]; then
    RUNS=$(mktemp -d)
    $PY "$CODE/examples/pretrain.py" study "$CODE/$PLAN" --out "$RUNS" --procs "$PROCS" \
        --max-minutes "${MAX_MINUTES:-8.5}" ${DONE:+--done-from "$DONE"} ${STUDY_ARGS:-} $SELECT --pack "$OUT/$NAME" \
        || echo "study exit status $? (see $OUT/$NAME/slice.json)"
    rm -rf "$RUNS"
fi
PACKED=
[ -d "$OUT/$NAME" ] && PACKED=$OUT/$NAME
$PY "$CODE/examples/pretrain.py" study "$CODE/$PLAN" --status ${PACKED:+--done-from "$PACKED"} \
    ${DONE:+--done-from "$DONE"} ${STUDY_ARGS:-} > "$OUT/status.txt" 2>&1 || true
if [ -n "${PLAIN:-}" ]; then rm -rf "$PLAIN"; fi
