#!/usr/bin/env bash
# Everything weft measures on a GPU machine, from binaries built elsewhere (a GPU machine may
# have no Rust): the selftest, every collective against NCCL (checked and timed), the tuner,
# and PyTorch through weft's libnccl.so.2. Logs and tables go to ${OUT:-out}/<step>/, each step
# bounded by its own timeout, so one failing step does not stop the others.
#   scripts/gpu-suite.sh [warm] [selftest] [check] [perf] [tune] [torch] [python] [ep] [gin] [proxy] [exec] [e2e] [conformance] [faults] [versus]   (default: all)
#   scripts/gpu-suite.sh soak sanitize multinode   (run only when named: long, or of a length not yet measured)
# The warm step (first by default) compiles every kernel on the CPUs with the self-test's CPU
# part: a fresh machine otherwise spends the first seconds to minutes of each step compiling.
# The versus step checks every element of an algorithm and times it against the one it replaced
# as a default, in the same run, at every rank count from 2 to the GPUs there are: AllToAll and
# SendRecv over LL packets against p2p (1 KB - 4 MB), Broadcast and Reduce down the chain against
# HB (1 KB - 64 MB; the perf step times the defaults against NCCL up to 1 GB), and LL128 lines
# against what they would replace: Broadcast and Reduce against the chain (1 KB - 64 MB, in rounds of a half past 2 MB),
# AllReduce against the LL two-shot (1 KB - 1 MB: a shard of 1 MB / ranks fits both's slots; and the one-shot against it, 1 KB - 512 KB),
# AllGather and ReduceScatter against LL (1 KB - 512 KB in all). VERSUS=ll128 (a comma list of
# algorithms) runs only those.
# Binaries: ${WEFT:-target/release/weft} and ${WEFT_NCCL:-target/nccl/libnccl.so.2};
# torchrun: ${TORCHRUN:-torchrun}; python: ${PYTHON:-python3}; ${REAL_NCCL}, when set, is the real
# libnccl.so.2 the torch step also runs behind weft as its fallback, and the one the conformance
# step compares weft with (default: the pip nvidia-nccl-cu13 of /opt/torch/.venv). The conformance
# step builds its harness here with g++ (nccl.h: $NCCL_INCLUDE or .deps/nccl, see its build.sh).
# The python step installs the `weft` wheel built where Rust is (`scripts/python-wheel.sh
# --release`): ${WEFT_WHEEL}, else the newest target/wheels/weft-*.whl, with `pip install
# --no-deps` into ${PYTHON:-python3}'s environment (on the GPU machines, /opt/torch/.venv's python
# with PyTorch; one abi3 wheel serves its Python 3.12), then runs the package's tests and
# scripts/python-gpu-test.py on 2 ranks against torch.distributed's NCCL, and
# scripts/python-ep-test.py (weft.ep as DeepEP's users call it) on 2 ranks.
# The ep step runs the MoE self-test and `weft bench ep` at 24, 32, 64 and 128 SMs. The gin step
# runs the GIN examples' self-test with a GPU per rank and with 2 ranks sharing one GPU, then
# `weft bench gin` (put + signal latency and bandwidth, the AllToAll against its α-β floor), then
# scripts/nccl-device-api-test.sh (ncclDevCommCreate on weft's libnccl.so.2, kernels on weft::Gin).
# The fifos step (asked for by name) runs the EP and GIN self-tests and EP between 2 virtual nodes
# with the proxy on one FIFO and on 4 FIFOs served by 2 threads (WEFT_PROXY_FIFOS/_THREADS).
# The multinode step runs `weft selftest --only multinode --mode threads`: the AllReduces that
# cross nodes (nvrar, 2ph, the NVRAR and 2PH plans, port_ring, port_allpairs) at 2 nodes x 1 and x 2 ranks and 4
# nodes x 1 (virtual nodes over the emulated NIC in chaos mode; ranks share GPUs where there are
# fewer GPUs than ranks), every element checked; its SKIP lines say what could not run and why.
# Then 2 nodes x 8 (--ranks 16, bf16 and f32), the shape of two 8-GPU servers.
# The e2e step installs the wheel as the python step does, then runs bench/e2e/run.sh: a Llama
# tensor-parallel decode step through NCCL, weft's libnccl.so.2 and weft.Communicator, and the
# DeepSeek-V3 MoE layer through weft.ep and an all-to-all over NCCL (docs/perf/e2e.md; about 3
# minutes on 2 GPUs).
# The faults step kills a rank with SIGKILL mid all-reduce through libnccl.so.2
# (scripts/nccl-fault-test.py, WEFT_TIMEOUT=2) over NVLink, the proxy with TCP, and the emulated NIC.
# The soak step runs `weft soak` for ${SOAK_MINUTES:-3} minutes (whole minutes) with one process
# per GPU, then as long with 2 ranks sharing GPU 0 as threads; each ends with its summary line
# (calls, bytes, wrong elements, the slowest call and the seed that replays it). The sanitize
# step runs scripts/sanitize.sh: compute-sanitizer's memcheck, racecheck, synccheck and
# initcheck over the self-test's kernel families on one GPU, one verdict line each (CLEAN,
# FINDINGS, REFUSED, INCOMPLETE, NOT RUN: only CLEAN passes).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The self-test prints its summary at the end; this streams every outcome as it happens, so a
# run cut short by its timeout still shows how far it got.
export WEFT_LOG="${WEFT_LOG:-weft_cli::selftest=info}"
out="${OUT:-out}"
weft="${WEFT:-target/release/weft}"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(warm selftest check perf tune torch python ep gin proxy exec e2e conformance faults versus)

# install_wheel STEP DIR: the `weft` wheel (${WEFT_WHEEL}, else the newest target/wheels/weft-*.whl)
# into ${PYTHON:-python3}'s environment, the log in DIR; false when there is no wheel.
install_wheel() {
  local wheel="${WEFT_WHEEL:-$(ls -t target/wheels/weft-*.whl 2> /dev/null | head -1)}"
  if [ -z "$wheel" ] || [ ! -f "$wheel" ]; then
    echo "$1: no wheel (build it with scripts/python-wheel.sh --release, or set WEFT_WHEEL)"
    return 1
  fi
  "${PYTHON:-python3}" -m pip install --no-deps --force-reinstall "$wheel" > "$2/install.txt" 2>&1
  echo "$1: install of $(basename "$wheel"): rc=$?"
}

for step in "${steps[@]}"; do
  dir="$out/$step"
  mkdir -p "$dir"
  case "$step" in
    warm) CUDA_VISIBLE_DEVICES= timeout 600 "$weft" selftest > "$dir/warm.txt" 2>&1
          echo "warm (kernels compiled on the CPUs): rc=$? $(grep -h 'passed,' "$dir/warm.txt" | tail -1)" ;;
    versus) gpus="$(nvidia-smi -L | wc -l)"
            for ranks in $(seq 2 "$gpus"); do
              for pair in alltoall:ll:p2p:4M:4 sendrecv:ll:p2p:4M:4 broadcast:chain:hb:64M:4 reduce:chain:hb:64M:4 \
                          broadcast:ll128:chain:64M:2 reduce:ll128:chain:64M:2 allreduce:ll128:ll2:1M:2 allreduce:ll:ll2:512K:2 \
                          allgather:ll128:ll:512K:2 reducescatter:ll128:ll:512K:2; do
                IFS=: read -r c algo base max factor <<< "$pair"
                # ${VERSUS}, when set, names the algorithms to run (ll128, or ll,chain ...).
                [[ -n "${VERSUS:-}" && ",$VERSUS," != *",$algo,"* ]] && continue
                var="WEFT_ALGO_$(echo "$c" | tr a-z A-Z)"
                log="$dir/$c-$algo-$ranks-ranks.txt"
                env "$var=$algo" timeout 300 "$weft" bench "$c" --gpus "$ranks" -b 1K -e "$max" -f "$factor" --graph \
                  --check --versus "$base" > "$log" 2>&1
                echo "$algo $c at $ranks ranks against $base: rc=$? $(grep -h 'wrong elements' "$log" | tail -1)"
                grep -A12 '^# against' "$log"
              done
            done ;;
    selftest) timeout 600 "$weft" selftest --mode processes > "$dir/selftest.txt" 2>&1
              echo "selftest: rc=$? $(grep -h 'passed,' "$dir/selftest.txt" | tail -1)"
              # The collective matrix at every smaller rank count too (2 .. GPUs - 1), a GPU each.
              gpus="$(nvidia-smi -L | wc -l)"
              for ranks in $(seq 2 $((gpus - 1))); do
                timeout 300 "$weft" selftest --gpus "$ranks" --mode threads --only coll \
                  > "$dir/selftest-coll-$ranks-ranks.txt" 2>&1
                echo "selftest coll at $ranks ranks: rc=$? $(grep -h 'passed,' "$dir/selftest-coll-$ranks-ranks.txt" | tail -1)"
              done ;;
    check) WEFT="$weft" OUT="$dir" scripts/bench-collectives.sh check ;;
    perf) WEFT="$weft" OUT="$dir" FACTOR="${FACTOR:-4}" scripts/bench-collectives.sh perf ;;
    tune) timeout 600 "$weft" tune -f "${FACTOR:-4}" -o "$dir/tuning.json" > "$dir/tune.txt" 2>&1
          echo "tune: rc=$? $(head -1 "$dir/tune.txt")" ;;
    torch) lib="${WEFT_NCCL:-$PWD/target/nccl/libnccl.so.2}"
           gpus="$(nvidia-smi -L | wc -l)"
           LD_PRELOAD="$lib" timeout 300 "${TORCHRUN:-torchrun}" --nproc-per-node "$gpus" scripts/torch-nccl-test.py \
             > "$dir/torch-test.txt" 2>&1
           echo "torch test: rc=$? $(grep -h 'passed,' "$dir/torch-test.txt" | tail -1)"
           if [ -n "${REAL_NCCL:-}" ]; then
             WEFT_NCCL_FALLBACK_LIB="$REAL_NCCL" LD_PRELOAD="$lib" timeout 300 "${TORCHRUN:-torchrun}" --nproc-per-node "$gpus" \
               scripts/torch-nccl-test.py > "$dir/torch-test-fallback.txt" 2>&1
             echo "torch test with the real NCCL as fallback: rc=$? $(grep -h 'passed,' "$dir/torch-test-fallback.txt" | tail -1)"
           fi
           timeout 300 "${PYTHON:-python3}" scripts/nccl-single-process-test.py "$lib" > "$dir/single-process.txt" 2>&1
           echo "one process, every GPU (InitAll, groups, split): rc=$? $(grep -h 'passed,' "$dir/single-process.txt" | tail -1)"
           timeout 300 "${TORCHRUN:-torchrun}" --nproc-per-node "$gpus" scripts/torch-tp-mlp.py --save "$dir/mlp-nccl.pt" \
             > "$dir/mlp-nccl.txt" 2>&1
           LD_PRELOAD="$lib" timeout 300 "${TORCHRUN:-torchrun}" --nproc-per-node "$gpus" scripts/torch-tp-mlp.py \
             --save "$dir/mlp-weft.pt" --compare "$dir/mlp-nccl.pt" > "$dir/mlp-weft.txt" 2>&1
           echo "tensor-parallel MLP: rc=$? $(grep -h 'max |' "$dir/mlp-weft.txt" | tr '\n' ' ')"
           WEFT_NCCL="$lib" OUT="$dir" timeout 300 scripts/torch-nccl-compare.sh > "$dir/torch-latency.txt" 2>&1
           echo "torch latency: rc=$?"; cat "$dir/torch-latency.txt" ;;
    python) install_wheel python "$dir" || continue
            timeout 120 "${PYTHON:-python3}" -m pytest -q python/tests > "$dir/pytest.txt" 2>&1
            echo "python tests: rc=$? $(tail -1 "$dir/pytest.txt")"
            timeout 600 "${TORCHRUN:-torchrun}" --nproc-per-node 2 scripts/python-gpu-test.py > "$dir/gpu-test.txt" 2>&1
            echo "python GPU test (2 ranks, against NCCL): rc=$? $(grep -h 'passed,' "$dir/gpu-test.txt" | tail -1)"
            timeout 600 "${TORCHRUN:-torchrun}" --nproc-per-node 2 scripts/python-ep-test.py > "$dir/ep-test.txt" 2>&1
            echo "python EP test (2 ranks, import weft.ep as deep_ep): rc=$? $(grep -h 'passed,' "$dir/ep-test.txt" | tail -1)"
            grep -h '^FAIL' "$dir/gpu-test.txt" | head -5 ;;
    ep) timeout 120 "$weft" selftest --only ep --mode threads > "$dir/selftest-ep.txt" 2>&1
        echo "selftest ep: rc=$? $(grep -h 'passed,' "$dir/selftest-ep.txt" | tail -1)"
        # DeepEP's intranode shape at every SM count of the targets, checked before timing.
        timeout 300 "$weft" bench ep --sms 24,32,64,128 --check --json "$dir/ep.json" --plot "$dir/ep.svg" \
          > "$dir/bench-ep.txt" 2>&1
        echo "bench ep: rc=$?"; grep -E '^ +[0-9]+ ' "$dir/bench-ep.txt" ;;
    gin) timeout 300 "$weft" selftest --only gin --mode threads > "$dir/selftest-gin.txt" 2>&1
         echo "selftest gin: rc=$? $(grep -h 'passed,' "$dir/selftest-gin.txt" | tail -1)"
         timeout 300 "$weft" selftest --only gin --gpus 1 --ranks 2 --mode threads > "$dir/selftest-gin-shared.txt" 2>&1
         echo "selftest gin, 2 ranks on one GPU: rc=$? $(grep -h 'passed,' "$dir/selftest-gin-shared.txt" | tail -1)"
         # Issue 27's targets: put + signal latency and bandwidth, the AllToAll against its floor.
         timeout 300 "$weft" bench gin -b 4K -e 64M -f 4 --json "$dir/gin.json" > "$dir/bench-gin.txt" 2>&1
         echo "bench gin: rc=$?"; cat "$dir/bench-gin.txt"
         timeout 600 scripts/nccl-device-api-test.sh "$dir/device-api" > "$dir/device-api.txt" 2>&1
         echo "NCCL device API on weft: rc=$?"; cat "$dir/device-api.txt" ;;
    fifos) # The PortChannel proxy dealt over 4 FIFOs on 2 threads (WEFT_PROXY_FIFOS/THREADS) against
           # the default single FIFO: the EP and GIN self-tests (chaos between nodes included),
           # then EP between 2 virtual nodes, checked and timed, in each layout.
           for layout in "1 1" "4 2"; do
             read -r fifos threads <<< "$layout"
             tag="fifos$fifos-threads$threads"
             export WEFT_PROXY_FIFOS=$fifos WEFT_PROXY_THREADS=$threads
             timeout 300 "$weft" selftest --only ep --mode threads > "$dir/selftest-ep-$tag.txt" 2>&1
             echo "selftest ep, $tag: rc=$? $(grep -h 'passed,' "$dir/selftest-ep-$tag.txt" | tail -1)"
             timeout 300 "$weft" selftest --only gin --mode threads > "$dir/selftest-gin-$tag.txt" 2>&1
             echo "selftest gin, $tag: rc=$? $(grep -h 'passed,' "$dir/selftest-gin-$tag.txt" | tail -1)"
             timeout 300 "$weft" bench ep --nodes 2 --sms 24 --check > "$dir/bench-ep-nodes-$tag.txt" 2>&1
             echo "bench ep --nodes 2, $tag: rc=$?"; grep -E '^ +[0-9]+ ' "$dir/bench-ep-nodes-$tag.txt"
           done
           unset WEFT_PROXY_FIFOS WEFT_PROXY_THREADS ;;
    multinode) timeout 1800 "$weft" selftest --only multinode --mode threads > "$dir/selftest-multinode.txt" 2>&1
               echo "selftest multinode: rc=$? $(grep -h 'passed,' "$dir/selftest-multinode.txt" | tail -1)"
               grep -h -m10 -E '^(FAIL|SKIP)' "$dir/selftest-multinode.txt"
               # 2 nodes x 8 (16 ranks, beyond one node's 8) on bf16 and f32 only: its ranks
               # share the GPUs as threads, a long run.
               WEFT_SELFTEST_TYPES=bf16,f32 timeout 1200 "$weft" selftest --only multinode --mode threads --ranks 16 \
                 > "$dir/selftest-multinode-16.txt" 2>&1
               echo "selftest multinode at 16 ranks: rc=$? $(grep -h 'passed,' "$dir/selftest-multinode-16.txt" | tail -1)"
               grep -h -m10 -E '^(FAIL|SKIP)' "$dir/selftest-multinode-16.txt" ;;
    proxy) timeout 120 "$weft" bench fifo --threads 1,2,4,8 --pushes 1048576 --json "$dir/fifo.json" > "$dir/fifo.txt" 2>&1
           echo "fifo: rc=$?"; tail -6 "$dir/fifo.txt"
           for ch in memory port; do
             timeout 60 "$weft" bench p2p --channel "$ch" -b 1K -e 1G -f 4 --json "$dir/p2p-$ch.json" > "$dir/p2p-$ch.txt" 2>&1
             echo "p2p $ch: rc=$? $(tail -1 "$dir/p2p-$ch.txt")"
           done
           WEFT_RANKS_PER_NODE=1 WEFT_EMU_NET_LATENCY_US=5 WEFT_EMU_NET_GBPS=25 timeout 120 "$weft" selftest --mode processes \
             --only port > "$dir/port-paced.txt" 2>&1
           echo "port across virtual nodes (emulated NIC): rc=$? $(grep -h 'passed,' "$dir/port-paced.txt" | tail -1)"
           WEFT_RANKS_PER_NODE=1 timeout 120 "$weft" selftest --mode processes --only port > "$dir/port-tcp.txt" 2>&1
           echo "port across virtual nodes (TCP): rc=$? $(grep -h 'passed,' "$dir/port-tcp.txt" | tail -1)"
           # The verbs transport over the software fabric joins the ranks of one process: threads.
           WEFT_NET=soft-ib WEFT_RANKS_PER_NODE=1 timeout 120 "$weft" selftest --mode threads --only port,coll \
             > "$dir/port-soft-ib.txt" 2>&1
           echo "port and coll across virtual nodes (verbs, software fabric): rc=$? $(grep -h 'passed,' "$dir/port-soft-ib.txt" | tail -1)"
           # AllReduce across 2 virtual nodes: over TCP against NCCL on its socket transport, and
           # over the emulated NIC (alpha 5 us, beta 25 GB/s) next to the alpha-beta model.
           half=$(( $(nvidia-smi -L | wc -l) / 2 ))
           # (with virtual nodes, weft bench --nccl puts NCCL on its socket transport itself)
           WEFT_RANKS_PER_NODE=$half timeout 300 "$weft" bench allreduce \
             -b 1K -e 64M -f 4 --check --nccl --json "$dir/vnode-tcp.json" > "$dir/vnode-tcp.txt" 2>&1
           echo "allreduce, 2 virtual nodes over TCP vs NCCL socket: rc=$?"; tail -4 "$dir/vnode-tcp.txt"
           WEFT_RANKS_PER_NODE=$half WEFT_EMU_NET_LATENCY_US=5 WEFT_EMU_NET_GBPS=25 timeout 300 "$weft" bench allreduce \
             -b 1K -e 64M -f 4 --check --json "$dir/vnode-emu.json" > "$dir/vnode-emu.txt" 2>&1
           echo "allreduce, 2 virtual nodes over the emulated NIC: rc=$?"; grep -A12 'alpha-beta\|α-β' "$dir/vnode-emu.txt" ;;
    exec) for pair in allreduce:plan:ring_allreduce:ring allgather:plan:ring_allgather:hb; do
            IFS=: read -r c _ plan native <<< "$pair"
            var="WEFT_ALGO_$(echo "$c" | tr a-z A-Z)"
            env "$var=plan:$plan" timeout 120 "$weft" bench "$c" -b 1K -e 256M -f 4 --graph --check --versus "$native" \
              > "$dir/versus-$c.txt" 2>&1
            echo "plan:$plan against $native: rc=$?"; grep -A12 '^# against' "$dir/versus-$c.txt"
          done ;;
    e2e) install_wheel e2e "$dir" || continue
         WEFT_NCCL="${WEFT_NCCL:-$PWD/target/nccl/libnccl.so.2}" OUT="$dir" bench/e2e/run.sh ;;
    conformance)
      # weft's libnccl.so.2 against the real NCCL, call by call (scripts/nccl-conformance/). By
      # default the set that fits a few minutes on a 2-GPU machine (what docs/perf/nccl-api.md
      # records): every layout, eager and graph, windows in the one-thread graph run, the reducing
      # collectives over seven types and every operator, the others over three types. With
      # CONFORMANCE=full: every layout x mode x windows over the whole matrix (hours). weft
      # compiles a kernel per (type, operator) on first use, so the self-test's CPU part runs
      # first to fill the kernel cache on every core. Each run ends with `N passed, M failed`.
      if ! bin="$(scripts/nccl-conformance/build.sh "$dir/bin" 2> "$dir/build.txt")"; then
        echo "conformance: build failed"; tail -5 "$dir/build.txt"; continue
      fi
      lib="${WEFT_NCCL:-$PWD/target/nccl/libnccl.so.2}"
      real="${REAL_NCCL:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2}"
      # CONFORMANCE_FILL=0 skips the fill (the caller has just run the self-test or the warm step).
      if [ "${CONFORMANCE_FILL:-1}" != 0 ]; then
        timeout 300 "$weft" selftest --only coll --mode threads > "$dir/selftest-coll.txt" 2>&1
        echo "selftest coll (fills the kernel cache): rc=$? $(grep -h 'passed,' "$dir/selftest-coll.txt" | tail -1)"
      fi
      red="--colls AllReduce,ReduceScatter,Reduce --types int8,uint8,int32,uint64,half,float,bfloat16"
      runs=(
        "threads-eager-red:120:--layout threads --quick $red"
        "threads-eager-move:60:--layout threads --quick --colls AllGather,Broadcast,AlltoAll,Gather,Scatter,SendRecv --types int8,float,bfloat16 --ops sum"
        "processes-graph:120:--layout processes --mode graph --quick --colls AllReduce,AllGather,ReduceScatter,AlltoAll,SendRecv --types int8,float,bfloat16 --ops sum,prod,avg,premulsum"
        "single-graph:90:--layout single --mode graph --quick --colls AllReduce,AllGather --types float,bfloat16 --ops sum"
        "single-graph-windows:90:--layout single --mode graph --windows --quick --colls AllReduce,AllGather,ReduceScatter --types int8,float,bfloat16 --ops sum,avg,premulsum"
        "single-all-eager:60:--layout single --init all --quick --colls AllReduce,AllGather,AlltoAll,SendRecv --types int32,bfloat16 --ops sum,premulsum"
        # One thread driving every rank with the host-side call check on (its exchange must not
        # wait on a rank the same thread has yet to issue).
        "single-eager-checked:90:--layout single --quick --colls AllReduce,Broadcast,AlltoAll --types int8,float --ops sum:WEFT_CHECK_CALLS=1"
      )
      if [ "${CONFORMANCE:-}" = full ]; then
        runs=()
        for layout in processes threads single single-all; do
          for mode in eager graph; do
            for win in "" --windows; do
              init=group; l=$layout; [ "$layout" = single-all ] && { l=single; init=all; }
              runs+=("$layout-$mode${win:+-windows}:7200:--layout $l --init $init --mode $mode $win")
            done
          done
        done
      fi
      for run in "${runs[@]}"; do
        IFS=: read -r name limit args vars <<< "$run"
        # CONFORMANCE_RUNS (a comma list of the names above) runs only those.
        [[ -n "${CONFORMANCE_RUNS:-}" && ",$CONFORMANCE_RUNS," != *",$name,"* ]] && continue
        # shellcheck disable=SC2086 # args is a list of options, vars of NAME=value words
        env $vars timeout "$limit" "$bin/conformance" --weft "$lib" --nccl "$real" --total-timeout $((limit - 5)) $args \
          > "$dir/$name.txt" 2>&1
        echo "conformance $name: rc=$? $(grep -h 'passed,' "$dir/$name.txt" | tail -1)"
        grep -m3 -E '^(FAIL|HANG)' "$dir/$name.txt"
      done ;;
    faults) lib="${WEFT_NCCL:-$PWD/target/nccl/libnccl.so.2}"
            # A rank killed mid all-reduce (eager and graph) over NVLink, over the proxy and the
            # TCP transport (a virtual node per rank), and over the emulated NIC.
            for path in "nvlink:" "proxy-tcp:WEFT_RANKS_PER_NODE=1" \
                        "emulated-nic:WEFT_RANKS_PER_NODE=1 WEFT_EMU_NET_LATENCY_US=5"; do
              name="${path%%:*}"
              # shellcheck disable=SC2086 # the path's variables, one word each
              env WEFT_TIMEOUT=2 ${path#*:} timeout 600 "${PYTHON:-python3}" scripts/nccl-fault-test.py "$lib" \
                > "$dir/$name.txt" 2>&1
              echo "faults $name: rc=$? $(grep -h 'passed,' "$dir/$name.txt" | tail -1)"
              grep -m3 '^FAIL' "$dir/$name.txt"
            done ;;
    soak) minutes="${SOAK_MINUTES:-3}"
          # The soak's own bound (its minutes, then 10 for set-up and the last call) sits inside this one.
          limit=$((minutes * 60 + 900))
          timeout "$limit" "$weft" soak --minutes "$minutes" --mode processes > "$dir/soak-processes.txt" 2>&1
          echo "soak, a process per GPU, $minutes min: rc=$? $(grep -hE '^soak: [0-9]+ calls' "$dir/soak-processes.txt" | tail -1)"
          grep -h -m5 '^FAIL' "$dir/soak-processes.txt"
          timeout "$limit" "$weft" soak --minutes "$minutes" --gpus 1 --ranks 2 --mode threads > "$dir/soak-shared.txt" 2>&1
          echo "soak, 2 ranks sharing one GPU, $minutes min: rc=$? $(grep -hE '^soak: [0-9]+ calls' "$dir/soak-shared.txt" | tail -1)"
          grep -h -m5 '^FAIL' "$dir/soak-shared.txt" ;;
    sanitize) WEFT="$weft" scripts/sanitize.sh "$dir" 2>&1 | tee "$dir/sanitize.txt" | grep -E '^sanitize|^=========|FAIL'
              echo "sanitize: rc=${PIPESTATUS[0]}" ;;
    *) echo "unknown step $step (warm, selftest, check, perf, tune, torch, python, ep, gin, multinode, proxy, exec, e2e, conformance, faults, versus, soak, sanitize)"; exit 2 ;;
  esac
done
