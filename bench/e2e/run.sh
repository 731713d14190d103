#!/usr/bin/env bash
# The end-to-end benchmarks on every visible GPU (bench/e2e/__init__.py says what they are), each
# launch bounded by its timeout, one summary line per launch, rows in ${OUT:-out/e2e}/*.json and
# the report merged from them (e2e-results.md, e2e.svg) for docs/perf/e2e.md:
#   bench/e2e/run.sh [tp] [ep]          (default: both)
# The tensor-parallel step runs twice, since weft's libnccl.so.2 is preloaded per process: once
# on the real NCCL with weft.Communicator beside it, once through ${WEFT_NCCL:-target/nccl/libnccl.so.2}.
# Needs torch, torchrun (${TORCHRUN:-torchrun}) and the `weft` wheel in one environment
# (scripts/gpu-suite.sh e2e installs the wheel into ${PYTHON:-python3}'s); GPUS overrides the
# rank count; TP_ARGS and EP_ARGS add arguments (e.g. TP_ARGS="--models 8b,70b,405b").
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD/bench${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
out="${OUT:-out/e2e}"
mkdir -p "$out"
torchrun="${TORCHRUN:-torchrun}"
gpus="${GPUS:-$(nvidia-smi -L | wc -l)}"
lib="${WEFT_NCCL:-$PWD/target/nccl/libnccl.so.2}"
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(tp ep)

# launch NAME SECONDS PRELOAD MODULE ARGS...: one torchrun launch (PRELOAD: a library to
# preload, or empty), its log in $out/NAME.txt and its rows in $out/NAME.json; prints how many
# rows passed and failed their checks.
launch() {
  local name="$1" limit="$2" preload="$3" module="$4"
  shift 4
  LD_PRELOAD="$preload" timeout "$limit" "$torchrun" --nproc-per-node "$gpus" -m "$module" \
    --json "$out/$name.json" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  echo "e2e $name: rc=$rc, $(grep -c ': ok$' "$out/$name.txt") rows ok, $(grep -c ': FAIL$' "$out/$name.txt") failed"
  grep -h -m3 -E 'FAIL$|Error|error:' "$out/$name.txt"
}

for part in "${parts[@]}"; do
  case "$part" in
    # shellcheck disable=SC2086 # TP_ARGS and EP_ARGS are lists of arguments
    tp) launch tp-nccl 180 "" e2e.tp_decode --backends nccl,weft-python ${TP_ARGS:-}
        if [ -f "$lib" ]; then
          launch tp-weft-nccl 150 "$lib" e2e.tp_decode --backends weft-nccl ${TP_ARGS:-}
        else
          echo "e2e tp-weft-nccl: no $lib (build it with scripts/package-nccl.sh, or set WEFT_NCCL)"
        fi ;;
    # shellcheck disable=SC2086
    ep) launch ep 180 "" e2e.ep_moe ${EP_ARGS:-} ;;
    *) echo "unknown part $part (tp, ep)"; exit 2 ;;
  esac
done

results=("$out"/*.json)
if [ -e "${results[0]}" ]; then
  "${PYTHON:-python3}" -m e2e.report --out "$out" "${results[@]}" > "$out/report.txt" 2>&1
  echo "e2e report: rc=$? ($out/e2e-results.md$([ -f "$out/e2e.svg" ] && echo ", $out/e2e.svg"))"
else
  echo "e2e report: no results"
fi
