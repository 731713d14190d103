//! `weft bench fifo` and `weft bench p2p --channel memory|port`: the proxy layer's benchmarks.
//!
//! - **fifo**, on every GPU at once: `p` pushing GPU threads (lane 0 of `p` warps by default,
//!   every lane with `--lanes 32`) push FIFO commands of a bench op into `t` FIFOs served by `t`
//!   proxy threads, for each `t` of `--threads` and `p` of `--pushers`. The op's handler moves no
//!   data but checks every command (pusher, sequence, check word): a lost, repeated, reordered or
//!   torn command fails the run. The kernel ends once the proxy consumed every command, and the
//!   rate is pushes / kernel time (CUDA events around the launch). Then one thread pushes a
//!   command and spins until the proxy popped it, many times: the push→pop **round trip** as the
//!   GPU sees it, and one thread times reads of host memory across PCIe. Push→proxy-visible
//!   latency is estimated as the round trip minus one read: after the proxy's tail store, the
//!   read that sees it arrives on average half a read later and takes half a read to return.
//! - **p2p**, rank 0 → rank 1: `memory` times the MemoryChannel put kernel of the self-test
//!   (SM copies over peer mappings, best of three grid sizes); `port` times a kernel that pushes
//!   put-with-signal commands and a flush through a PortChannel (copy engine), the receiver
//!   waiting for the signals. Time per put and GB/s = bytes / time.
//!
//! The numbers of the targets are printed next to the results: ≥ 20 M pushes/s per GPU,
//! ≤ 2 µs push→proxy latency, ≥ 350 GB/s PortChannel put at ≥ 64 MB.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::harness::sweep::{format_size, sizes_between};
use crate::harness::workers::{run_workers, worker_main};

mod worker;

/// Target of `weft bench fifo`: pushes per second per GPU.
pub const TARGET_PUSHES_PER_S: f64 = 20e6;
/// Target of `weft bench fifo`: push→proxy-visible latency, µs.
pub const TARGET_LATENCY_US: f64 = 2.0;
/// Target of `weft bench p2p --channel port`: GB/s ...
pub const TARGET_PORT_GBPS: f64 = 350.0;
/// ... at messages of at least this many bytes.
pub const TARGET_PORT_MIN_BYTES: usize = 64 << 20;

/// Default pushes per GPU and run of `weft bench fifo`.
pub const DEFAULT_PUSHES: u64 = 1 << 20;
/// Default pushing GPU threads of `weft bench fifo`: one warp, one per SM, 8 and 32 warps per SM
/// of a 132-SM H100 / H200.
pub const DEFAULT_PUSHERS: [u32; 4] = [1, 132, 1056, 4224];
/// Round trips of the latency measurement.
const LATENCY_ROUNDS: u32 = 10_000;
/// Warps per block of the push kernel.
const PUSH_BLOCK_WARPS: u32 = 8;
/// The most proxy threads (= FIFOs) per GPU (`WEFT_BENCH_MAX_FIFOS` of port.cu).
const MAX_THREADS: usize = 64;
/// The most pushing threads per GPU.
const MAX_PUSHERS: u32 = 1 << 20;

const WORKER_OPTIONS: &str = "WEFT_BENCH_PROXY_OPTIONS";

/// How `weft bench p2p` moves data.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    /// MemoryChannel put: SM copies over the peer mapping.
    Memory,
    /// MemoryChannel put through the TMA: bulk copies via shared memory (`cp.async.bulk`).
    Bulk,
    /// PortChannel put-with-signal: the proxy drives the copy engine.
    Port,
}

impl ChannelKind {
    /// Parses `memory`, `bulk` or `port`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "memory" => Ok(Self::Memory),
            "bulk" => Ok(Self::Bulk),
            "port" => Ok(Self::Port),
            _ => Err(format!("--channel {s:?}: memory, bulk or port")),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Bulk => "bulk",
            Self::Port => "port",
        }
    }
}

/// Options of `weft bench fifo`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FifoOptions {
    /// Proxy thread counts to measure; each thread serves one FIFO of its own.
    pub threads: Vec<usize>,
    /// Pushing GPU thread counts to measure.
    pub pushers: Vec<u32>,
    /// Pushing lanes per warp (1 or 32).
    pub lanes: u32,
    /// Pushes per GPU and timed run (rounded up to a multiple of the pushers).
    pub pushes: u64,
    /// Round trips of the latency measurement.
    pub rounds: u32,
    /// Slots per FIFO.
    pub depth: usize,
    /// GPUs, each measured with its own proxy, all at once.
    pub gpus: usize,
}

/// The launch of the push kernel for a number of pushers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PushGrid {
    /// Blocks.
    pub blocks: u32,
    /// Threads per block.
    pub block_threads: u32,
}

impl FifoOptions {
    /// Checks the CLI's values (`None`: the defaults).
    pub fn new(
        threads: &[usize],
        pushers: Option<&[u32]>,
        lanes: u32,
        pushes: Option<u64>,
        gpus: usize,
    ) -> Result<Self, String> {
        if threads.is_empty() || threads.iter().any(|&t| t == 0 || t > MAX_THREADS) {
            return Err(format!("--threads: one or more counts from 1 to {MAX_THREADS}, not {threads:?}"));
        }
        let pushers = pushers.map_or_else(|| DEFAULT_PUSHERS.to_vec(), <[u32]>::to_vec);
        if pushers.is_empty() || pushers.iter().any(|&p| p == 0 || p > MAX_PUSHERS) {
            return Err(format!("--pushers: one or more counts from 1 to {MAX_PUSHERS}, not {pushers:?}"));
        }
        if lanes != 1 && lanes != 32 {
            return Err(format!("--lanes {lanes}: 1 (lane 0 of each warp pushes) or 32 (every lane)"));
        }
        let pushes = pushes.unwrap_or(DEFAULT_PUSHES);
        if pushes == 0 {
            return Err("--pushes must be positive".into());
        }
        Ok(Self {
            threads: threads.to_vec(),
            pushers,
            lanes,
            pushes,
            rounds: LATENCY_ROUNDS,
            depth: weft_net::PortProxyConfig::default().fifo_depth,
            gpus,
        })
    }

    /// Pushes per pusher, so that every pusher pushes the same number and the total is at least
    /// `pushes`.
    pub fn per_pusher(&self, pushers: u32) -> u32 {
        u32::try_from(self.pushes.div_ceil(u64::from(pushers.max(1)))).unwrap_or(u32::MAX)
    }

    /// Pushes of one timed run with `pushers` (what [`Self::per_pusher`] adds up to).
    pub fn pushes_per_run(&self, pushers: u32) -> u64 {
        u64::from(self.per_pusher(pushers)) * u64::from(pushers)
    }

    /// The push kernel's launch for `pushers`: warps of `lanes` pushing lanes, up to
    /// [`PUSH_BLOCK_WARPS`] warps per block.
    pub fn grid(&self, pushers: u32) -> PushGrid {
        let warps = pushers.div_ceil(self.lanes);
        let block_warps = warps.min(PUSH_BLOCK_WARPS);
        PushGrid { blocks: warps.div_ceil(block_warps), block_threads: 32 * block_warps }
    }
}

/// Options of `weft bench p2p`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct P2pOptions {
    /// How the data moves.
    pub channel: ChannelKind,
    /// Smallest message.
    pub min_bytes: usize,
    /// Largest message.
    pub max_bytes: usize,
    /// Size multiplier.
    pub factor: usize,
}

impl P2pOptions {
    /// Checks the CLI's values (`channel` is required).
    pub fn new(channel: Option<&str>, min_bytes: usize, max_bytes: usize, factor: usize) -> Result<Self, String> {
        let channel = ChannelKind::parse(channel.ok_or("weft bench p2p needs --channel memory|port")?)?;
        if min_bytes == 0 || min_bytes > max_bytes {
            return Err(format!("sizes {min_bytes}..{max_bytes}: need 1 <= -b <= -e"));
        }
        // FIFO commands carry 32-bit sizes, and a PortChannel memory is at most 4 GiB.
        if channel == ChannelKind::Port && u32::try_from(max_bytes).is_err() {
            return Err(format!("-e {max_bytes}: a PortChannel put is below 4 GiB"));
        }
        Ok(Self { channel, min_bytes, max_bytes, factor })
    }

    /// The message sizes.
    pub fn sizes(&self) -> Vec<usize> {
        sizes_between(self.min_bytes, self.max_bytes, self.factor)
    }
}

/// Which benchmark, with its options (what the launcher hands its workers).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "bench", rename_all = "lowercase")]
pub enum ProxyBench {
    /// `weft bench fifo`.
    Fifo(FifoOptions),
    /// `weft bench p2p`.
    P2p(P2pOptions),
}

/// One timed configuration of `weft bench fifo` on one GPU.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FifoRow {
    /// Proxy threads (= FIFOs).
    pub threads: usize,
    /// Pushing GPU threads.
    pub pushers: u32,
    /// Pushes timed (all runs).
    pub pushes: u64,
    /// Seconds they took.
    pub seconds: f64,
}

impl FifoRow {
    /// Pushes per second.
    pub fn rate(&self) -> f64 {
        rate(self.pushes, self.seconds)
    }
}

/// What one GPU measured in `weft bench fifo`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FifoReport {
    /// One row per (thread count, pusher count).
    pub rows: Vec<FifoRow>,
    /// Mean push→pop round trip, µs.
    pub round_trip_us: f64,
    /// Mean latency of one GPU read of host-pinned memory, µs.
    pub host_read_us: f64,
}

/// One message size of `weft bench p2p` (rank 0's measurement).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct P2pRow {
    /// Message bytes.
    pub bytes: usize,
    /// Microseconds per put.
    pub us: f64,
    /// `port`: microseconds of one put alone (the median of a few kernels of one put and its
    /// flush): the latency a step of an algorithm pays, where `us` is a stream's time per put.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
}

impl P2pRow {
    /// GB/s (bytes / time).
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / self.us / 1e3
    }
}

/// A worker's report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum RankReport {
    /// `weft bench fifo`.
    Fifo(FifoReport),
    /// `weft bench p2p` (rank 1 reports no rows).
    P2p(Vec<P2pRow>),
}

/// `count` per `seconds` (0 when no time passed).
pub fn rate(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 { count as f64 / seconds } else { 0.0 }
}

/// One configuration over every GPU: the slowest and the fastest GPU.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FifoLine {
    /// Proxy threads (= FIFOs) per GPU.
    pub threads: usize,
    /// Pushing GPU threads per GPU.
    pub pushers: u32,
    /// Pushes timed per GPU.
    pub pushes: u64,
    /// Pushes per second of the slowest GPU.
    pub min_rate: f64,
    /// Pushes per second of the fastest GPU.
    pub max_rate: f64,
    /// Whether the slowest GPU reaches [`TARGET_PUSHES_PER_S`].
    pub meets_target: bool,
}

/// The lines of every GPU's reports (rows in the same order on every GPU).
pub fn fifo_lines(reports: &[FifoReport]) -> Vec<FifoLine> {
    let Some(first) = reports.first() else { return Vec::new() };
    first
        .rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let rates: Vec<f64> = reports.iter().filter_map(|r| r.rows.get(i)).map(FifoRow::rate).collect();
            let min_rate = rates.iter().copied().fold(f64::INFINITY, f64::min);
            let max_rate = rates.iter().copied().fold(0.0, f64::max);
            FifoLine {
                threads: row.threads,
                pushers: row.pushers,
                pushes: row.pushes,
                min_rate,
                max_rate,
                meets_target: min_rate >= TARGET_PUSHES_PER_S,
            }
        })
        .collect()
}

/// The latency measured: the worst GPU's round trip and host read, µs.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct FifoLatency {
    /// Push→pop round trip.
    pub round_trip_us: f64,
    /// One GPU read of host memory.
    pub host_read_us: f64,
}

impl FifoLatency {
    /// The worst (largest) of every GPU's numbers.
    pub fn worst(reports: &[FifoReport]) -> Self {
        Self {
            round_trip_us: reports.iter().map(|r| r.round_trip_us).fold(0.0, f64::max),
            host_read_us: reports.iter().map(|r| r.host_read_us).fold(0.0, f64::max),
        }
    }

    /// Push→proxy-visible estimate: the round trip less one host read (see the module docs).
    pub fn one_way_us(&self) -> f64 {
        (self.round_trip_us - self.host_read_us).max(0.0)
    }
}

pub(super) fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

/// The `weft bench fifo` table.
pub fn fifo_table(options: &FifoOptions, lines: &[FifoLine], latency: FifoLatency) -> String {
    let mut t = String::new();
    let lanes = if options.lanes == 1 { "lane 0 of each warp" } else { "every lane" };
    let _ = writeln!(
        t,
        "# weft bench fifo: {} GPU(s) at once, each with its own proxy; {} pushes per GPU per run, pushers = \
         GPU threads ({lanes}), FIFO depth {}, a handler that checks every command and moves no data",
        options.gpus, options.pushes, options.depth
    );
    let _ = writeln!(t, "# target: >= {:.0} M pushes/s per GPU (slowest GPU)", TARGET_PUSHES_PER_S / 1e6);
    let _ = writeln!(
        t,
        "# {:>7} {:>8} {:>12} {:>16} {:>16} {:>8}",
        "fifos", "pushers", "pushes", "Mpush/s(min)", "Mpush/s(max)", "target"
    );
    for l in lines {
        let _ = writeln!(
            t,
            "  {:>7} {:>8} {:>12} {:>16.2} {:>16.2} {:>8}",
            l.threads,
            l.pushers,
            l.pushes,
            l.min_rate / 1e6,
            l.max_rate / 1e6,
            verdict(l.meets_target)
        );
    }
    if let Some(best) = lines.iter().max_by(|a, b| a.min_rate.total_cmp(&b.min_rate)) {
        let _ = writeln!(
            t,
            "# best: {:.2} M pushes/s with {} FIFO(s) and proxy thread(s), {} pushers",
            best.min_rate / 1e6,
            best.threads,
            best.pushers
        );
    }
    let one_way = latency.one_way_us();
    let _ = writeln!(
        t,
        "# latency: 1 FIFO, 1 proxy thread, 1 pushing GPU thread, {} rounds (worst GPU): push->pop round trip \
         {:.2} us, GPU read of host memory {:.2} us; push->proxy-visible ~ round trip - read = {one_way:.2} us \
         (target <= {TARGET_LATENCY_US} us: {})",
        options.rounds,
        latency.round_trip_us,
        latency.host_read_us,
        verdict(one_way <= TARGET_LATENCY_US)
    );
    t
}

/// The `weft bench p2p` table.
pub fn p2p_table(options: &P2pOptions, rows: &[P2pRow]) -> String {
    let mut t = String::new();
    let how = match options.channel {
        ChannelKind::Memory => "MemoryChannel put kernel (SM copies), best of 3 grid sizes",
        ChannelKind::Bulk => "MemoryChannel put through the TMA (bulk copies via shared memory), best of 3 grid sizes",
        ChannelKind::Port => "PortChannel put_with_signal + flush (copy engine), receiver waits for the signals",
    };
    let _ = writeln!(t, "# weft bench p2p --channel {}: rank 0 -> rank 1, {how}", options.channel.name());
    let port = options.channel == ChannelKind::Port;
    if port {
        let _ =
            writeln!(t, "# target: >= {TARGET_PORT_GBPS:.0} GB/s at >= {}", format_size(TARGET_PORT_MIN_BYTES as f64));
    }
    let latency = if port { "alone(us)" } else { "" };
    let _ = writeln!(
        t,
        "# {:>10} {:>12} {:>10} {:>10} {:>8}",
        "size",
        "time(us)",
        "GB/s",
        latency,
        if port { "target" } else { "" }
    );
    for r in rows {
        let target = if port && r.bytes >= TARGET_PORT_MIN_BYTES { verdict(r.gbps() >= TARGET_PORT_GBPS) } else { "" };
        let alone = r.latency_us.map_or(String::new(), |us| format!("{us:.2}"));
        let _ = writeln!(
            t,
            "  {:>10} {:>12.2} {:>10.2} {:>10} {:>8}",
            format_size(r.bytes as f64),
            r.us,
            r.gbps(),
            alone,
            target
        );
    }
    t
}

/// Runs `bench` on its GPUs (every GPU for fifo, 2 for p2p), prints the table and writes the JSON
/// file asked for.
pub fn run(bench: &ProxyBench, gpus: usize, json: Option<&Path>) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (ranks, items) = match bench {
        ProxyBench::Fifo(o) => (gpus, o.threads.iter().flat_map(|&t| o.pushers.iter().map(move |_| t)).collect()),
        ProxyBench::P2p(o) => {
            if gpus < 2 {
                return Err(format!("weft bench p2p needs 2 GPUs, {gpus} available").into());
            }
            (2, o.sizes())
        }
    };
    let reports: Vec<RankReport> = run_workers(
        ranks,
        "bench-proxy-worker",
        &[(WORKER_OPTIONS, serde_json::to_string(bench)?)],
        &items,
        Duration::from_secs(3600),
    )?;
    let (table, doc) = report(bench, reports)?;
    print_and_write(&table, &doc, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints `table` and writes `doc` to the JSON file asked for.
pub(super) fn print_and_write(
    table: &str,
    doc: &serde_json::Value,
    json: Option<&Path>,
) -> Result<(), Box<dyn std::error::Error>> {
    print!("{table}");
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_vec_pretty(doc)?).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The table and the JSON document of the workers' `reports` (in rank order).
pub fn report(bench: &ProxyBench, reports: Vec<RankReport>) -> Result<(String, serde_json::Value), String> {
    Ok(match bench {
        ProxyBench::Fifo(o) => {
            let per_gpu: Vec<FifoReport> = reports
                .into_iter()
                .map(|r| match r {
                    RankReport::Fifo(f) => Ok(f),
                    RankReport::P2p(_) => Err("a fifo worker sent a p2p report".to_string()),
                })
                .collect::<Result<_, _>>()?;
            let lines = fifo_lines(&per_gpu);
            let latency = FifoLatency::worst(&per_gpu);
            let doc = serde_json::json!({
                "options": bench,
                "lines": lines,
                "per_gpu": per_gpu,
                "latency": {
                    "round_trip_us": latency.round_trip_us,
                    "host_read_us": latency.host_read_us,
                    "one_way_us_estimate": latency.one_way_us(),
                },
                "targets": { "pushes_per_s": TARGET_PUSHES_PER_S, "latency_us": TARGET_LATENCY_US },
            });
            (fifo_table(o, &lines, latency), doc)
        }
        ProxyBench::P2p(o) => {
            let rows = match reports.into_iter().next() {
                Some(RankReport::P2p(rows)) => rows,
                _ => return Err("rank 0 of p2p sent no rows".into()),
            };
            let json_rows: Vec<serde_json::Value> = rows
                .iter()
                .map(|r| {
                    let mut row = serde_json::json!({ "bytes": r.bytes, "us": r.us, "gbps": r.gbps() });
                    if let Some(us) = r.latency_us {
                        row["latency_us"] = us.into();
                    }
                    row
                })
                .collect();
            let doc = serde_json::json!({
                "options": bench,
                "rows": json_rows,
                "targets": { "port_gbps": TARGET_PORT_GBPS, "port_min_bytes": TARGET_PORT_MIN_BYTES },
            });
            (p2p_table(o, &rows), doc)
        }
    })
}

/// Entry of one `bench-proxy-worker` process.
pub fn run_worker() -> Result<ExitCode, Box<dyn std::error::Error>> {
    worker_main(WORKER_OPTIONS, worker::run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_options_are_checked_and_pushes_round_up_to_whole_pushers() {
        assert!(FifoOptions::new(&[], None, 1, None, 1).is_err());
        assert!(FifoOptions::new(&[1, 0], None, 1, None, 1).is_err());
        assert!(FifoOptions::new(&[MAX_THREADS + 1], None, 1, None, 1).is_err());
        assert!(FifoOptions::new(&[1], None, 1, Some(0), 1).is_err());
        assert!(FifoOptions::new(&[1], Some(&[]), 1, None, 1).is_err());
        assert!(FifoOptions::new(&[1], Some(&[0]), 1, None, 1).is_err());
        assert!(FifoOptions::new(&[1], None, 2, None, 1).is_err());
        let o = FifoOptions::new(&[1, 2, 4], None, 1, None, 4).unwrap();
        assert_eq!((o.pushes, o.pushers.as_slice()), (DEFAULT_PUSHES, DEFAULT_PUSHERS.as_slice()));
        assert_eq!(u64::from(o.per_pusher(132)), DEFAULT_PUSHES.div_ceil(132));
        assert!(o.pushes_per_run(132) >= o.pushes && o.pushes_per_run(132) < o.pushes + 132);
        let one = FifoOptions::new(&[1], Some(&[5]), 1, Some(1), 1).unwrap();
        assert_eq!((one.per_pusher(5), one.pushes_per_run(5)), (1, 5));
    }

    #[test]
    fn the_push_grid_holds_every_pusher_in_warps_of_up_to_eight_per_block() {
        let lane0 = FifoOptions::new(&[1], None, 1, None, 1).unwrap();
        assert_eq!(lane0.grid(1), PushGrid { blocks: 1, block_threads: 32 });
        assert_eq!(lane0.grid(132), PushGrid { blocks: 17, block_threads: 256 });
        assert_eq!(lane0.grid(4224), PushGrid { blocks: 528, block_threads: 256 });
        let every = FifoOptions::new(&[1], None, 32, None, 1).unwrap();
        assert_eq!(every.grid(33792), PushGrid { blocks: 132, block_threads: 256 });
        assert_eq!(every.grid(33), PushGrid { blocks: 1, block_threads: 64 });
        for (o, p) in [(&lane0, 1000), (&every, 1000), (&lane0, 7), (&every, 7)] {
            let g = o.grid(p);
            assert!(g.blocks * g.block_threads / 32 * o.lanes >= p, "{p} pushers fit");
        }
    }

    #[test]
    fn p2p_options_need_a_channel_and_port_puts_below_4_gib() {
        assert!(P2pOptions::new(None, 1024, 1 << 30, 4).is_err());
        assert!(P2pOptions::new(Some("nvlink"), 1024, 1 << 30, 4).is_err());
        assert!(P2pOptions::new(Some("port"), 1024, 4 << 30, 4).is_err());
        assert!(P2pOptions::new(Some("memory"), 0, 1024, 4).is_err());
        assert!(P2pOptions::new(Some("memory"), 2048, 1024, 4).is_err());
        assert!(P2pOptions::new(Some("memory"), 1024, 4 << 30, 4).is_ok());
        let o = P2pOptions::new(Some("port"), 1024, 1 << 30, 4).unwrap();
        assert_eq!(o.channel, ChannelKind::Port);
        assert_eq!(o.sizes().len(), 11);
        assert_eq!(o.sizes().last(), Some(&(1 << 30)));
    }

    #[test]
    fn the_options_survive_the_trip_to_the_workers() {
        for bench in [
            ProxyBench::Fifo(FifoOptions::new(&[1, 2], Some(&[4, 8]), 32, Some(1000), 2).unwrap()),
            ProxyBench::P2p(P2pOptions::new(Some("port"), 1024, 1 << 20, 2).unwrap()),
        ] {
            let text = serde_json::to_string(&bench).unwrap();
            assert_eq!(serde_json::from_str::<ProxyBench>(&text).unwrap(), bench);
        }
        let report = RankReport::Fifo(FifoReport {
            rows: vec![FifoRow { threads: 1, pushers: 4, pushes: 10, seconds: 1.0 }],
            round_trip_us: 3.0,
            host_read_us: 1.0,
        });
        let text = serde_json::to_string(&Ok::<_, String>(report.clone())).unwrap();
        assert_eq!(serde_json::from_str::<Result<RankReport, String>>(&text).unwrap(), Ok(report));
    }

    #[test]
    fn rates_take_the_slowest_and_fastest_gpu() {
        assert_eq!(rate(10, 0.0), 0.0);
        assert_eq!(FifoRow { threads: 1, pushers: 1, pushes: 40_000_000, seconds: 2.0 }.rate(), 20e6);
        let gpu = |secs: [f64; 2], rtt, read| FifoReport {
            rows: vec![
                FifoRow { threads: 1, pushers: 132, pushes: 1_000_000, seconds: secs[0] },
                FifoRow { threads: 2, pushers: 132, pushes: 1_000_000, seconds: secs[1] },
            ],
            round_trip_us: rtt,
            host_read_us: read,
        };
        let reports = [gpu([0.1, 0.04], 3.0, 1.5), gpu([0.05, 0.025], 5.0, 1.0)];
        let lines = fifo_lines(&reports);
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].threads, lines[0].pushers, lines[0].min_rate, lines[0].max_rate), (1, 132, 1e7, 2e7));
        assert!(!lines[0].meets_target);
        assert_eq!((lines[1].min_rate, lines[1].max_rate), (25e6, 4e7));
        assert!(lines[1].meets_target);
        let latency = FifoLatency::worst(&reports);
        assert_eq!((latency.round_trip_us, latency.host_read_us, latency.one_way_us()), (5.0, 1.5, 3.5));
        assert!(fifo_lines(&[]).is_empty());
    }

    #[test]
    fn the_fifo_table_shows_rates_targets_the_best_row_and_the_one_way_estimate() {
        let o = FifoOptions::new(&[1, 2], Some(&[132]), 1, Some(1 << 20), 4).unwrap();
        let lines = vec![
            FifoLine {
                threads: 1,
                pushers: 132,
                pushes: 3 << 20,
                min_rate: 12.5e6,
                max_rate: 13e6,
                meets_target: false,
            },
            FifoLine { threads: 2, pushers: 132, pushes: 3 << 20, min_rate: 21e6, max_rate: 22e6, meets_target: true },
        ];
        let t = fifo_table(&o, &lines, FifoLatency { round_trip_us: 3.0, host_read_us: 1.25 });
        assert!(t.contains("4 GPU(s)") && t.contains("lane 0 of each warp"), "{t}");
        assert!(t.contains(">= 20 M pushes/s"), "{t}");
        let rows: Vec<&str> = t.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(rows.len(), 2);
        assert!(rows[0].contains("12.50") && rows[0].contains("13.00") && rows[0].ends_with("NOT met"), "{t}");
        assert!(rows[1].contains("21.00") && rows[1].trim_end().ends_with(" met"), "{t}");
        assert!(t.contains("# best: 21.00 M pushes/s with 2 FIFO(s)"), "{t}");
        assert!(t.contains("round trip 3.00 us") && t.contains("read of host memory 1.25 us"), "{t}");
        assert!(t.contains("= 1.75 us (target <= 2 us: met)"), "{t}");
        let slow = fifo_table(&o, &lines, FifoLatency { round_trip_us: 5.0, host_read_us: 2.5 });
        assert!(slow.contains("= 2.50 us (target <= 2 us: NOT met)"), "{slow}");
    }

    #[test]
    fn the_p2p_table_judges_the_port_target_only_at_64_mb_and_up() {
        let rows = vec![
            P2pRow { bytes: 1 << 20, us: 10.0, latency_us: None },
            P2pRow { bytes: 64 << 20, us: 200.0, latency_us: None },
            P2pRow { bytes: 256 << 20, us: 700.0, latency_us: None },
        ];
        assert!((rows[0].gbps() - 104.8576).abs() < 1e-9);
        let port = P2pOptions::new(Some("port"), 1 << 20, 256 << 20, 4).unwrap();
        let t = p2p_table(&port, &rows);
        let body: Vec<&str> = t.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(body.len(), 3);
        assert!(body[0].trim_start().starts_with("1M") && body[0].contains("104.86") && !body[0].contains("met"));
        assert!(body[1].contains("64M") && body[1].contains("335.54") && body[1].ends_with("NOT met"), "{t}");
        assert!(body[2].contains("256M") && body[2].contains("383.48") && body[2].trim_end().ends_with(" met"), "{t}");
        assert!(t.contains(">= 350 GB/s at >= 64M"), "{t}");
        let memory = P2pOptions::new(Some("memory"), 1 << 20, 256 << 20, 4).unwrap();
        let t = p2p_table(&memory, &rows);
        assert!(!t.contains("target") && !t.contains("met"), "{t}");
    }

    #[test]
    fn the_json_documents_carry_options_results_and_targets() {
        let fifo = ProxyBench::Fifo(FifoOptions::new(&[1], Some(&[132]), 1, Some(100), 2).unwrap());
        let gpu = |rtt| {
            RankReport::Fifo(FifoReport {
                rows: vec![FifoRow { threads: 1, pushers: 132, pushes: 30_000_000, seconds: 1.0 }],
                round_trip_us: rtt,
                host_read_us: 1.5,
            })
        };
        let (table, doc) = report(&fifo, vec![gpu(2.0), gpu(4.0)]).unwrap();
        assert!(table.contains("30.00"), "{table}");
        assert_eq!(doc["options"]["bench"], "fifo");
        assert_eq!(doc["lines"][0]["min_rate"], 30e6);
        assert_eq!(doc["lines"][0]["meets_target"], true);
        assert_eq!(doc["latency"]["round_trip_us"], 4.0);
        assert_eq!(doc["latency"]["one_way_us_estimate"], 2.5);
        assert_eq!(doc["targets"]["pushes_per_s"], 20e6);
        assert!(report(&fifo, vec![RankReport::P2p(vec![])]).is_err());

        let p2p = ProxyBench::P2p(P2pOptions::new(Some("port"), 1 << 20, 1 << 20, 2).unwrap());
        let rows = vec![P2pRow { bytes: 1 << 20, us: 10.0, latency_us: Some(31.5) }];
        let (table, doc) = report(&p2p, vec![RankReport::P2p(rows), RankReport::P2p(vec![])]).unwrap();
        assert!(table.contains("104.86") && table.contains("31.50"), "{table}");
        // What `weft model calibrate` reads as the message's α.
        assert_eq!(doc["rows"][0]["latency_us"], 31.5);
        assert_eq!((doc["options"]["bench"].as_str(), doc["options"]["channel"].as_str()), (Some("p2p"), Some("port")));
        assert_eq!(doc["rows"][0]["bytes"], 1 << 20);
        assert!((doc["rows"][0]["gbps"].as_f64().unwrap() - 104.8576).abs() < 1e-9);
        assert_eq!(doc["targets"]["port_gbps"], 350.0);
        assert!(report(&p2p, vec![]).is_err());
    }
}
