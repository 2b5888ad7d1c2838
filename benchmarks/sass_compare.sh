#!/usr/bin/env bash
# Compare the sm_90 SASS of every kernel configuration below between two trees (no GPU needed): a refactor that
# should not change the arithmetic must leave every listing identical.
#   bash benchmarks/sass_compare.sh OLD_TREE [NEW_TREE]     # e.g. a `git worktree add /tmp/old HEAD~1`
# NEW_TREE's benchmarks/sass_count.py compiles both trees' kernels. Each tree's listings go to $SASS_OUT/{old,new}
# (default a temporary folder), with one line per case saying OK or FAIL (a case a tree cannot compile) in
# $SASS_OUT/{old,new}.cases; the last line is the diff's verdict. About 6 minutes per tree on 2 cores.
set -u
OLD=$(cd "$1" && pwd)
NEW=$(cd "${2:-.}" && pwd)
OUT=${SASS_OUT:-$(mktemp -d)}
mkdir -p "$OUT" || exit 2
TOOL=$NEW/benchmarks/sass_count.py  # one compiler driver for both trees: only the kernels differ
PY=${PYTHON:-python}
FORMATS="mxfp4 nvfp4 ufp4 e2m1-b16-fp32 int4-b32-e8m0 int4-b16-fp32 nf4-b64-fp32 mxfp4-rceil mxfp4-ceil mxfp4-even
nvfp4-torchao nvfp4-torchao-1level nvfp4-te nvfp4-4over6 nvfp4-2d ufp4-e4m3 ufp4-e8m0 e2m1 e1m2 int4"

dump() {  # TREE DIR
    local tree=$1 dir=$2 k c
    rm -rf "$dir" && mkdir -p "$dir"
    one() {  # KERNEL CASE OPTIONS...
        k=$1 c=$2
        shift 2
        if (cd "$tree" && PYTHONPATH=$tree "$PY" "$TOOL" "$k" "$c" "$@" --dump "$dir") \
                > "$dir.log" 2>&1; then echo "OK   $k $c $*"; else echo "FAIL $k $c $* :: $(tail -1 "$dir.log")"; fi
    }
    for f in $FORMATS; do for m in rtne sr; do one quantize "$f:$m" --tile 32x256x4; done; done
    for c in mxfp4:rtz nvfp4:rtz ufp4:rtp ufp4:rtm ufp4:rtna ufp4:sr:16 nvfp4:sr:8 mxfp4:sr:4; do
        one quantize "$c" --tile 32x256x4
    done
    for f in $FORMATS; do one dequantize "$f" --tile 16x512x4; done
    for c in ufp4:sr:16 mxfp4:rtne nvfp4:rtne nvfp4:sr ufp4-e4m3:sr mxfp4:sr:8; do
        one fakequant "$c" --tile 32x64x4 --along km --rht 16
    done
    for c in nvfp4:rtne ufp4:rtne ufp4:sr:4; do one fakequant "$c" --tile 16x128x2 --along km --rht-m 16; done
    for c in nvfp4:rtne mxfp4:rtne ufp4:sr int4-b32-e8m0:rtne nvfp4-te:sr; do
        one fakequant "$c" --tile 32x64x4 --along k
    done
    for c in nvfp4:rtne mxfp4:rtne ufp4:sr; do one fakequant "$c" --tile 32x64x4 --along m; done
    for f in $FORMATS; do  # nf4's value table has no exact GEMM plan
        [ "$f" = nf4-b64-fp32 ] || one gemm "$f" --tile 128x64x8
    done
    for c in blackwell-sm100:tcgen05.mxf4nvf4:e2m1:ue4m3 blackwell-sm100:tcgen05.mxf4nvf4:e2m1:ue8m0 \
             blackwell-sm100:tcgen05.mxf4:e2m1:ue8m0 blackwell-sm100:tcgen05.mxf8f6f4:e4m3:ue8m0 \
             blackwell-sm100:tcgen05.mxf8f6f4:e2m1:ue8m0; do
        one mma "$c" --tile 32x32x4
    done
}

dump "$OLD" "$OUT/old" > "$OUT/old.cases"
dump "$NEW" "$OUT/new" > "$OUT/new.cases"
grep FAIL "$OUT/new.cases"
n=$(find "$OUT/new" -type f | wc -l)
if diff -r "$OUT/old" "$OUT/new" > "$OUT/diff.txt"; then
    echo "identical: $n listings ($OUT)"
else
    echo "DIFFERENT: $(grep -c '^diff\|^Only' "$OUT/diff.txt") of $n listings differ ($OUT/diff.txt)"
    exit 1
fi
