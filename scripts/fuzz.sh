#!/usr/bin/env bash
# Runs weft's libFuzzer targets (fuzz/) for SECONDS each (default 60), one after the other:
#   scripts/fuzz.sh [SECONDS] [TARGET...]      (targets: all of them unless named)
# Built on stable Rust: libFuzzer's coverage instrumentation (SanitizerCoverage) needs only the
# stable `-C` flags below, the ones cargo-fuzz passes with `--sanitizer none`; the `fuzz` profile
# turns debug assertions and overflow checks on. The build has its own target directory,
# ${CARGO_TARGET_DIR:-target}/fuzz. Each target starts from a scratch copy of its committed
# corpus (fuzz/corpus/<target>, left untouched) and prints one line: executions, seconds and
# the result. A crash (a panic, an abort, an input over 10 s or 1 GiB) fails the script; the
# input that caused it is kept where the line says (turn it into a regression test in the
# parser's crate).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(bootstrap_frame memory_descriptor plan_loader tuning_table proxy_wire counter_order)
fi

bins=()
for target in "${targets[@]}"; do
  bins+=(--bin "$target")
done
fuzz_dir="$(realpath -m "${CARGO_TARGET_DIR:-target}/fuzz")"
triple="$(rustc -vV | sed -n 's/^host: //p')"
# `--target` keeps the flags off build scripts and proc macros (they run on the host uninstrumented).
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing" \
  CARGO_TARGET_DIR="$fuzz_dir" cargo build --quiet --locked --profile fuzz --target "$triple" -p weft-fuzz \
  "${bins[@]}"

failed=0
for target in "${targets[@]}"; do
  run="$fuzz_dir/run/$target"
  artifacts="$fuzz_dir/artifacts/$target"
  rm -rf "$run"
  mkdir -p "$run/corpus" "$artifacts"
  cp fuzz/corpus/"$target"/* "$run/corpus/"
  status=0
  "$fuzz_dir/$triple/fuzz/$target" "$run/corpus" -max_total_time="$seconds" -print_final_stats=1 \
    -timeout=10 -rss_limit_mb=1024 -artifact_prefix="$artifacts/" > "$run/log" 2>&1 || status=$?
  executions="$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/log")"
  if [ "$status" -eq 0 ]; then
    result="0 crashes"
  else
    failed=1
    input="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$run/log" | tail -n 1)"
    result="CRASH (exit $status): input ${input:-not written}, log $run/log"
  fi
  printf 'fuzz %-18s %12s executions in %ss: %s\n' "$target" "${executions:-?}" "$seconds" "$result"
  if [ "$status" -ne 0 ]; then
    grep -A1 'panicked at\|^SUMMARY:\|^==[0-9]*== ERROR' "$run/log" >&2 || tail -n 20 "$run/log" >&2
  fi
done
exit "$failed"
