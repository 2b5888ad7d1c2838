#!/usr/bin/env bash
# Slices of a study plan back to back in one device call, while the next one is expected to fit, from the
# repository root:
#
#   OUT=/path/to/results DONE=docs/results/study/packs STUDY_CODE=.study-code bash benchmarks/study_slices.sh
#
# Runs benchmarks/study_slice.sh as NAME=slice-1, slice-2, ... into $OUT, each with DONE = the packs under DONE and
# those of this call's earlier slices, so no run trains twice. A slice starts only while the time left of
# BUDGET_MINUTES (default 9.5, for a 10-minute call) is at least the longest slice so far plus MARGIN_MINUTES
# (default 1), and its MAX_MINUTES is the time left less the margin, so a run it cannot finish is cut off (packed
# as partial) rather than the call. It stops after MAX_SLICES slices (default 8) or when a slice finds nothing
# to run. Everything else (MPS, MAX_RUNS, PROCS, STUDY_ARGS, PLAN, STUDY_CODE, PYTHON) passes to study_slice.sh.
# $OUT/slices.txt lists each slice's wall time. Copy each $OUT/slice-N to the study's packs as its own slice.
set -euo pipefail
OUT=${OUT:?set OUT to the folder for the results}
BUDGET=${BUDGET_MINUTES:-9.5}
MARGIN=${MARGIN_MINUTES:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
START=$(date +%s)
ALL=$(mktemp -d)
trap 'rm -rf "$ALL"' EXIT
if [ -n "${DONE:-}" ]; then
    [ -d "$DONE" ] || { echo "DONE: $DONE is not a folder" >&2; exit 2; }
    cp -R "$DONE/." "$ALL/"
fi
mkdir -p "$OUT"
longest=0
for i in $(seq 1 "${MAX_SLICES:-8}"); do
    left=$(awk -v b="$BUDGET" -v s="$START" -v n="$(date +%s)" 'BEGIN { print b * 60 - (n - s) }')
    if awk -v l="$left" -v g="$longest" -v m="$MARGIN" 'BEGIN { exit !(l < g + m * 60) }'; then
        echo "slice $i: ${left%.*} s left, not enough for another (longest slice ${longest} s)" | tee -a "$OUT/slices.txt"
        break
    fi
    minutes=$(awk -v l="$left" -v m="$MARGIN" 'BEGIN { printf "%.2f", l / 60 - m }')
    t0=$(date +%s)
    OUT=$OUT NAME=slice-$i DONE=$ALL MAX_MINUTES=$minutes bash "$HERE/study_slice.sh"
    took=$(( $(date +%s) - t0 ))
    if [ "$took" -gt "$longest" ]; then longest=$took; fi
    if [ ! -d "$OUT/slice-$i" ]; then
        echo "slice $i: nothing left to run (${took} s)" | tee -a "$OUT/slices.txt"
        break
    fi
    echo "slice $i: ${took} s, MAX_MINUTES ${minutes}" | tee -a "$OUT/slices.txt"
    cp -R "$OUT/slice-$i" "$ALL/slice-$i"
done
