#!/usr/bin/env bash
# Call T: validate what has not run on a GPU (p2p semaphores, several FIFOs, Python EP between
# nodes) and time HT EP at the target's 4096 tokens. Each step bounded; overall deadline.
# The binaries (weft, the wheel, pyep-diag.py) lie in $STAGE, built where Rust is.
STAGE=$(realpath "${STAGE:-stage}")
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export WEFT_LOG="${WEFT_LOG:-weft_cli::selftest=info}"
export WEFT_CACHE_DIR=$STAGE/cache
mkdir -p "$WEFT_CACHE_DIR"
W=$STAGE/weft
start=$(date +%s); budget=${BUDGET:-560}
step() { # step NAME TIMEOUT CMD...
  local name=$1 t=$2; shift 2
  local left=$(( budget - ($(date +%s) - start) ))
  (( left < 15 )) && { echo "SKIP $name (no time left)"; return; }
  (( t > left - 5 )) && t=$(( left - 5 ))
  local s=$(date +%s)
  timeout "$t" "$@" > "$OUT/$name.txt" 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - s ))s: $(grep -h -E 'passed,|checks? passed' "$OUT/$name.txt" | tail -1)"
}
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpus.txt" 2>&1
for s in "$@"; do case $s in
  warm) CUDA_VISIBLE_DEVICES= step warm 150 $W selftest ;;
  coll) step selftest-coll 170 $W selftest --only coll --mode threads ;;
  sendrecv) step sendrecv-check 60 $W bench sendrecv -b 256M -e 1G -f 2 --check --nccl ;;
  fifos) for layout in "1 1" "4 2"; do read -r f t <<< "$layout"; tag=f$f-t$t
           WEFT_PROXY_FIFOS=$f WEFT_PROXY_THREADS=$t step selftest-ep-$tag 90 $W selftest --only ep --mode threads
           WEFT_PROXY_FIFOS=$f WEFT_PROXY_THREADS=$t step selftest-gin-$tag 90 $W selftest --only gin --mode threads
           WEFT_PROXY_FIFOS=$f WEFT_PROXY_THREADS=$t step bench-ep-nodes-$tag 60 $W bench ep --nodes 2 --sms 24 --check
           grep -E '^ +[0-9]+ ' "$OUT/bench-ep-nodes-$tag.txt"; done ;;
  pyep) /opt/torch/.venv/bin/python -m pip install --no-deps --force-reinstall $STAGE/weft-*.whl > "$OUT/pip.txt" 2>&1; echo "pip rc=$?"
        PATH=/opt/torch/.venv/bin:$PATH step python-ep 150 torchrun --nproc-per-node 2 scripts/python-ep-test.py
        grep -h '^FAIL' "$OUT/python-ep.txt" | head -5 ;;
  ht4096) step bench-ep-ht4096 120 $W bench ep --nodes 2 --sms 24 --tokens 4096 --ll-tokens 0 --check
          grep -E '^ +[0-9]+ ' "$OUT/bench-ep-ht4096.txt" ;;
  ep) step selftest-ep 120 $W selftest --only ep --mode threads ;;
  nodes) step bench-ep-nodes 90 $W bench ep --nodes 2 --sms 24 --check; grep -E '^ +[0-9]+ ' "$OUT/bench-ep-nodes.txt" ;;
  epproc) step selftest-ep-processes 120 $W selftest --only ep --mode processes ;;
  pydiag) for v in ${DIAG:-"A:normal-first:7" "B:normal-first:" "C:ll-first:"}; do IFS=: read -r tag order chaos <<< "$v"
            s0=$(date +%s); DIAG_ORDER=$order DIAG_CHAOS=$chaos PATH=/opt/torch/.venv/bin:$PATH timeout 60 torchrun --nproc-per-node 2 $STAGE/pyep-diag.py > "$OUT/one.txt" 2>&1
            echo "== pydiag $tag rc=$? $(( $(date +%s) - s0 ))s: $(grep -h 'passed,' "$OUT/one.txt")" | tee -a "$OUT/pydiag.txt"; grep -h 'FAIL' "$OUT/one.txt" | head -3 | tee -a "$OUT/pydiag.txt"; done; rm -f "$OUT/one.txt" ;;
  pyinstall) /opt/torch/.venv/bin/python -m pip install --no-deps --force-reinstall $STAGE/weft-*.whl > "$OUT/pip.txt" 2>&1; echo "pip rc=$?" ;;
  nvrar) M=docs/perf/data/2xh100-2026-11-28-model/model-emu-ports.json
         for v in port_ring port_allpairs; do WEFT_RANKS_PER_NODE=1 WEFT_EMU_NET_LATENCY_US=2 WEFT_EMU_NET_GBPS=50 WEFT_ALGO_ALLREDUCE=nvrar \
           step nvrar-vs-$v 90 $W bench allreduce -b 1K -e 4M -f 2 --graph --check --versus $v --model $M; tail -14 "$OUT/nvrar-vs-$v.txt"; done ;;
esac; done
true
