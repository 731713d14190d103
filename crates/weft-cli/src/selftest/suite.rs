//! The GPU suite one rank runs: every pair of ranks exercises semaphores, HB put/get, LL8/LL16
//! round trips (eager and CUDA graph) and a deliberate timeout; every rank checks the reduction
//! helpers and runs the collective matrix. Ranks iterate pairs in the same order and meet at barriers between steps, so the
//! same code serves one process per GPU and one process driving every GPU from threads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_bootstrap::Bootstrap;
use weft_core::selftest_kernels::{LL_BLOCKS, LlProtocol, PutEngine, SelftestKernels, SelftestRunner};
use weft_core::{Communicator, Env, Error, KernelLibrary, MemoryChannel, MemoryChannelConfig, RegisteredMemory};
use weft_gpu::{AllocKind, Device, DeviceMemory, Stream};

use super::Step;
use super::report::RankReport;
use super::{collectives, reduce_check};
use crate::harness::pattern::pattern_bytes;

/// Largest put/get tested: 256 MiB.
const MAX_TRANSFER: u64 = 256 << 20;
/// One region of the data buffer: the largest transfer plus room for offsets and guards.
const REGION: u64 = MAX_TRANSFER + 64;
/// Bytes checked on each side of a destination to prove nothing outside it was written.
const GUARD: u64 = 16;
const POISON: u8 = 0xA5;
/// Packet buffer per peer: two halves of 512 KiB.
const PACKET_BYTES: usize = 1 << 20;
/// Bound of the deliberate timeout.
const SHORT_TIMEOUT: Duration = Duration::from_millis(200);
const PINGPONG_ITERS: u32 = 10_000;
const LL_LAUNCHES: u32 = 1000;
const LL_GRAPH_LAUNCHES: u32 = 16;
const LL_GRAPH_REPLAYS: u32 = 3;

struct PeerState {
    main: MemoryChannel,
    timeout: MemoryChannel,
    flags: DeviceMemory,
    /// LL launches executed on `main` so far: the flag of the last one.
    ll_launches: u32,
}

/// Runs the whole suite for one rank and returns what it saw. Never panics on GPU or peer
/// failures: they become failed outcomes.
pub(crate) fn run_rank(
    bootstrap: Arc<dyn Bootstrap>,
    ordinal: usize,
    env: &Env,
    label: &str,
    steps: &[Step],
) -> RankReport {
    let mut report = RankReport::default();
    let rank = bootstrap.rank();
    if let Err(e) = run(bootstrap, ordinal, env, label, steps, &mut report) {
        report.record(format!("{label}rank {rank} ran to the end"), Err(e));
    }
    report
}

fn run(
    bootstrap: Arc<dyn Bootstrap>,
    ordinal: usize,
    env: &Env,
    label: &str,
    steps: &[Step],
    report: &mut RankReport,
) -> Result<(), Error> {
    let rank = bootstrap.rank();
    let gpu = |source| Error::Gpu { rank, source };
    let device = Device::new(ordinal).map_err(gpu)?;
    let library = KernelLibrary::new(env.cache_dir.clone(), &weft_core::device_code::TEST_KERNELS);
    let loaded = library.load(&device, "selftest.cu").map_err(gpu)?;
    report.metric(
        format!("kernel load ({})", if loaded.from_cache { "from cache" } else { "compiled" }),
        loaded.elapsed.as_secs_f64() * 1e3,
        "ms",
    );
    let kernels = SelftestKernels::new(&loaded.module).map_err(gpu)?;
    let comm = Communicator::new(bootstrap, device.clone(), env.clone())?;
    let stream = Stream::new(&device).map_err(gpu)?;
    let runner = SelftestRunner::new(&kernels, &comm, &stream, env.device_timeout + Duration::from_secs(60));

    if steps.contains(&Step::Reduce) {
        reduce_check::run(&runner, label, report);
    }

    let data = comm.register(comm.alloc(2 * REGION as usize)?)?;
    // The pair steps run over memory channels, which need peer mappings: only within a
    // (virtual) node. The port step reaches every peer through its proxy.
    let topology = comm.topology();
    let mappable = |a: usize, b: usize| topology.node(a).is_some() && topology.node(a) == topology.node(b);
    let mut peers = BTreeMap::new();
    for peer in (0..comm.world_size()).filter(|&p| p != rank && mappable(rank, p)) {
        let packets = comm.alloc(PACKET_BYTES)?;
        packets.fill(0, PACKET_BYTES, 0).map_err(gpu)?;
        let packets = comm.register(packets)?;
        let main = comm.memory_channel(peer, &data, Some(&packets), MemoryChannelConfig::default())?;
        let timeout = comm.memory_channel(peer, &data, None, MemoryChannelConfig { timeout: Some(SHORT_TIMEOUT) })?;
        let flags = DeviceMemory::alloc(&device, 4 * LL_BLOCKS as usize, AllocKind::Legacy).map_err(gpu)?;
        flags.fill(0, flags.len(), 0).map_err(gpu)?;
        peers.insert(peer, PeerState { main, timeout, flags, ll_launches: 0 });
    }
    comm.barrier()?;
    let world = comm.world_size();
    for (step, family) in [(Step::Coll, collectives::Family::Native), (Step::Plan, collectives::Family::Plans)] {
        if steps.contains(&step) {
            collectives::run(&comm, env, label, family, report);
            comm.barrier()?;
        }
    }
    // Uneven all-to-allv and send/receive groups with peer subsets, across the LL limit.
    if steps.contains(&Step::Coll) && !comm.topology().spans_nodes() {
        super::direct::run(&comm, env, label, report);
        comm.barrier()?;
    }
    if steps.contains(&Step::Coll) {
        super::mismatch::run(&comm, env, label, report);
        comm.barrier()?;
    }
    let mut pair = Pair { comm: &comm, runner: &runner, data: &data, label, steps, report };
    for a in 0..world {
        for b in (a + 1..world).filter(|&b| mappable(a, b)) {
            pair.run(a, b, &mut peers)?;
        }
    }
    comm.barrier()?;
    if steps.contains(&Step::Port) {
        super::port::run(&comm, &library, label, report)?;
    }
    if steps.contains(&Step::Tcp) {
        super::tcp::run(&comm, &library, label, report);
    }
    if steps.contains(&Step::Ep) {
        super::ep::run(&comm, env, label, report);
    }
    if steps.contains(&Step::Gin) {
        super::gin::run(&comm, label, report);
    }
    if steps.contains(&Step::Multinode) {
        super::multinode::run(&comm, env, label, report);
    }
    comm.barrier()
}

struct Pair<'a> {
    comm: &'a Communicator,
    runner: &'a SelftestRunner<'a>,
    data: &'a RegisteredMemory,
    label: &'a str,
    steps: &'a [Step],
    report: &'a mut RankReport,
}

/// Blocks for a transfer of `bytes`: one per 64 KiB, at most 264 (2 per SM on H100/H200).
fn grid_for(bytes: u64) -> u32 {
    bytes.div_ceil(64 << 10).clamp(1, 264) as u32
}

fn sizes_and_offsets() -> Vec<(u64, u64, u64)> {
    let small = [4u64, 5, 13, 1000, 4099, 65536, (1 << 20) + 7, (16 << 20) + 1];
    let offsets = [(0u64, 0u64), (3, 5), (8, 0), (1, 1)];
    let mut cases: Vec<(u64, u64, u64)> =
        small.iter().flat_map(|&n| offsets.iter().map(move |&(s, d)| (n, s, d))).collect();
    for n in [(64u64 << 20) + 3, MAX_TRANSFER] {
        cases.push((n, 0, 0));
        cases.push((n, 3, 5));
    }
    cases
}

/// The bulk (TMA) put's cases: whole 16-byte vectors between 16-byte offsets, from one vector to
/// the largest transfer, a share per block that is not a whole piece among them.
fn bulk_sizes_and_offsets() -> Vec<(u64, u64, u64)> {
    vec![
        (16, 0, 0),
        (4096, 16, 48),
        (65536, 0, 0),
        ((1 << 20) + 112, 48, 16),
        ((16 << 20) + 16, 0, 0),
        (MAX_TRANSFER, 0, 0),
    ]
}

impl Pair<'_> {
    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn seed(&self) -> Result<u32, Error> {
        let mine = rand::random::<u32>().to_le_bytes();
        let root = self
            .comm
            .bootstrap()
            .broadcast(0, Some(&mine))
            .map_err(|source| Error::Bootstrap { rank: self.rank(), source })?;
        let mut word = [0u8; 4];
        word.copy_from_slice(root.get(..4).unwrap_or(&[0; 4]));
        Ok(u32::from_le_bytes(word))
    }

    fn run(&mut self, a: usize, b: usize, peers: &mut BTreeMap<usize, PeerState>) -> Result<(), Error> {
        let seed = self.seed()?;
        let steps = self.steps;
        if steps.contains(&Step::Semaphore) {
            self.semaphore(a, b, peers)?;
        }
        if steps.contains(&Step::Hb) {
            self.hb(a, b, peers, seed)?;
        }
        if steps.contains(&Step::Bandwidth) {
            self.bandwidth(a, b, peers)?;
        }
        if steps.contains(&Step::Ll) {
            self.ll_step(a, b, peers)?;
        }
        if steps.contains(&Step::Timeout) {
            self.timeout(a, b, peers)?;
        }
        Ok(())
    }

    /// The other rank of pair (a, b) when this rank is in it.
    fn partner(&self, a: usize, b: usize) -> Option<usize> {
        let rank = self.rank();
        if rank == a {
            Some(b)
        } else if rank == b {
            Some(a)
        } else {
            None
        }
    }

    /// Semaphore ping-pong, release/acquire and relaxed, with the one-way latency.
    fn semaphore(&mut self, a: usize, b: usize, peers: &BTreeMap<usize, PeerState>) -> Result<(), Error> {
        self.comm.barrier()?;
        let Some(other) = self.partner(a, b) else { return Ok(()) };
        let ch = &peers[&other].main;
        for (relaxed, kind) in [(false, "release/acquire"), (true, "relaxed")] {
            let result = self.runner.pingpong(ch, PINGPONG_ITERS, self.rank() == a, relaxed);
            if let Ok(Some(ns)) = result {
                let one_way_us = ns as f64 / (2.0 * f64::from(PINGPONG_ITERS)) / 1e3;
                self.report.metric(format!("semaphore one-way latency {a}<->{b} ({kind})"), one_way_us, "us");
            }
            self.report.record(format!("{}semaphore ping-pong {a}<->{b} ({kind})", self.label), result.map(|_| ()));
        }
        Ok(())
    }

    /// HB put a->b, get b<-a and put b->a at every size and offset.
    fn hb(&mut self, a: usize, b: usize, peers: &BTreeMap<usize, PeerState>, seed: u32) -> Result<(), Error> {
        for (op, sender, receiver) in [("put", a, b), ("get", b, a), ("put", b, a), ("bulk put", a, b)] {
            let mut failures = Vec::new();
            let cases = if op == "bulk put" { bulk_sizes_and_offsets() } else { sizes_and_offsets() };
            for (case, &(bytes, src_off, dst_off)) in cases.iter().enumerate() {
                let case_seed = seed ^ (case as u32).wrapping_mul(0x9E37_79B1) ^ u32::from(op == "get");
                if let Err(e) = self.transfer(op, sender, receiver, peers, case_seed, bytes, src_off, dst_off) {
                    failures.push(format!("{bytes} B (src+{src_off}, dst+{dst_off}): {e}"));
                }
            }
            if self.partner(a, b).is_some() {
                let name = if op == "bulk put" {
                    format!("{}HB {op} (TMA) {sender}->{receiver}: 16 B .. 256 MiB, 16-byte multiples", self.label)
                } else {
                    format!("{}HB {op} {sender}->{receiver}: 4 B .. 256 MiB, odd sizes, unaligned offsets", self.label)
                };
                self.report.record(name, if failures.is_empty() { Ok(()) } else { Err(failures.join("; ")) });
            }
        }
        Ok(())
    }

    /// Put bandwidth a->b at 64 and 256 MiB, best of three grid sizes.
    fn bandwidth(&mut self, a: usize, b: usize, peers: &BTreeMap<usize, PeerState>) -> Result<(), Error> {
        self.comm.barrier()?;
        if self.rank() != a {
            return Ok(());
        }
        let ch = &peers[&b].main;
        for bytes in [64u64 << 20, MAX_TRANSFER] {
            let mut best = 0f64;
            let mut result = Ok(());
            for grid in [132u32, 264, 528] {
                match self.runner.put_timed(PutEngine::Sm, ch, bytes, grid, 10) {
                    Ok(seconds) => best = best.max(bytes as f64 / seconds / 1e9),
                    Err(e) => result = Err(e),
                }
            }
            self.report.metric(format!("put bandwidth {a}->{b} {} MiB", bytes >> 20), best, "GB/s");
            self.report.record(format!("{}put bandwidth run {a}->{b} {} MiB", self.label, bytes >> 20), result);
        }
        Ok(())
    }

    /// LL8 / LL16 round trips, eager and in CUDA graphs.
    fn ll_step(&mut self, a: usize, b: usize, peers: &mut BTreeMap<usize, PeerState>) -> Result<(), Error> {
        for protocol in [LlProtocol::Ll8, LlProtocol::Ll16] {
            for bytes in [13u64, 4096, 65541] {
                self.comm.barrier()?;
                let Some(other) = self.partner(a, b) else { continue };
                let rank = self.rank();
                let state =
                    peers.get_mut(&other).ok_or_else(|| Error::InvalidArgument { rank, detail: "peer".into() })?;
                let name = format!(
                    "{}{protocol:?} round trips {a}<->{b} {bytes} B: {LL_LAUNCHES} launches + {LL_GRAPH_REPLAYS} graph replays",
                    self.label
                );
                let result = self.ll(state, protocol, bytes);
                self.report.record(name, result);
            }
        }
        Ok(())
    }

    /// Deliberate timeout: a waits for a signal b never sends.
    fn timeout(&mut self, a: usize, b: usize, peers: &BTreeMap<usize, PeerState>) -> Result<(), Error> {
        self.comm.barrier()?;
        if self.rank() != a {
            return Ok(());
        }
        let started = Instant::now();
        let result = self.runner.wait(&peers[&b].timeout, 1);
        let elapsed = started.elapsed();
        let verdict = match result {
            Err(Error::PeerTimeout(f)) if f.peer == b as i32 && f.rank == a as i32 => {
                let message = Error::PeerTimeout(f).to_string();
                if !message.contains(&format!("peer {b}")) {
                    Err(format!("message does not name peer {b}: {message}"))
                } else if elapsed > SHORT_TIMEOUT + Duration::from_secs(3) {
                    Err(format!("took {elapsed:?} for a {SHORT_TIMEOUT:?} bound"))
                } else {
                    self.report.metric(
                        format!("timeout detected {a} waiting on {b}"),
                        elapsed.as_secs_f64() * 1e3,
                        "ms",
                    );
                    Ok(())
                }
            }
            Err(other) => Err(format!("wrong error: {other}")),
            Ok(()) => Err("the wait succeeded without a signal".into()),
        };
        self.comm.clear_device_failure()?;
        self.report
            .record(format!("{}deliberate timeout: {a} reports that peer {b} never signalled", self.label), verdict);
        Ok(())
    }

    /// One HB transfer case. Every rank calls it (barriers); only sender and receiver act.
    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &mut self,
        op: &str,
        sender: usize,
        receiver: usize,
        peers: &BTreeMap<usize, PeerState>,
        seed: u32,
        bytes: u64,
        src_off: u64,
        dst_off: u64,
    ) -> Result<(), String> {
        let rank = self.rank();
        let gpu = |e: weft_gpu::GpuError| e.to_string();
        let memory = self.data.memory();
        let window_start = REGION + dst_off - GUARD;
        let window_len = (bytes + 2 * GUARD) as usize;
        if rank == sender {
            memory.write(src_off as usize, &pattern_bytes(seed, sender as u32, 0, bytes as usize)).map_err(gpu)?;
        }
        if rank == receiver {
            memory.fill(window_start as usize, window_len, POISON).map_err(gpu)?;
        }
        self.comm.barrier().map_err(|e| e.to_string())?;
        let grid = grid_for(bytes);
        let acted = match (op, rank) {
            ("put" | "bulk put", r) if r == sender => {
                let engine = if op == "put" { PutEngine::Sm } else { PutEngine::Bulk };
                self.runner.put(engine, &peers[&receiver].main, REGION + dst_off, src_off, bytes, grid, true)
            }
            ("put" | "bulk put", r) if r == receiver => self.runner.wait(&peers[&sender].main, grid),
            ("get", r) if r == receiver => {
                self.runner.get(&peers[&sender].main, src_off, REGION + dst_off, bytes, grid)
            }
            _ => Ok(()),
        };
        let checked = if rank == receiver && acted.is_ok() {
            let mut window = vec![0u8; window_len];
            memory.read(window_start as usize, &mut window).map_err(gpu)?;
            check_window(&window, &pattern_bytes(seed, sender as u32, 0, bytes as usize))
        } else {
            Ok(())
        };
        self.comm.barrier().map_err(|e| e.to_string())?;
        acted.map_err(|e| e.to_string())?;
        checked
    }

    fn ll(&mut self, state: &mut PeerState, protocol: LlProtocol, bytes: u64) -> Result<(), String> {
        let memory = self.data.memory();
        let peer = state.main.peer() as u32;
        for (launches, replays) in [(LL_LAUNCHES, 0), (LL_GRAPH_LAUNCHES, LL_GRAPH_REPLAYS)] {
            memory.fill(bytes as usize, bytes as usize, POISON).map_err(|e| e.to_string())?;
            let errors = self
                .runner
                .ll_round_trips(&state.main, &state.flags, protocol, bytes, launches, replays)
                .map_err(|e| e.to_string())?;
            state.ll_launches += launches * (1 + replays);
            if errors != 0 {
                return Err(format!("kernels counted {errors} wrong bytes"));
            }
            let mut got = vec![0u8; bytes as usize];
            memory.read(bytes as usize, &mut got).map_err(|e| e.to_string())?;
            let want = pattern_bytes(state.ll_launches, peer, 0, bytes as usize);
            if let Some(i) = got.iter().zip(&want).position(|(g, w)| g != w) {
                return Err(format!(
                    "after launch {}: byte {i} is {:#04x}, expected {:#04x}",
                    state.ll_launches, got[i], want[i]
                ));
            }
        }
        Ok(())
    }
}

/// Checks `window` = guard | data | guard: the data equals `want`, the guards still hold poison.
fn check_window(window: &[u8], want: &[u8]) -> Result<(), String> {
    let guard = GUARD as usize;
    let (head, rest) = window.split_at(guard);
    let (data, tail) = rest.split_at(want.len());
    if let Some(i) = head.iter().chain(tail).position(|&b| b != POISON) {
        return Err(format!("wrote outside the destination (guard byte {i})"));
    }
    let wrong = data.iter().zip(want).filter(|(g, w)| g != w).count();
    if wrong > 0 {
        let first = data.iter().zip(want).position(|(g, w)| g != w).unwrap_or(0);
        return Err(format!("{wrong} of {} bytes wrong, first at {first}", want.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_catch_wrong_data_and_stray_writes() {
        let want = vec![1u8, 2, 3];
        let mut w = vec![POISON; 2 * GUARD as usize + 3];
        w[GUARD as usize..GUARD as usize + 3].copy_from_slice(&want);
        assert!(check_window(&w, &want).is_ok());
        let mut bad = w.clone();
        bad[GUARD as usize + 1] = 9;
        assert!(check_window(&bad, &want).unwrap_err().contains("1 of 3"));
        let mut stray = w.clone();
        stray[0] = 0;
        assert!(check_window(&stray, &want).unwrap_err().contains("outside"));
    }

    #[test]
    fn cases_cover_odd_sizes_offsets_and_the_largest_transfer() {
        let cases = sizes_and_offsets();
        assert!(cases.iter().any(|c| c.0 == 4) && cases.iter().any(|c| c.0 == MAX_TRANSFER));
        assert!(cases.iter().any(|c| c.0 % 2 == 1 && c.1 % 16 != 0 && c.2 % 16 != 0));
        assert!(cases.iter().all(|c| c.0 + c.1.max(c.2) + GUARD <= REGION));
    }
}
