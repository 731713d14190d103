//! `weft bench gin`: device-initiated communication (weft-gin) measured against issue 27's
//! targets, on ranks that are threads of this process, a GPU each (like `weft selftest --only
//! gin`). Every number is from CUDA events around launches, over `--trials` timed launches after
//! a warm-up (median, fastest and slowest):
//!
//! - **latency**: the ping-pong probe (`device/kernels/gin/ping_pong.cu`): `ROUNDS` round trips
//!   of an 8-byte put + signal between ranks 0 and 1 in one launch; one-way = launch time / (2 ×
//!   rounds), over LSA and through the proxy over the emulated NIC (α = 2 µs).
//! - **bandwidth**: the put-stream probe (`device/kernels/gin/put_stream.cu`): rank 0 puts
//!   messages of each size with a signal each, flushes; rank 1 waits for every signal. GB/s =
//!   bytes moved / rank 0's launch time, over LSA (each message split over
//!   `STREAM_LSA_BLOCKS` blocks: one SM cannot fill NVLink) and over the emulated NIC capped at
//!   50 GB/s (one block, a command per message; shown as a fraction of the cap).
//! - **AllToAll**: the example kernel on every rank, each rank a virtual node on the emulated
//!   NIC, timed twice: the exchange between the windows alone (`alltoall_windows`: launch,
//!   barrier, puts, waits), which the target compares with the α-β floor, α + (world − 1) ·
//!   chunk / β (one step: every rank's chunks for its peers leave through its NIC at once), and
//!   the safe call (copy into the send window, exchange, copy out), the time a caller of
//!   `GinExamples::alltoall` sees. Each time is the slowest rank's.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use serde::{Deserialize, Serialize};

use crate::harness::gin_backend::{EMULATED_ALPHA_US, EMULATED_GBPS, GinBackend};
use crate::harness::sweep::{format_size, sizes_between};
use crate::harness::trials::Timing;

use super::proxy::{print_and_write, verdict};

mod rank;

/// Target over LSA: one-way latency of an 8-byte put + signal, µs.
pub const TARGET_LSA_ONE_WAY_US: f64 = 1.0;
/// Target through the proxy over the emulated NIC: one-way latency beyond α, µs.
pub const TARGET_PROXY_OVER_ALPHA_US: f64 = 2.5;
/// Target over the emulated NIC: fraction of the cap reached ...
pub const TARGET_CAP_FRACTION: f64 = 0.9;
/// ... by messages of this many bytes.
pub const TARGET_CAP_BYTES: usize = 1 << 20;
/// Target of the AllToAll: time per call at most this many times its α-β floor.
pub const TARGET_FLOOR_RATIO: f64 = 1.3;

/// Bytes of each ping-pong put.
pub const PING_BYTES: u64 = 8;
/// Round trips per ping-pong launch.
pub const ROUNDS: u32 = 10_000;
/// Bytes the put stream moves per launch at least (so that a launch lasts milliseconds) ...
const STREAM_BYTES: usize = 256 << 20;
/// ... in at least this many messages.
const MIN_MESSAGES: u32 = 4;
/// The backends the latency and the bandwidth are measured over.
pub const PROBE_BACKENDS: [GinBackend; 2] = [GinBackend::Lsa, GinBackend::EmulatedNic];

/// Options of `weft bench gin`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GinBenchOptions {
    /// Smallest message (bandwidth) and AllToAll buffer.
    pub min_bytes: usize,
    /// Largest.
    pub max_bytes: usize,
    /// Size multiplier.
    pub factor: usize,
    /// GPUs the ranks are placed on, round-robin (at most one per rank).
    pub gpus: usize,
    /// Ranks (threads of this process); the probes run between ranks 0 and 1.
    pub ranks: usize,
    /// Timed launches per measurement.
    pub trials: usize,
}

impl GinBenchOptions {
    /// Checks the CLI's values.
    pub fn new(
        (min_bytes, max_bytes, factor): (usize, usize, usize),
        gpus: usize,
        ranks: Option<usize>,
        trials: usize,
    ) -> Result<Self, String> {
        let ranks = ranks.unwrap_or(2);
        if ranks < 2 {
            return Err(format!("--ranks {ranks}: weft bench gin needs at least 2 ranks"));
        }
        if min_bytes == 0 || min_bytes > max_bytes {
            return Err(format!("sizes {min_bytes}..{max_bytes}: need 1 <= -b <= -e"));
        }
        // Proxy commands carry 32-bit sizes.
        if u32::try_from(max_bytes).is_err() {
            return Err(format!("-e {max_bytes}: a put through the proxy is below 4 GiB"));
        }
        if trials == 0 {
            return Err("--trials 0: a measurement needs at least one timed launch".into());
        }
        Ok(Self { min_bytes, max_bytes, factor, gpus: gpus.min(ranks), ranks, trials })
    }

    /// The message sizes of the bandwidth and the buffer sizes of the AllToAll.
    pub fn sizes(&self) -> Vec<usize> {
        sizes_between(self.min_bytes, self.max_bytes, self.factor)
    }

    /// Whether ranks share GPUs (the kernels then time-slice: timings do not hold).
    pub fn shares_gpus(&self) -> bool {
        self.ranks > self.gpus
    }
}

/// Puts per launch of the put stream for messages of `bytes`.
pub fn stream_messages(bytes: usize) -> u32 {
    u32::try_from(STREAM_BYTES / bytes.max(1)).unwrap_or(u32::MAX).max(MIN_MESSAGES)
}

/// The α-β floor of an AllToAll of `bytes` per rank over `world` ranks on the emulated NIC, µs:
/// α + (world − 1) · chunk / β, chunk = bytes / world.
pub fn alltoall_floor_us(bytes: usize, world: usize) -> f64 {
    let chunk = bytes as f64 / world.max(1) as f64;
    EMULATED_ALPHA_US + (world.saturating_sub(1)) as f64 * chunk / (EMULATED_GBPS * 1e3)
}

/// One-way latency of the ping-pong over one backend (rank 0's launches).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LatencyRow {
    /// How the ranks reach each other.
    pub backend: GinBackend,
    /// Round trips per launch.
    pub rounds: u32,
    /// One-way µs of each timed launch.
    pub trials_us: Vec<f64>,
}

/// The put stream at one message size over one backend (rank 0's launches).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BandwidthRow {
    /// How the ranks reach each other.
    pub backend: GinBackend,
    /// Message bytes.
    pub bytes: usize,
    /// Messages per launch.
    pub messages: u32,
    /// Blocks each message is split over.
    pub blocks: u32,
    /// µs per message of each timed launch.
    pub trials_us: Vec<f64>,
}

/// The AllToAll at one size (one rank's calls).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AllToAllRow {
    /// Bytes of each rank's input (and output).
    pub bytes: usize,
    /// µs of each timed exchange between the windows (the kernel alone).
    pub exchange_us: Vec<f64>,
    /// µs of each timed safe call (copy in, exchange, copy out).
    pub call_us: Vec<f64>,
}

/// What one rank measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct GinRankReport {
    /// The ping-pong, per backend.
    pub latency: Vec<LatencyRow>,
    /// The put stream, per backend and size.
    pub bandwidth: Vec<BandwidthRow>,
    /// The AllToAll, per size.
    pub alltoall: Vec<AllToAllRow>,
}

/// A reported measurement: its timing and whether it meets its target (`None`: no target).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Line {
    /// What was measured.
    pub what: String,
    /// Bytes per put (latency, bandwidth) or per rank (AllToAll).
    pub bytes: usize,
    /// Median µs (one-way, per message, per call).
    pub median_us: f64,
    /// Fastest trial, µs.
    pub min_us: f64,
    /// Slowest trial, µs.
    pub max_us: f64,
    /// GB/s at the median (bandwidth only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
    /// Median over the α-β floor (AllToAll), or GB/s over the cap (bandwidth on the NIC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// The AllToAll's safe call (copy in, exchange, copy out), slowest rank: median µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_median_us: Option<f64>,
    /// Whether the target is met.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meets_target: Option<bool>,
}

fn line(what: String, bytes: usize, trials: &[f64]) -> Result<Line, String> {
    let t = Timing::of(trials).ok_or_else(|| format!("{what}: no timed trial"))?;
    Ok(Line {
        what,
        bytes,
        median_us: t.median,
        min_us: t.min,
        max_us: t.max,
        gbps: None,
        ratio: None,
        call_median_us: None,
        meets_target: None,
    })
}

/// The latency lines: one per backend, each against its target.
pub fn latency_lines(rows: &[LatencyRow]) -> Result<Vec<Line>, String> {
    rows.iter()
        .map(|r| {
            let mut l = line(format!("one-way put + signal, {}", r.backend.name()), PING_BYTES as usize, &r.trials_us)?;
            let target = match r.backend {
                GinBackend::Lsa => TARGET_LSA_ONE_WAY_US,
                _ => EMULATED_ALPHA_US + TARGET_PROXY_OVER_ALPHA_US,
            };
            l.meets_target = Some(l.median_us <= target);
            Ok(l)
        })
        .collect()
}

/// The bandwidth lines: over the emulated NIC with the fraction of its cap, judged at
/// [`TARGET_CAP_BYTES`].
pub fn bandwidth_lines(rows: &[BandwidthRow]) -> Result<Vec<Line>, String> {
    rows.iter()
        .map(|r| {
            let mut l = line(format!("put stream, {}", r.backend.name()), r.bytes, &r.trials_us)?;
            let gbps = r.bytes as f64 / l.median_us / 1e3;
            l.gbps = Some(gbps);
            if r.backend != GinBackend::Lsa {
                let fraction = gbps / EMULATED_GBPS;
                l.ratio = Some(fraction);
                l.meets_target = (r.bytes == TARGET_CAP_BYTES).then_some(fraction >= TARGET_CAP_FRACTION);
            }
            Ok(l)
        })
        .collect()
}

/// The slowest rank's timing of row `i`'s `trials` (one of the row's timed quantities).
fn slowest(per_rank: &[Vec<AllToAllRow>], i: usize, trials: fn(&AllToAllRow) -> &[f64]) -> Option<Timing> {
    let timings = per_rank.iter().map(|rows| rows.get(i).and_then(|r| Timing::of(trials(r))));
    timings.collect::<Option<Vec<Timing>>>()?.into_iter().reduce(Timing::slowest)
}

/// The AllToAll lines: at each size the slowest rank's exchange against the floor (the target),
/// with the slowest rank's safe call beside it.
pub fn alltoall_lines(per_rank: &[Vec<AllToAllRow>], world: usize) -> Result<Vec<Line>, String> {
    let Some(first) = per_rank.first() else { return Ok(Vec::new()) };
    first
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let missing = || format!("AllToAll of {}: a rank has no trials", row.bytes);
            let exchange = slowest(per_rank, i, |r| &r.exchange_us).ok_or_else(missing)?;
            let call = slowest(per_rank, i, |r| &r.call_us).ok_or_else(missing)?;
            let ratio = exchange.median / alltoall_floor_us(row.bytes, world);
            Ok(Line {
                what: format!("AllToAll, {world} virtual nodes on the emulated NIC"),
                bytes: row.bytes,
                median_us: exchange.median,
                min_us: exchange.min,
                max_us: exchange.max,
                gbps: None,
                ratio: Some(ratio),
                call_median_us: Some(call.median),
                meets_target: Some(ratio <= TARGET_FLOOR_RATIO),
            })
        })
        .collect()
}

fn target_cell(l: &Line) -> &'static str {
    l.meets_target.map_or("", verdict)
}

/// The `weft bench gin` tables.
pub fn table(o: &GinBenchOptions, [latency, bandwidth, alltoall]: [&[Line]; 3]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# weft bench gin: {} ranks on {} GPU(s) (threads), emulated NIC alpha = {EMULATED_ALPHA_US} us, cap \
         {EMULATED_GBPS} GB/s; median of {} timed launches (fastest..slowest){}",
        o.ranks,
        o.gpus,
        o.trials,
        if o.shares_gpus() { "; ranks share GPUs: timings do not hold" } else { "" }
    );
    let _ = writeln!(
        t,
        "# latency: {ROUNDS} round trips of a {PING_BYTES}-byte put + signal between ranks 0 and 1 per launch, \
         one-way = launch / (2 x rounds); targets: LSA <= {TARGET_LSA_ONE_WAY_US} us, proxy <= alpha + \
         {TARGET_PROXY_OVER_ALPHA_US} us"
    );
    for l in latency {
        let _ = writeln!(
            t,
            "  {:<64} {:>9.3} us ({:.3}..{:.3}) {:>8}",
            l.what,
            l.median_us,
            l.min_us,
            l.max_us,
            target_cell(l)
        );
    }
    let _ = writeln!(
        t,
        "# bandwidth: rank 0 puts messages with a signal each, rank 1 waits; target on the NIC: >= {:.0}% of the \
         cap at {}",
        TARGET_CAP_FRACTION * 100.0,
        format_size(TARGET_CAP_BYTES as f64)
    );
    let _ = writeln!(
        t,
        "# {:<58} {:>10} {:>12} {:>10} {:>8} {:>8}",
        "backend", "size", "us/msg", "GB/s", "of cap", "target"
    );
    for l in bandwidth {
        let _ = writeln!(
            t,
            "  {:<58} {:>10} {:>12.3} {:>10.2} {:>8} {:>8}",
            l.what,
            format_size(l.bytes as f64),
            l.median_us,
            l.gbps.unwrap_or(0.0),
            l.ratio.map_or(String::new(), |r| format!("{:.1}%", r * 100.0)),
            target_cell(l)
        );
    }
    let _ = writeln!(
        t,
        "# AllToAll example, slowest rank: the exchange between the windows (launch, barrier, puts, waits) against \
         floor = alpha + (world - 1) x chunk / beta, target <= {TARGET_FLOOR_RATIO} x floor; the safe call (copy in, \
         exchange, copy out) beside it"
    );
    let _ = writeln!(
        t,
        "# {:>10} {:>12} {:>12} {:>8} {:>8} {:>12} {:>8}",
        "size", "exchange(us)", "floor(us)", "ratio", "target", "call(us)", "ratio"
    );
    for l in alltoall {
        let floor = l.median_us / l.ratio.unwrap_or(1.0);
        let call = l.call_median_us.unwrap_or(0.0);
        let _ = writeln!(
            t,
            "  {:>10} {:>12.2} {:>12.2} {:>8.2} {:>8} {:>12.2} {:>8.2}",
            format_size(l.bytes as f64),
            l.median_us,
            floor,
            l.ratio.unwrap_or(0.0),
            target_cell(l),
            call,
            call / floor
        );
    }
    t
}

/// The table and the JSON document of every rank's report (in rank order).
pub fn report(o: &GinBenchOptions, reports: Vec<GinRankReport>) -> Result<(String, serde_json::Value), String> {
    let rank0 = reports.first().ok_or("no rank reported")?;
    let latency = latency_lines(&rank0.latency)?;
    let bandwidth = bandwidth_lines(&rank0.bandwidth)?;
    let per_rank: Vec<Vec<AllToAllRow>> = reports.iter().map(|r| r.alltoall.clone()).collect();
    let alltoall = alltoall_lines(&per_rank, o.ranks)?;
    let doc = serde_json::json!({
        "options": o,
        "latency": latency,
        "bandwidth": bandwidth,
        "alltoall": alltoall,
        "emulated_nic": { "alpha_us": EMULATED_ALPHA_US, "gbps": EMULATED_GBPS },
        "targets": {
            "lsa_one_way_us": TARGET_LSA_ONE_WAY_US,
            "proxy_one_way_us": EMULATED_ALPHA_US + TARGET_PROXY_OVER_ALPHA_US,
            "cap_fraction": TARGET_CAP_FRACTION,
            "cap_fraction_bytes": TARGET_CAP_BYTES,
            "alltoall_floor_ratio": TARGET_FLOOR_RATIO,
        },
        "per_rank": reports,
    });
    Ok((table(o, [&latency, &bandwidth, &alltoall]), doc))
}

/// Runs the benchmark on `options.ranks` threads, prints the tables and writes the JSON file
/// asked for.
pub fn run(options: &GinBenchOptions, json: Option<&Path>) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let reports = rank::run_threads(options)?;
    let (table, doc) = report(options, reports)?;
    print_and_write(&table, &doc, json)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    fn options() -> GinBenchOptions {
        GinBenchOptions::new((4 << 10, 64 << 20, 4), 2, None, 3).unwrap()
    }

    #[test]
    fn the_options_are_checked_and_sweep_4k_to_64m() {
        assert!(GinBenchOptions::new((4096, 4096, 4), 2, Some(1), 3).is_err());
        assert!(GinBenchOptions::new((0, 4096, 4), 2, None, 3).is_err());
        assert!(GinBenchOptions::new((8192, 4096, 4), 2, None, 3).is_err());
        assert!(GinBenchOptions::new((4096, 4 << 30, 4), 2, None, 3).is_err());
        assert!(GinBenchOptions::new((4096, 4096, 4), 2, None, 0).is_err());
        let o = options();
        assert_eq!((o.ranks, o.shares_gpus()), (2, false));
        assert_eq!(o.sizes(), vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]);
        assert!(GinBenchOptions::new((4096, 4096, 4), 1, Some(2), 3).unwrap().shares_gpus());
        assert_eq!(GinBenchOptions::new((4096, 4096, 4), 8, None, 3).unwrap().gpus, 2);
    }

    #[test]
    fn a_launch_streams_at_least_256_mb_in_at_least_4_messages() {
        assert_eq!(stream_messages(4 << 10), 65536);
        assert_eq!(stream_messages(1 << 20), 256);
        assert_eq!(stream_messages(64 << 20), 4);
        assert_eq!(stream_messages(1 << 30), 4);
    }

    #[test]
    fn the_alltoall_floor_is_alpha_plus_the_peers_chunks_over_beta() {
        // 1 MB over 2 ranks: one 512 KB chunk crosses the NIC at 50 GB/s.
        assert!((alltoall_floor_us(1 << 20, 2) - (2.0 + 524_288.0 / 50e3)).abs() < 1e-9);
        // 4 ranks: 3 chunks of a quarter each.
        assert!((alltoall_floor_us(1 << 20, 4) - (2.0 + 3.0 * 262_144.0 / 50e3)).abs() < 1e-9);
    }

    #[test]
    fn the_lines_judge_each_target() {
        let latency = latency_lines(&[
            LatencyRow { backend: GinBackend::Lsa, rounds: 10, trials_us: vec![0.9, 1.2, 0.8] },
            LatencyRow { backend: GinBackend::EmulatedNic, rounds: 10, trials_us: vec![4.6, 4.7, 5.0] },
        ])
        .unwrap();
        assert_eq!((latency[0].median_us, latency[0].meets_target), (0.9, Some(true)));
        assert_eq!((latency[1].median_us, latency[1].meets_target), (4.7, Some(false)));
        // 1 MB in 21 us: 49.9 GB/s, 99.9% of the cap; 4 KB judged by nothing.
        let bandwidth = bandwidth_lines(&[
            BandwidthRow {
                backend: GinBackend::EmulatedNic,
                bytes: 1 << 20,
                messages: 256,
                blocks: 1,
                trials_us: vec![21.0],
            },
            BandwidthRow {
                backend: GinBackend::EmulatedNic,
                bytes: 4096,
                messages: 4,
                blocks: 1,
                trials_us: vec![1.0],
            },
            BandwidthRow { backend: GinBackend::Lsa, bytes: 1 << 20, messages: 256, blocks: 16, trials_us: vec![5.0] },
        ])
        .unwrap();
        assert!((bandwidth[0].gbps.unwrap() - 49.932_19).abs() < 1e-3);
        assert_eq!(bandwidth[0].meets_target, Some(true));
        assert_eq!(bandwidth[1].meets_target, None);
        assert_eq!((bandwidth[2].ratio, bandwidth[2].meets_target), (None, None));
        // The target judges the exchange; the safe call (3x here) is reported beside it.
        let rank = |us: f64| vec![AllToAllRow { bytes: 1 << 20, exchange_us: vec![us, us], call_us: vec![3.0 * us] }];
        let floor = alltoall_floor_us(1 << 20, 2);
        let alltoall = alltoall_lines(&[rank(floor), rank(1.2 * floor)], 2).unwrap();
        assert!((alltoall[0].ratio.unwrap() - 1.2).abs() < 1e-9);
        assert!((alltoall[0].call_median_us.unwrap() - 3.6 * floor).abs() < 1e-9);
        assert_eq!(alltoall[0].meets_target, Some(true));
        let alltoall = alltoall_lines(&[rank(floor), rank(1.4 * floor)], 2).unwrap();
        assert_eq!(alltoall[0].meets_target, Some(false));
        assert!(alltoall_lines(&[rank(floor), vec![]], 2).is_err());
    }

    #[test]
    fn the_report_has_every_table_and_the_json_every_line() {
        let report0 = GinRankReport {
            latency: vec![LatencyRow { backend: GinBackend::Lsa, rounds: 10, trials_us: vec![0.75] }],
            bandwidth: vec![BandwidthRow {
                backend: GinBackend::EmulatedNic,
                bytes: 1 << 20,
                messages: 256,
                blocks: 1,
                trials_us: vec![20.0],
            }],
            alltoall: vec![AllToAllRow { bytes: 4096, exchange_us: vec![10.0], call_us: vec![30.0] }],
        };
        let alltoall = vec![AllToAllRow { bytes: 4096, exchange_us: vec![12.0], call_us: vec![25.0] }];
        let report1 = GinRankReport { alltoall, ..Default::default() };
        let (table, doc) = report(&options(), vec![report0, report1]).unwrap();
        assert!(table.contains("one-way put + signal, LSA (one node)") && table.contains("0.750 us"), "{table}");
        assert!(table.contains("52.43") && table.contains("104.9%"), "{table}");
        // The slowest exchange is rank 1's, the slowest call rank 0's.
        assert!(table.contains("12.00") && table.contains("2.04") && table.contains("30.00"), "{table}");
        assert_eq!(doc["latency"][0]["meets_target"], true);
        assert_eq!(doc["alltoall"][0]["median_us"], 12.0);
        assert_eq!(doc["alltoall"][0]["call_median_us"], 30.0);
        assert_eq!(doc["options"]["ranks"], 2);
        assert_eq!(doc["targets"]["proxy_one_way_us"], 4.5);
        assert!(report(&options(), vec![]).is_err());
    }

    #[test]
    fn the_rank_reports_survive_the_json_trip() {
        let r = GinRankReport {
            latency: vec![LatencyRow { backend: GinBackend::EmulatedNic, rounds: 3, trials_us: vec![1.0] }],
            ..Default::default()
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<GinRankReport>(&text).unwrap(), r);
    }
}
