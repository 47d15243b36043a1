#!/usr/bin/env bash
# The CUDA proof, in one go: honesty checks on every test candidate, then timings
# against eager and torch.compile on larger versions of the example problems.
#
#   OUT=/tmp/gpu-check [PART=honesty|timing] bash bench/gpu_check.sh
#
# Writes JSON and markdown reports under $OUT and prints the tables.
set -u
OUT=${OUT:-/tmp/kernelize-gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
KZ="$PY -m bot.cli run --device cuda"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$PY -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'

PART=${PART:-all}  # all | honesty | timing

if [ "$PART" != timing ]; then
echo "== honesty checks on CUDA (tests/candidates) =="
for p in add_relu softmax matmul; do
  $KZ "tests/problems/$p.py" --candidates "tests/candidates/$p" --timeout 60 --no-compile \
      --json "$OUT/honesty_$p.json" --markdown "$OUT/honesty_$p.md" --quiet
done
$KZ tests/problems/layers.py::RMSNorm --candidates tests/candidates/layers --timeout 60 --no-compile \
    --json "$OUT/honesty_layers.json" --quiet

fi

if [ "$PART" != honesty ]; then
echo "== timing on larger problems (bench/problems) =="
cands=$(mktemp -d)
mkdir -p "$cands/add_relu" "$cands/softmax" "$cands/matmul" "$cands/RMSNorm"
cp tests/candidates/add_relu/{ok,decoration,reused_buffer}.py "$cands/add_relu/"
cp tests/candidates/softmax/ok.py "$cands/softmax/"
cp tests/candidates/matmul/ok.py "$cands/matmul/"
cp tests/candidates/layers/RMSNorm/ok.py "$cands/RMSNorm/"
for p in add_relu softmax matmul; do
  $KZ "bench/problems/$p.py" --candidates "$cands/$p" --timeout 300 \
      --json "$OUT/timing_$p.json" --markdown "$OUT/timing_$p.md"
done
$KZ bench/problems/rmsnorm.py --candidates "$cands" --timeout 300 \
    --json "$OUT/timing_rmsnorm.json" --markdown "$OUT/timing_rmsnorm.md"

echo "== harness overhead on this machine =="
$PY bench/harness_overhead.py --device cuda --repeat 3
fi
