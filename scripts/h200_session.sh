#!/usr/bin/env bash
# One device call on the H200: build the CUDA variant, run the tests, the sanitizers,
# a SASS check and the benchmarks; everything lands under $OUT.
#   device run: bash scripts/h200_session.sh [check|bench|all]   (carry .whl, see README)
# check: build, tests, sanitizers, SASS, example, a quick benchmark (~5 min)
# bench: build and the full benchmark sweep (~6 min)
# verify: check without the example and benchmarks
set -uo pipefail
MODE=${1:-all}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
status=0
step() { echo; echo "=== $1 ($(date +%T))"; }

step "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/env.txt"
python3 -c "import torch, kernels, transformers; print('torch', torch.__version__, 'kernels', kernels.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/env.txt"

step "build"
c++ --version | head -1; echo "libstdc++.so: $(c++ -print-file-name=libstdc++.so)"
python3 tools/build.py -j 16 2>&1 | tee "$OUT/build.log" | tail -3 || exit 1
VARIANT=$(python3 tools/build.py --print-variant)
SO=$(ls build/$VARIANT/*.abi3.so)

if [ "$MODE" != bench ]; then
step "tests"
python3 -m pytest tests -q -rfEs -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -15
[ "${PIPESTATUS[0]}" = 0 ] || status=1
if grep -q "Segmentation fault" "$OUT/pytest.log"; then
  step "backtrace of the crash"
  test=$(grep -m1 -oE "tests/test_[a-z_]+\.py\", line [0-9]+ in [a-z_]+" "$OUT/pytest.log" | sed -E 's/", line [0-9]+ in /::/')
  cuda-gdb -batch -ex run -ex "bt 14" --args python3 -m pytest -x -q -p no:cacheprovider "$test" 2>&1 \
    | grep -E "^#|signal" | cut -c1-400 | tee "$OUT/crash_bt.log"
  step "tests, without the crashing test"
  python3 -m pytest tests -q -rfE -p no:cacheprovider --deselect "$test" 2>&1 | tail -15 | tee "$OUT/pytest_rest.log"
fi

step "error paths, 20 fresh processes (a check once crashed while formatting its message)"
crashes=0
for i in $(seq 20); do
  python3 -m pytest -q -p no:cacheprovider tests/test_rms_norm.py tests/test_activation.py -k rejects > /tmp/rejects.log 2>&1 \
    || { crashes=$((crashes+1)); tail -5 /tmp/rejects.log; }
done
echo "error-path runs failed: $crashes of 20" | tee "$OUT/error_paths.txt"; [ $crashes = 0 ] || status=1

step "SASS: 128-bit global loads and stores in the kernels"
cuobjdump -sass "$SO" > /tmp/sass.txt
grep -oE "(LDG|STG)\.E[.A-Z0-9]*" /tmp/sass.txt | sort | uniq -c | tee "$OUT/sass_summary.txt"

step "compute-sanitizer"
# One filter a run (our kernels by name, not torch's randn and copies).
for tool in memcheck racecheck; do
  for kernel in rms_norm silu_mul_kernel; do
    log="$OUT/sanitizer_${tool}_$kernel.log"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool $tool --error-exitcode 9 \
      --kernel-name kns=$kernel python3 scripts/sanitize_cuda.py > "$log" 2>&1
    rc=$?; tail -3 "$log"; echo "$tool $kernel exit $rc"; [ $rc = 0 ] || status=1
  done
done

[ "$MODE" = verify ] && { echo "session status $status"; exit $status; }
step "example (make demo's script)"
python3 example.py 2>&1 | tail -8 | tee "$OUT/example.log"

python3 benchmarks/benchmark.py 2>&1 | tail -12 | tee "$OUT/kernels_benchmark.log"
fi

step "benchmarks"
if [ "$MODE" = check ]; then
  python3 benchmarks/bench_rms_norm.py --quick --name bench_quick 2>&1 | tail -40
else
  timeout 330 python3 benchmarks/bench_rms_norm.py --rows 1 4 16 64 256 1024 4096 --fused-rows 1 16 256 4096 2>&1 | tee "$OUT/bench.log" | tail -80
fi
echo "session status $status"
exit $status
