#!/usr/bin/env bash
# One call on the GPU machine: install kiec, run the GPU tests, then `kiec bench` on the given models.
# Logs and JSON land in $OUT (or ./out). Usage: scripts/gpu_run.sh [tests|notests|stage] [MODEL[:CONTEXT] ...]
#
# Before the calls, on the CPU machine: scripts/gpu_prep.sh (commit id, the gguf wheel, the real model in parts,
# the TVM source cache). The 98 MB model exceeds one call's 64 MB: gpu_prep.sh cuts it into parts that fit beside the
# tree and names them; call `stage` carrying each part but the last, each call at once after the last (the machine
# stays warm 30 s), then the real run carrying the last part, .carry/smol.manifest, .carry/kiec_cache, .whl and
# .kiec_commit.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PATH="$PATH:/usr/local/cuda/bin"
[ -f .kiec_commit ] && export KIEC_COMMIT=$(cat .kiec_commit)  # the tree travels without .git
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.memory,memory.used --format=csv; echo "kiec ${KIEC_COMMIT:-unknown}"; } | tee "$OUT/env.txt"
# CLOCKS=1: the GPU's clocks, power, temperature and clock-event reasons every 100 ms for the whole call (read with
# nvidia-smi, nothing set) in $OUT/clocks.csv, and the lines of variants.py and kiec bench stamped with their time
clocks_pid=
if [ -n "${CLOCKS:-}" ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv -lms 100 > "$OUT/clocks.csv" 2>&1 &
  clocks_pid=$!
  trap 'kill "$clocks_pid" 2> /dev/null' EXIT
fi
stamp() {
  if [ -n "$clocks_pid" ]; then while IFS= read -r line; do printf '%s %s\n' "$(date +%H:%M:%S.%3N)" "$line"; done
  else cat; fi
}
# Carried extras: wheels (.whl/, e.g. gguf) and the real test model, which travels in parts (.carry/)
# because one call carries at most 64 MB; `stage` only copies the parts it was given and exits.
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
# TVM's kernels, generated here (.carry/kiec_cache/tvm), into a cache outside the tree, where nvcc's objects
# (kiec/unit_cache.py) outlast the call: a later call on the same warm machine reuses the builds of the earlier ones
export KIEC_CACHE_DIR=/tmp/kiec_cache
mkdir -p "$KIEC_CACHE_DIR" && [ -d .carry/kiec_cache ] && cp -r .carry/kiec_cache/. "$KIEC_CACHE_DIR/"
mkdir -p /tmp/smol && cp .carry/smol.part* .carry/smol.manifest /tmp/smol/ 2> /dev/null
mode=${1:-tests}; shift || true
[ "$mode" = stage ] && { ls -la /tmp/smol; exit 0; }
# the parts the manifest names, all staged: the model, if its sha256 is the manifest's (else the real-model tests skip)
if [ -f /tmp/smol/smol.manifest ]; then
  names=$(tail -n +2 /tmp/smol/smol.manifest)
  missing=$(for n in $names; do [ -f "/tmp/smol/$n" ] || echo "$n"; done)
  if [ -n "$missing" ]; then
    echo "real model: parts not staged: $(echo $missing) (the real-model tests skip)"
  else
    (cd /tmp/smol && cat $names > SmolLM2-135M-Instruct.Q4_1.gguf)
    want=$(head -1 /tmp/smol/smol.manifest | cut -d' ' -f2)
    if [ "$(sha256sum /tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf | cut -d' ' -f1)" = "$want" ]; then
      export KIEC_SMOLLM2_GGUF=/tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf
    else
      echo "real model: the staged parts' sha256 is not the manifest's (parts from another cut?): the tests skip"
      rm -f /tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf
    fi
  fi
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . > /tmp/install.log 2>&1 || { cat /tmp/install.log; exit 1; }
# AB="commit ...": the persistent kernel at those commits (trees made by AB=... gpu_prep.sh, carried as .carry/ab)
# against this tree, AB_ROUNDS (2) rounds in turn, on each of AB_MODEL (llama-3.2-1b) at context 0: a slowdown between
# runs on different machines is told from a machine's by the two kernels timed in one call (the 3.5% 48f2904 cost)
if [ -n "${AB:-}" ]; then
  for r in $(seq "${AB_ROUNDS:-2}"); do
    for c in $AB .; do
      tree=.carry/ab/$c tag=$c; [ "$c" = . ] && tree=. tag=${KIEC_COMMIT:-this}
      (cd "$tree" && python3 -m pip install -q --no-deps --no-build-isolation -e . > /tmp/install_ab.log 2>&1) \
        || { cat /tmp/install_ab.log; continue; }
      for m in ${AB_MODEL:-llama-3.2-1b}; do
        echo "=== $tag, round $r, $m"
        KIEC_COMMIT=$tag timeout 200 kiec bench "$m" --context 0 --mode persistent --vs "" \
          --work-dir /tmp/kiec_ab 2>&1 | grep -E "^read ceiling|^kiec \(persistent"
      done
    done
  done 2>&1 | tee "$OUT/ab.log"
  rm -rf /tmp/kiec_ab
fi
# SMOKE=1: a 2-layer tiny model's persistent kernel runs 24 tokens within 30 s, or the call ends here (a hang
# in the kernel would otherwise spend the tests' whole timeout)
# SMOKE_FIELDS="field=value ...": the same with those fields too (e.g. persist_tagged=2), whose 24 tokens must be the
# default's; SMOKE_WIDE=1: both on the wide tiny model (scripts/tiny_model.py wide=1: persist_tag_parity needs it)
if [ -n "${SMOKE:-}" ]; then
  python3 scripts/tiny_model.py /tmp/smoke persistent ${SMOKE_WIDE:+wide=1} > "$OUT/smoke.log" 2>&1
  timeout 30 /tmp/smoke/kiec-run /tmp/smoke 1,2,3,4 24 >> "$OUT/smoke.log" 2>&1 || { tail -20 "$OUT/smoke.log"; echo "smoke: FAILED"; exit 1; }
  tail -1 "$OUT/smoke.log"
  if [ -n "${SMOKE_FIELDS:-}" ]; then
    python3 scripts/tiny_model.py /tmp/smoke_fields persistent ${SMOKE_WIDE:+wide=1} $SMOKE_FIELDS >> "$OUT/smoke.log" 2>&1
    want=$(grep -E '^[0-9]+(,[0-9]+)+$' "$OUT/smoke.log" | head -1)
    got=$(timeout 30 /tmp/smoke_fields/kiec-run /tmp/smoke_fields 1,2,3,4 24 2>&1 | tee -a "$OUT/smoke.log" \
      | grep -E '^[0-9]+(,[0-9]+)+$')
    [ -n "$got" ] && [ "$got" = "$want" ] || { tail -20 "$OUT/smoke.log"; echo "smoke ($SMOKE_FIELDS): FAILED"; exit 1; }
    echo "smoke ($SMOKE_FIELDS): the default's 24 tokens"
  fi
fi
if [ "$mode" = tests ]; then
  # TESTS="expr": only the GPU tests pytest -k selects (a short call). The whole suite (126 tests then, most of their
  # time nvcc on a tiny model) took 420 s for its first 38 in one process (2026-12-02), past one call's 600 s: the
  # tests are dealt round-robin over TEST_JOBS (8) pytest processes at once, which share the GPU (their
  # kernels time-slice) and the machine's 16 cores; their logs one after the other in $OUT/gpu_tests.log
  # TEST_IDS=FILE: the node ids listed there, a line each, instead (e.g. an earlier call's rerun_ids.txt: the ids of
  # its processes that did not end clean, since -x stops a process at its first failure; scripts/test_jobs.sh)
  # TEST_PART=i/n: every n-th of the selected ids from the i-th (1-based) on. The whole suite grew past one call (209
  # tests: three of ten processes ran past 380 s on 2026-12-05), so it runs as TEST_PART=1/2 and 2/2, a call each
  if [ -n "${TEST_IDS:-}" ]; then
    grep "::" "$TEST_IDS" > /tmp/gpu_ids.txt
  else
    python3 -m pytest --collect-only -q -m gpu tests/gpu -p no:cacheprovider ${TESTS:+-k "$TESTS"} \
      > /tmp/gpu_collect.txt 2>&1
    grep "::" /tmp/gpu_collect.txt > /tmp/gpu_ids.txt || tail -20 /tmp/gpu_collect.txt  # (why none: an import error?)
  fi
  if [ -n "${TEST_PART:-}" ]; then
    i=${TEST_PART%/*} n=${TEST_PART#*/}
    [[ "$i" =~ ^[0-9]+$ && "$n" =~ ^[0-9]+$ && "$i" -ge 1 && "$i" -le "$n" ]] \
      || { echo "TEST_PART=$TEST_PART: want i/n with 1 <= i <= n"; exit 1; }
    awk -v n="$n" -v i="$i" '(NR - 1) % n == i - 1' /tmp/gpu_ids.txt > /tmp/gpu_ids_part.txt
    mv /tmp/gpu_ids_part.txt /tmp/gpu_ids.txt
  fi
  bash scripts/test_jobs.sh /tmp/gpu_ids.txt "${TEST_JOBS:-8}" "${TEST_TIMEOUT:-480}" "$OUT" \
    -q -x -s -m gpu -p no:cacheprovider
  # how many of the tests' builds took their objects from the cache (kiec/unit_cache.py; this machine's earlier
  # calls' too)
  echo "gpu tests: $(grep -c "compiling with nvcc" "$OUT/gpu_tests.log") builds, $(grep -c "units' objects from the" \
    "$OUT/gpu_tests.log") of them with objects from the cache, $(ls "$KIEC_CACHE_DIR/nvcc" 2> /dev/null | wc -l) kept"
fi
# SANITIZE=1: compute-sanitizer over a 2-layer tiny model's persistent kernel (scripts/sanitize.sh)
[ -n "${SANITIZE:-}" ] && bash scripts/sanitize.sh persistent ${SANITIZE_FIELDS:-}  # SANITIZE_FIELDS: field=value ...
# The device benchmarks (bench/*.cu) build against kiec's headers and the generated ABI header:
# bench_build SOURCE OUT [nvcc flags ...] makes /tmp/OUT from bench/SOURCE.cu
if [ -n "${HOPS:-}${COMPUTE:-}${L2:-}${STREAM:-}${CLUSTER:-}${ACQUIRE:-}${KVSLICE:-}${MMA:-}" ]; then
  mkdir -p /tmp/abi && python3 -c "from kiec.codegen.persistent_abi import header; print(header())" > /tmp/abi/persistent_abi.h
fi
# (scripts/bench_build.sh: a build carried as .carry/bench/OUT, made on the CPU machine by scripts/bench_carry.sh, is
# used without nvcc while its stamp says it is of this tree's sources and flags)
bench_build() { bash scripts/bench_build.sh "$@"; }
# HOPS=1: the latency of one phase hop six ways, and two of them with HBM streaming meanwhile, then the hop that adds
# every SM's part of every output (bench/hop_latency.cu); HOPS=accum: that last table alone
if [ -n "${HOPS:-}" ]; then
  hops_arg=(); [ "$HOPS" = accum ] && hops_arg=(accum)
  bench_build hop_latency hop_latency && timeout 180 /tmp/hop_latency "${hops_arg[@]}" 2>&1 | tee "$OUT/hops.txt"
fi
# L2=1: whether pages asked of L2 ahead (cp.async.bulk.prefetch.L2) copy into shared memory faster afterwards,
# all SMs at once (bench/l2_prefetch.cu)
if [ -n "${L2:-}" ]; then
  bench_build l2_prefetch l2_prefetch && timeout 120 /tmp/l2_prefetch 2>&1 | tee "$OUT/l2_prefetch.txt"
fi
# CLUSTER=1: a GEMV prologue's read of x with the K cut over a thread-block cluster of 1, 2 or 4 blocks and the
# cluster's partial sums exchanged through distributed shared memory (bench/cluster_x.cu)
if [ -n "${CLUSTER:-}" ]; then
  bench_build cluster_x cluster_x && timeout 120 /tmp/cluster_x 2>&1 | tee "$OUT/cluster_x.txt"
fi
# ACQUIRE=1: whether a thread keeps several acquire loads of counters in flight, and what a fence after relaxed loads
# costs (bench/acquire_pipeline.cu: the question before polling a counter with staggered loads)
if [ -n "${ACQUIRE:-}" ]; then
  bench_build acquire_pipeline acquire_pipeline && timeout 60 /tmp/acquire_pipeline 2>&1 | tee "$OUT/acquire_pipeline.txt"
fi
# KVSLICE=1: how fast attention's long-context slice (llama-3.2-1b's at 8192) reads its K/V rows, as graph mode and the
# persistent kernel run it, lean, on the tensor cores and as bare loads, alone and beside a ring refill (bench/kv_slice.cu)
# (KVSLICE="W,U ...": those compute warps and keys a pass, each its own build; 1: 8,8 8,4 12,4)
if [ -n "${KVSLICE:-}" ]; then
  shapes=$KVSLICE; [ "$shapes" = 1 ] && shapes="8,8 8,4 12,4"
  for wu in $shapes; do
    bench_build kv_slice "kv_slice_${wu/,/_}" -DKV_WARPS=${wu%,*} -DKV_U=${wu#*,} && timeout 60 "/tmp/kv_slice_${wu/,/_}"
  done 2>&1 | tee "$OUT/kv_slice.txt"
fi
# STREAM=1: how fast the weight ring delivers when nothing stops it (the LM head's case), against the read ceiling,
# with the GEMV tile consuming, other ring shapes and L2 policy, and with a warp polling a counter meanwhile (acquire or
# relaxed loads: what a poll costs the stream; bench/stream_rate.cu)
if [ -n "${STREAM:-}" ]; then
  bench_build stream_rate stream_rate -DKIEC_COMPUTE_THREADS=256 && timeout 120 /tmp/stream_rate 2>&1 | tee "$OUT/stream_rate.txt"
fi
# COMPUTE=1: how fast the persistent GEMV's compute warps consume pages already in shared memory, warp sums one
# item at a time and in batches of 8, with TMA copies landing meanwhile, and a share's time with its code fetched
# again against kept hot, the traced step's page-wait timing against none, and %globaltimer's step (bench/gemv_compute.cu)
# (COMPUTE=look: warp sums one at a time, each warp looking at its share's first pages at once, persist_page_look,
# against the same without; COMPUTE=items: a warp's items one at a time against 2 and 4 at once, persist_dot_items;
# COMPUTE=code: the code table alone, short shares with their code warm and cold, with L2 idle and with every SM's HBM
# stream busy, cold after 32-256 KB of other code, KIEC_CODE_TABLE)
if [ -n "${COMPUTE:-}" ]; then
  builds=("1 0 1" "8 0 1"); [ "$COMPUTE" = look ] && builds=("1 0 1" "1 1 1")
  [ "$COMPUTE" = items ] && builds=("1 0 1" "1 0 2" "1 0 4")
  code=0; [ "$COMPUTE" = code ] && builds=("1 0 1") code=1
  for blu in "${builds[@]}"; do
    read -r b look u <<< "$blu"
    name=gemv_compute_${b}_${look}_$u; [ "$code" = 1 ] && name=gemv_compute_code
    echo "--- warp sums $b at a time, page look $look, items at once $u, code table $code"
    bench_build gemv_compute "$name" -DKIEC_COMPUTE_THREADS=256 -DKIEC_REDUCE_BATCH=$b \
      -DKIEC_PAGE_LOOK=$look -DKIEC_DOT_ITEMS=$u -DKIEC_CODE_TABLE=$code && timeout 60 "/tmp/$name"
  done 2>&1 | tee "$OUT/gemv_compute.txt"
fi
# MMA=1: the GEMV tile's dot products on the tensor cores, 16 rows an mma (ldmatrix from a tile-major layout, and from
# row-major rows XOR-swizzled in 128-byte groups; x as hi and lo bf16 columns), 8 swizzled rows an mma (x as A) and
# the kernel's own pages with each item's chunks swizzled, 8 items an mma, the warps splitting the items' steps, a tile
# of 8 items and two at once (page_rows), against the FMA tile's way, on shares already in shared memory
# (bench/mma_rows.cu); page_rows' mmas in 2 chains, or (MMA=chains) in 1, 2 and 4, a build each
if [ -n "${MMA:-}" ]; then
  chains=2; [ "$MMA" = chains ] && chains="2 1 4"
  for c in $chains; do
    out=mma_rows flags=(); [ "$c" != 2 ] && out=mma_rows_c$c flags=(-DKIEC_MMA_CHAINS=$c)
    bench_build mma_rows "$out" "${flags[@]}" && timeout 120 "/tmp/$out"
  done 2>&1 | tee "$OUT/mma_rows.txt"
fi
# MODES=graph,persistent: the modes kiec bench compiles and times (default graph)
# VARIANTS="model v1 v2 ... [/ model v1 ...]": A/B of target-table variants (scripts/variants.py); VARIANTS_TRACE=POS:
# each persistent variant's step at POS traced too, side by side (a position within each model's context), each
# recording kept, all of them going home in $OUT/variants_traces.tar (the device tool brings back a few files a call, not
# one a variant; tar xf it, then scripts/trace_summary.py FILE.npz reads one); VARIANTS_ROUNDS=N: N rounds, not two
if [ -n "${VARIANTS:-}" ]; then
  rm -rf /tmp/variants_traces  # (a warm machine's last call may have left some)
  VARIANTS_TRACE_DIR=/tmp/variants_traces timeout 450 python3 scripts/variants.py ${VARIANTS_TRACE:+--trace=$VARIANTS_TRACE} \
    ${VARIANTS_ROUNDS:+--rounds=$VARIANTS_ROUNDS} $VARIANTS 2>&1 \
    | grep --line-buffered -v "^\[kiec\]" | stamp | tee "$OUT/variants.log"
  if ls /tmp/variants_traces/*.npz > /dev/null 2>&1; then
    (cd /tmp/variants_traces && tar cf - ./*.npz) > "$OUT/variants_traces.tar" && rm -rf /tmp/variants_traces
  fi
fi
for spec in "$@"; do
  # MODEL runs both default contexts (0 and 8192); MODEL:N runs context N alone
  model=${spec%%:*}; ctx=(); [ "$spec" != "$model" ] && ctx=(--context "${spec##*:}")
  name=$(echo "$spec" | tr -c 'A-Za-z0-9.\n-' '_')
  echo "=== kiec bench $model ${ctx[*]}"
  # VS="eager" or VS="" (set, empty): fewer peers than eager and torch.compile (runs that only compare kiec's modes)
  vs=(); [ -n "${VS+set}" ] && vs=(--vs "$VS")
  timeout 500 kiec bench "$model" "${ctx[@]}" ${MODES:+--mode $MODES} "${vs[@]}" --json "$OUT/bench_${name}.json" \
    --work-dir /tmp/kiec_bench 2>&1 \
    | grep --line-buffered -v "^\[kiec\] weights" | stamp
  # the disk holds 64 GB and each bench writes the weights once a mode (it recompiles every time): keep only
  # what TRACE or PROFILE reads after the loop
  keep=" "; for t in ${TRACE:-} ${PROFILE:-}; do keep+="${t%%:*} "; done; keep=${keep//-persistent/}
  case "$keep" in *" $model "*) ;; *) rm -rf /tmp/kiec_bench/"$model" /tmp/kiec_bench/"$model"-persistent ;; esac
done
# TRACE="model[:pos] ...": where one persistent token's time goes (in-kernel timestamps of the step at pos, 64 by
# default; models benched above with MODES=...persistent, the last bench of a model compiled its artifact: bench
# MODEL:8192 last to trace MODEL:8192)
# the recordings themselves go home in one traces.tar (python3 scripts/trace_summary.py FILE.npz reads one there)
# TRACE_WARM="0 1": each recording once per value N, after N traced launches whose recordings are dropped
# (Engine.trace's warm; files named _warmN for N > 0)
for t in ${TRACE:-}; do
  model=${t%%:*}; pos=64; [ "$t" != "$model" ] && pos=${t##*:}
  for w in ${TRACE_WARM:-0}; do
    name=trace_${model}_$pos; [ "$w" != 0 ] && name+=_warm$w
    timeout 120 python3 scripts/trace_summary.py /tmp/kiec_bench/$model-persistent $pos --warm="$w" \
      --save="$OUT/$name.npz" 2>&1 | tee "$OUT/$name.txt"
  done
done
if [ -n "${TRACE:-}" ]; then
  (cd "$OUT" && tar cf traces.tar trace_*.npz && rm -f trace_*.npz)
fi
# PROFILE=model: per-kernel times of two decode steps of a model benched above (ncu, clocks left alone).
# PROFILE_KERNEL=regex instead: ncu's speed-of-light, warp-state and memory sections for 4 launches of the kernels
# it matches, PROFILE_SKIP matching launches in, after a prompt of PROFILE_AT tokens (1): e.g. the attention at
# 8k context of a 16-layer model benched with :8192, PROFILE_AT=8191 PROFILE_SKIP=$((16 * 8190)) PROFILE_KERNEL=attention
# (PROFILE_SECTIONS="..." other ncu sections instead). The persistent kernel, one launch a generation:
# MODES=persistent PROFILE=MODEL-persistent PROFILE_KERNEL=persistent_kernel PROFILE_SECTIONS="WarpStateStats
# InstructionStats" (its warps' stall reasons, e.g. waiting on instruction fetch in a kernel of 150-175 KB of code,
# scripts/code_size.py);
# PROFILE_REPLAY=application reruns kiec-run for each of ncu's passes instead of replaying the kernel (the persistent
# kernel reads host memory, which a kernel replay does not restore)
if [ -n "${PROFILE:-}" ]; then
  art=/tmp/kiec_bench/$PROFILE; ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
  prompt=$(python3 -c "print(','.join(['1'] * ${PROFILE_AT:-1}))")
  if [ -n "${PROFILE_KERNEL:-}" ]; then
    sections=(); for sec in ${PROFILE_SECTIONS:-SpeedOfLight WarpStateStats MemoryWorkloadAnalysis}; do
      sections+=(--section "$sec"); done
    # PROFILE_SOURCE=1: the report kept ($OUT/ncu_MODEL.ncu-rep) and its per-instruction view (sampled warp stalls
    # a SASS line) exported as CSV; PROFILE_TOKENS: tokens kiec-run generates (2)
    export_args=(); [ -n "${PROFILE_SOURCE:-}" ] && export_args=(--export "$OUT/ncu_$PROFILE" --import-source no)
    timeout 400 "$ncu" --clock-control none -k "regex:$PROFILE_KERNEL" --launch-skip "${PROFILE_SKIP:-0}" \
      --launch-count "${PROFILE_COUNT:-4}" --replay-mode "${PROFILE_REPLAY:-kernel}" "${sections[@]}" "${export_args[@]}" \
      "$art/kiec-run" "$art" "$prompt" "${PROFILE_TOKENS:-2}" > "$OUT/ncu_${PROFILE}_kernel.txt" 2>&1
    if [ -n "${PROFILE_SOURCE:-}" ]; then
      "$ncu" --import "$OUT/ncu_$PROFILE.ncu-rep" --page source --csv --print-source sass \
        > "$OUT/ncu_${PROFILE}_source.csv" 2> "$OUT/ncu_${PROFILE}_source.err"
      "$ncu" --import "$OUT/ncu_$PROFILE.ncu-rep" --page details --print-details all \
        > "$OUT/ncu_${PROFILE}_details.txt" 2>&1
      [ -s "$OUT/ncu_${PROFILE}_source.err" ] && head -c 600 "$OUT/ncu_${PROFILE}_source.err"
      python3 scripts/ncu_source.py "$OUT/ncu_${PROFILE}_source.csv" | tail -6  # (its landmarks; the file has all)
    fi
    grep -E "attention|gemv|persistent|Duration|Throughput|Stall|Warp Cycles|Issued|Achieved|L2|DRAM|Instruction" \
      "$OUT/ncu_${PROFILE}_kernel.txt" | head -80
  else
    timeout 240 "$ncu" --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      "$art/kiec-run" "$art" "$prompt" 2 > "$OUT/ncu_$PROFILE.csv" 2>&1
    grep -v '^"' "$OUT/ncu_$PROFILE.csv" | tail -5
    python3 scripts/ncu_summary.py "$OUT/ncu_$PROFILE.csv"
  fi
fi
