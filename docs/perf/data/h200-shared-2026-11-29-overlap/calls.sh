#!/usr/bin/env bash
# One call on the GPU machine: STEPS="warm mn2 bench2ph mn4 ep ..." with a deadline BUDGET seconds.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export WEFT_LOG=weft_cli::selftest=info
W=${WEFT:-target/release/weft}
O=${OUT:-out}; mkdir -p "$O"
start=$(date +%s); budget=${BUDGET:-570}
left() { echo $(( budget - ($(date +%s) - start) )); }
bound() { local want=$1 l; l=$(left); (( l < want )) && want=$l; (( want < 5 )) && want=5; echo $want; }
S="$O/summary.txt"
nvidia-smi -L >> "$S" 2>&1
for step in ${STEPS:-warm mn2 bench2ph mn4 ep}; do
  t0=$(date +%s)
  case $step in
    warm) CUDA_VISIBLE_DEVICES= timeout $(bound 200) $W selftest > "$O/warm.txt" 2>&1; rc=$?
          grep -h "passed,\|FAIL" "$O/warm.txt" | tail -5 >> "$S"; rm -f "$O/warm.txt" ;;
    mn2) WEFT_SELFTEST_TYPES=${TYPES:-bf16,f32,i32} timeout $(bound ${MN2:-150}) $W selftest --only multinode --mode threads --ranks 2 > "$O/mn2.txt" 2>&1; rc=$? ;;
    mn4) WEFT_SELFTEST_TYPES=${TYPES:-bf16,f32} timeout $(bound ${MN4:-200}) $W selftest --only multinode --mode threads --ranks 4 > "$O/mn4.txt" 2>&1; rc=$? ;;
    bench2ph)
      for per in 1 2; do
        ranks=$(( per * 2 ))
        WEFT_RANKS_PER_NODE=$per WEFT_EMU_NET_LATENCY_US=2 WEFT_EMU_NET_GBPS=50 WEFT_ALGO_ALLREDUCE=2ph \
          timeout $(bound 120) $W bench allreduce --ranks $ranks -b 1K -e 64M -f 4 --graph --check --versus port_ring --trials 3 \
          >> "$O/bench2ph.txt" 2>&1; rc=$?
        echo "per_node=$per rc=$rc" >> "$O/bench2ph.txt"
      done ;;
    epb) timeout $(bound ${EPB:-200}) $W bench ep --nodes 2 --ranks 2 --sms ${SMS:-24,64} --check > "$O/epb.txt" 2>&1; rc=$? ;;
    phases) WEFT_LOG=weft_ep::phases=debug timeout $(bound ${PHT:-150}) $W bench ep --nodes 2 --ranks 2 --sms 24 --ll-tokens 0 > "$O/phases-raw.txt" 2>&1; rc=$?
          sed 's/\x1b\[[0-9;]*m//g' "$O/phases-raw.txt" | grep -v "weft_ep::phases" > "$O/phases.txt"
          sed 's/\x1b\[[0-9;]*m//g' "$O/phases-raw.txt" | grep "weft_ep::phases" | sed 's/.*weft_ep::phases: //' | head -3000 >> "$O/phases.txt"; rm -f "$O/phases-raw.txt" ;;
    ep) timeout $(bound ${EPT:-150}) $W selftest --only ep --mode threads --ranks 2 > "$O/ep.txt" 2>&1; rc=$? ;;
    ep4) timeout $(bound ${EPT4:-200}) $W selftest --only ep --mode threads --ranks 4 > "$O/ep4.txt" 2>&1; rc=$? ;;
  esac
  echo "step $step rc=$rc $(( $(date +%s) - t0 ))s" >> "$S"
  for f in "$O"/$step*.txt; do [ -f "$f" ] && grep -h "passed,\|^FAIL\|FAIL " "$f" | tail -4 >> "$S"; done
done
echo "total $(( $(date +%s) - start ))s" >> "$S"
