#!/usr/bin/env bash
# The pilot of the pretraining study (docs/study.md, "Study design") on one H200, in about 5 minutes (4.5 measured):
#
#   OUT=/path/to/results bash benchmarks/study_pilot.sh        # from the repository root
#
# It trains examples/study/pilot.toml (25 runs of the 1.87M-parameter model, 1000 steps each, deterministic, on the
# python-packages corpus: bf16, ufp4 and e2m1-ref with seeds 0-5, the negative control bf16-order1 with seeds 0-5,
# and a repeat of ufp4 seed 0) as 13 processes side by side, stops starting steps after MAX_MINUTES (default 7)
# minutes, and writes small files only:
#   $OUT/pilot/runs.jsonl           every run's configuration, code version, corpus, logged rows (throughput)
#   $OUT/pilot/slice.json           the command, times, device, each run's status, the shard processes' log tails
#   $OUT/pilot-summary/*            runs.csv (tokens_per_s per run), gaps.csv (sd of the negative control's gap),
#                                   paired.csv (ufp4 - e2m1-ref: sd and seeds needed at 0.3 points, level 0.05/4),
#                                   repeats.csv (is the repeat identical bit for bit?), summary.json, summary.md
# Extra packages (pydantic, rich, ...) go on PYTHONPATH (kept), not into site-packages: the python-packages corpus
# is that folder, and its fingerprint must be the same in every slice.
# Run folders (checkpoints) go to a temporary folder and are not kept. Runs still partial when the time is up are
# packed as partial (their rows give the throughput); a second call with DONE=<folder of the first pack> runs only
# what that pack does not hold as done.
set -euo pipefail
OUT=${OUT:?set OUT to the folder for the results}
PLAN=examples/study/pilot.toml NAME=pilot PROCS=13 MAX_MINUTES=${MAX_MINUTES:-7} \
    bash "$(dirname "$0")/study_slice.sh"
PYTHONPATH=${STUDY_CODE:-.}${PYTHONPATH:+:$PYTHONPATH} ${PYTHON:-python3} "${STUDY_CODE:-.}/examples/pretrain.py" \
    summarize "$OUT/pilot" --dest "$OUT/pilot-summary" --no-plots --alpha 0.0125
