#!/usr/bin/env bash
# compute-sanitizer over weft's kernel families on one GPU: memcheck, racecheck, synccheck and
# initcheck, each over `weft selftest` subsets (small sizes: WEFT_SELFTEST_TYPES narrows the
# collective matrix). Ranks share the GPU (2 ranks as threads of one process) where the tool
# runs them so; where it does not (a tool that serializes kernels deadlocks ranks that wait on
# each other), the families that run on one rank (collectives, executor, EP) run on one rank and
# the others are reported as not run.
#   scripts/sanitize.sh OUT_DIR        (WEFT, SANITIZER, SANITIZE_TOOLS, SANITIZE_TIMEOUT)
#   scripts/sanitize.sh --check-verdicts   (no GPU: the verdicts of sample logs, as CI runs it)
# Every (tool, family, ranks) gets one verdict line:
#   CLEAN     the tool ran the self-test to its end: 0 sanitizer errors and `N passed, 0 failed`
#   FINDINGS  the tool reported errors (the first ones follow; the log is in OUT_DIR)
#   REFUSED   the tool did not run the program on a GPU of this machine (the device or driver
#             refused it: the self-test never reached the GPU under the tool)
#   INCOMPLETE the program failed or timed out under the tool without a sanitizer error
#   NOT RUN   the family needs 2 ranks and this tool cannot run 2 ranks on one GPU
# Only CLEAN is a pass; the last line counts each verdict, and the exit code is 0 only when
# every line is CLEAN.
set -uo pipefail
# verdict LOG RC: the verdict of one run from its log and exit status (see the header). A run
# counts only if the self-test reached the GPU under the tool (its "running the suite" line):
# a tool that hides the device leaves the self-test's CPU part passing on its own.
verdict() {
  local log="$1" rc="$2" summary
  # memcheck, synccheck and initcheck end with `ERROR SUMMARY: N errors`; racecheck with
  # `RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)`.
  summary="$(grep -hE '(ERROR|RACECHECK) SUMMARY:' "$log" | tail -1)"
  if [ -n "$summary" ] && ! grep -qE '(ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards)' <<< "$summary"; then
    echo FINDINGS
  elif ! grep -q '^running the suite with one process driving' "$log"; then
    [ "$rc" -eq 124 ] && echo INCOMPLETE || echo REFUSED
  elif [ -n "$summary" ] && [ "$rc" -eq 0 ] && grep -qE '^[1-9][0-9]* passed, 0 failed' "$log"; then
    echo CLEAN
  else
    echo INCOMPLETE
  fi
}

# The verdicts of sample logs of each tool (what the tools print, trimmed): runs without a GPU.
check_verdicts() {
  local dir failed=0 case name rc text expected got
  dir="$(mktemp -d)"
  local suite='running the suite with one process driving 2 ranks on 1 GPU(s) from threads...'
  local cases=(
    "memcheck-clean|0|$suite\n12 passed, 0 failed\n========= ERROR SUMMARY: 0 errors|CLEAN"
    "memcheck-findings|99|$suite\n========= Invalid __global__ read of size 4 bytes\n12 passed, 0 failed\n========= ERROR SUMMARY: 1 error|FINDINGS"
    "racecheck-clean|0|$suite\n12 passed, 0 failed\n========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)|CLEAN"
    "racecheck-findings|99|$suite\n========= Error: Race reported between Write access\n12 passed, 0 failed\n========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)|FINDINGS"
    "racecheck-warnings|0|$suite\n12 passed, 0 failed\n========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)|FINDINGS"
    "failed-test|1|$suite\n11 passed, 1 failed\n========= ERROR SUMMARY: 0 errors|INCOMPLETE"
    "timed-out|124|$suite|INCOMPLETE"
    "refused|0|no GPU here: the CPU part only\n3 passed, 0 failed\n========= ERROR SUMMARY: 0 errors|REFUSED"
  )
  for case in "${cases[@]}"; do
    IFS='|' read -r name rc text expected <<< "$case"
    printf '%b\n' "$text" > "$dir/$name.txt"
    got="$(verdict "$dir/$name.txt" "$rc")"
    if [ "$got" != "$expected" ]; then
      echo "sanitize verdicts: $name is $got, expected $expected"
      failed=1
    fi
  done
  rm -rf "$dir"
  [ "$failed" -eq 0 ] && echo "sanitize verdicts: ${#cases[@]} sample logs judged as expected"
  return "$failed"
}

if [ "${1:-}" = --check-verdicts ]; then
  check_verdicts
  exit
fi
out="${1:?usage: scripts/sanitize.sh OUT_DIR}"
mkdir -p "$out"

weft="${WEFT:-target/release/weft}"
sanitizer="${SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}"
tools=(${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck})
limit="${SANITIZE_TIMEOUT:-900}"
# Kernel families and the self-test steps that launch them.
families=(channels:semaphore,hb,ll collectives:coll executor:plan proxy:port ep:ep gin:gin)
# Families whose kernels run on one rank.
single_rank="collectives executor ep"
# Kernels run many times slower under the tools: device waits and the bootstrap get room.
export WEFT_TIMEOUT="${WEFT_TIMEOUT:-300}" WEFT_BOOTSTRAP_TIMEOUT="${WEFT_BOOTSTRAP_TIMEOUT:-900}"
export WEFT_SELFTEST_TYPES="${WEFT_SELFTEST_TYPES:-bf16,f32,i8}"
export WEFT_LOG="${WEFT_LOG:-weft_cli::selftest=info}"
# Set, so that `weft` does not run itself again to set it (an exec under the tool).
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"

if [ ! -x "$sanitizer" ]; then
  echo "sanitize: REFUSED (no compute-sanitizer at $sanitizer): nothing checked"
  exit 1
fi
"$sanitizer" --version 2>&1 | tail -1

# run TOOL FAMILY STEPS RANKS: one run; prints its verdict line and sets $last.
run() {
  local tool="$1" family="$2" steps="$3" ranks="$4" log rc
  log="$out/$tool-$family-$ranks-ranks.txt"
  local extra=()
  [ "$tool" = racecheck ] && extra=(--racecheck-report analysis)
  timeout "$limit" "$sanitizer" --tool "$tool" --error-exitcode 99 "${extra[@]}" \
    "$weft" selftest --gpus 1 --ranks "$ranks" --mode threads --only "$steps" > "$log" 2>&1
  rc=$?
  last="$(verdict "$log" "$rc")"
  echo "sanitize $tool $family ($ranks rank$([ "$ranks" -gt 1 ] && echo s) on one GPU): $last (rc=$rc) $(grep -hE '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)"
  case "$last" in
    FINDINGS) grep -h -m8 -E '^========= (Invalid|Race|Barrier|Uninitialized|ERROR|Error|Warning|.*hazard)' "$log" ;;
    REFUSED) grep -h -m4 -E '^=========|No GPU|no GPU' "$log" ;;
    INCOMPLETE) grep -h -m4 -E 'FAIL|timed out' "$log" ;;
  esac
  counts[$last]=$((${counts[$last]:-0} + 1))
}

declare -A counts
for tool in "${tools[@]}"; do
  # Whether this tool runs 2 ranks sharing the GPU: the semaphore ping-pong, whose kernels wait
  # on each other, must complete and pass under it (a short device timeout keeps a deadlock
  # short); what the tool reports about it, the channels family reports again.
  probe="$out/$tool-probe.txt"
  WEFT_TIMEOUT=60 timeout 300 "$sanitizer" --tool "$tool" "$weft" selftest --gpus 1 --ranks 2 --mode threads \
    --only semaphore > "$probe" 2>&1
  probe_rc=$?
  probe_verdict="$(verdict "$probe" "$probe_rc")"
  shared=no
  [ "$probe_verdict" != REFUSED ] && grep -qE '^[1-9][0-9]* passed, 0 failed' "$probe" && shared=yes
  echo "sanitize $tool: 2 ranks sharing one GPU: $([ $shared = yes ] && echo runs || echo "do not run ($probe_verdict, rc=$probe_rc)")"
  if [ "$probe_verdict" = REFUSED ]; then
    for pair in "${families[@]}"; do
      echo "sanitize $tool ${pair%%:*}: REFUSED (the tool did not run the program: $probe)"
      counts[REFUSED]=$((${counts[REFUSED]:-0} + 1))
    done
    grep -h -m4 -E '^=========' "$probe"
    continue
  fi
  for pair in "${families[@]}"; do
    family="${pair%%:*}" steps="${pair#*:}"
    if [ $shared = yes ]; then
      run "$tool" "$family" "$steps" 2
    elif [[ " $single_rank " == *" $family "* ]]; then
      run "$tool" "$family" "$steps" 1
    else
      echo "sanitize $tool $family: NOT RUN (needs 2 ranks; this tool does not run 2 ranks on one GPU)"
      counts["NOT RUN"]=$((${counts["NOT RUN"]:-0} + 1))
    fi
  done
done
line="sanitize:"
for v in CLEAN FINDINGS REFUSED INCOMPLETE "NOT RUN"; do
  line+=" ${counts[$v]:-0} $v,"
done
echo "${line%,}"
total=0
for v in "${!counts[@]}"; do total=$((total + counts[$v])); done
[ "$total" -gt 0 ] && [ "${counts[CLEAN]:-0}" -eq "$total" ]
