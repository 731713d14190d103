//! The TCP transport carrying GPU buffers, on each rank's own GPU: a sender and a receiver
//! transport of this process, over loopback with two sockets and frames smaller than the puts,
//! read from and written into device memory through staging buffers smaller than the puts
//! (`StagedDeviceMemory`), each put followed by a signal that the receiver's `DeviceInbox`
//! stores into a device token. A kernel on the legacy default stream spins on that token while
//! the data travels: it finishes only if no copy of the transport waits behind it. Then every
//! byte of the destination is checked (odd sizes and offsets, gaps left poisoned).

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_core::test_launchers;
use weft_core::{Communicator, KernelLibrary};
use weft_gpu::{DeviceMemory, PinnedHostMemory, Stream};
use weft_net::proxy::transport::Op;
use weft_net::proxy::transport::staged::{DeviceInbox, StagedDeviceMemory};
use weft_net::proxy::transport::tcp::{TcpConfig, TcpTransport};
use weft_net::proxy::{HostInbox, HostMemory, Inbox, Memory, MemoryTable, Submitted, Transport};

use super::report::RankReport;

const LEN: usize = (3 << 20) + 5;
/// (source offset, destination offset, bytes): disjoint destinations, odd sizes and offsets.
const PUTS: [(u64, u64, u64); 4] =
    [(0, 0, 1), (3, 5, 4099), (4104, 70_001, (1 << 20) + 13), (2_000_000, 1_200_000, 1_100_000)];
const STAGING: usize = 256 << 10;
const FRAME: usize = 300_000;
const POISON: u8 = 0x5A;

fn byte(rank: usize, i: usize) -> u8 {
    (i.wrapping_mul(197) ^ (rank * 41 + 3)) as u8
}

/// Bytes of the timed put.
const TIMED: usize = 64 << 20;
/// Timed repetitions (the best is reported).
const TIMED_RUNS: usize = 3;

/// Runs the case on this rank's GPU and records it, then times a large put.
pub(crate) fn run(comm: &Communicator, library: &KernelLibrary, label: &str, report: &mut RankReport) {
    let name = format!(
        "{label}TCP transport with device memory: {} puts + signals over loopback, a kernel spinning on the token",
        PUTS.len()
    );
    report.record(name, case(comm, library));
    match bandwidth(comm) {
        Ok(gbps) => report.metric("TCP loopback put, 64 MiB device -> device (2 sockets, 1 MiB frames)", gbps, "GB/s"),
        Err(e) => report.record(format!("{label}TCP transport with device memory: a timed 64 MiB put"), Err(e)),
    }
    // The same put between host memories: what the transport does without the staging.
    match host_bandwidth(comm.env().device_timeout) {
        Ok(gbps) => report.metric("TCP loopback put, 64 MiB host -> host (same settings)", gbps, "GB/s"),
        Err(e) => report.record(format!("{label}TCP transport: a timed 64 MiB put between host memories"), Err(e)),
    }
    match latencies(comm) {
        Ok(rows) => {
            for (len, device_us, host_us) in rows {
                let what = format!("TCP loopback put + signal of {len} B, applied and acknowledged");
                report.metric(format!("{what}, device -> device"), device_us, "us");
                report.metric(format!("{what}, host -> host"), host_us, "us");
            }
        }
        Err(e) => report.record(format!("{label}TCP transport: timed small puts"), Err(e)),
    }
}

/// Sizes of the timed small puts.
const LATENCY_SIZES: [u64; 3] = [8, 1 << 10, 64 << 10];
/// Timed round trips per size (the median is reported).
const LATENCY_ROUNDS: usize = 200;

/// Round trips of a put and its signal, from submission until the sender sees both applied
/// (the receiver's staged write done, its acknowledgement back): `(bytes, device µs, host µs)`,
/// medians, between device memories and between host memories.
fn latencies(comm: &Communicator) -> Result<Vec<(u64, f64, f64)>, String> {
    let timeout = comm.env().device_timeout;
    let device = Loopback::new(comm, 1 << 20, staged_default(), 1 << 20)?;
    let sources = MemoryTable::new();
    sources.register(Arc::new(HostMemory::new(1 << 20))).map_err(|e| text(&e))?;
    let destinations = MemoryTable::new();
    destinations.register(Arc::new(HostMemory::new(1 << 20))).map_err(|e| text(&e))?;
    let (host, _receiver) = connect(sources, Arc::new(HostInbox::new(destinations)), 1 << 20, timeout)?;
    let mut done = (0, 0);
    let mut rows = Vec::new();
    for len in LATENCY_SIZES {
        let device_us = median_round_trip_us(&device.sender, len, &mut done.0, timeout)?;
        let host_us = median_round_trip_us(&host, len, &mut done.1, timeout)?;
        rows.push((len, device_us, host_us));
    }
    device.finish(timeout + Duration::from_secs(30))?;
    Ok(rows)
}

/// The median of [`LATENCY_ROUNDS`] round trips of a `len`-byte put and a signal on
/// connection 0 of `sender`, whose first `done` operations are applied already (updated).
fn median_round_trip_us(sender: &TcpTransport, len: u64, done: &mut u64, timeout: Duration) -> Result<f64, String> {
    let ops = [Op::Put { src_memory: 0, src_offset: 0, dst_memory: 0, dst_offset: 0, len }, Op::Signal];
    let mut times = Vec::with_capacity(LATENCY_ROUNDS);
    for _ in 0..LATENCY_ROUNDS {
        let start = Instant::now();
        if sender.submit(0, &ops).map_err(|e| e.to_string())? == Submitted::Full {
            return Err("the connection was full with nothing in flight".into());
        }
        *done += 2;
        while sender.completed(0).map_err(|e| e.to_string())? < *done {
            if start.elapsed() > timeout {
                return Err(format!("a put of {len} B was not applied within {timeout:?}"));
            }
            std::hint::spin_loop();
        }
        times.push(start.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn text(e: &dyn std::fmt::Display) -> String {
    e.to_string()
}

/// A sender and a receiver transport of this process over loopback, each with one staged
/// device memory of `len` bytes (memory 0 on both sides), connection 0 between them, the
/// receiver's token for it in device memory.
struct Loopback {
    src: Arc<DeviceMemory>,
    dst: Arc<DeviceMemory>,
    token: Arc<DeviceMemory>,
    inbox: Arc<DeviceInbox>,
    sender: TcpTransport,
    receiver: TcpTransport,
}

impl Loopback {
    fn new(comm: &Communicator, len: usize, staging: usize, frame: usize) -> Result<Self, String> {
        let device = comm.device();
        let timeout = comm.env().device_timeout;
        let src = comm.alloc(len).map_err(|e| text(&e))?;
        let dst = comm.alloc(len).map_err(|e| text(&e))?;
        let token = comm.alloc(8).map_err(|e| text(&e))?;
        token.fill(0, 8, 0).map_err(|e| text(&e))?;
        let staged = |memory: &Arc<DeviceMemory>| {
            StagedDeviceMemory::new(device, memory.ptr(), len, memory.clone(), staging, timeout).map_err(|e| text(&e))
        };
        let sources = MemoryTable::new();
        sources.register(Arc::new(staged(&src)?)).map_err(|e| text(&e))?;
        let destinations = MemoryTable::new();
        destinations.register(Arc::new(staged(&dst)?)).map_err(|e| text(&e))?;
        let inbox = Arc::new(DeviceInbox::new(device, destinations).map_err(|e| text(&e))?);
        inbox.set_token(0, token.ptr(), token.clone()).map_err(|e| text(&e))?;
        let (sender, receiver) = connect(sources, inbox.clone(), frame, timeout)?;
        Ok(Self { src, dst, token, inbox, sender, receiver })
    }

    /// Waits (bounded) for the inbox's token stores, then stops both transports.
    fn finish(self, timeout: Duration) -> Result<(), String> {
        let drained = self.inbox.drain(timeout).map_err(|e| text(&e));
        self.sender.shutdown();
        self.receiver.shutdown();
        drained?;
        let errors = self.receiver.inbound_errors();
        if errors.is_empty() { Ok(()) } else { Err(format!("receiver errors: {errors:?}")) }
    }
}

/// The best of [`TIMED_RUNS`] puts of [`TIMED`] bytes with a signal, in GB/s (host clock from
/// submission to the sender's completion, which follows the receiver's last write); the
/// destination is checked after the last.
fn bandwidth(comm: &Communicator) -> Result<f64, String> {
    let link = Loopback::new(comm, TIMED, staged_default(), 1 << 20)?;
    let data: Vec<u8> = (0..TIMED).map(|i| byte(comm.rank() + 1, i)).collect();
    link.src.write(0, &data).map_err(|e| text(&e))?;
    let timeout = comm.env().device_timeout;
    let gbps = best_put_gbps(&link.sender, timeout, || link.dst.fill(0, TIMED, POISON).map_err(|e| text(&e)))?;
    let mut got = vec![0u8; TIMED];
    link.dst.read(0, &mut got).map_err(|e| text(&e))?;
    let wrong = got.iter().zip(&data).filter(|(g, w)| g != w).count();
    link.finish(timeout + Duration::from_secs(30))?;
    if wrong != 0 {
        return Err(format!("{wrong} of {TIMED} bytes wrong after the timed puts"));
    }
    Ok(gbps)
}

/// [`bandwidth`] between host memories (`HostMemory`, `HostInbox`), checked the same way.
fn host_bandwidth(timeout: Duration) -> Result<f64, String> {
    let src = Arc::new(HostMemory::new(TIMED));
    let dst = Arc::new(HostMemory::new(TIMED));
    let data: Vec<u8> = (0..TIMED).map(|i| byte(7, i)).collect();
    src.write(0, &data).map_err(|e| text(&e))?;
    let sources = MemoryTable::new();
    sources.register(src).map_err(|e| text(&e))?;
    let destinations = MemoryTable::new();
    destinations.register(dst.clone()).map_err(|e| text(&e))?;
    let (sender, _receiver) = connect(sources, Arc::new(HostInbox::new(destinations)), 1 << 20, timeout)?;
    let gbps = best_put_gbps(&sender, timeout, || Ok(()))?;
    if dst.snapshot() != data {
        return Err("the host destination differs from the source after the timed puts".into());
    }
    Ok(gbps)
}

/// A sender (its memories `sources`) and a receiver (applying into `inbox`) over loopback with
/// two sockets and frames of `frame` bytes, connection 0 from the one to the other. Dropping a
/// transport shuts it down.
fn connect(
    sources: MemoryTable,
    inbox: Arc<dyn Inbox>,
    frame: usize,
    timeout: Duration,
) -> Result<(TcpTransport, TcpTransport), String> {
    let config = TcpConfig { streams: 2, max_frame_payload: frame, timeout, ..TcpConfig::default() };
    let receiver =
        TcpTransport::bind(config.clone(), "receiver", Arc::new(MemoryTable::new()), inbox).map_err(|e| text(&e))?;
    let unused = Arc::new(HostInbox::new(MemoryTable::new()));
    let sender = TcpTransport::bind(config, "sender", Arc::new(sources), unused).map_err(|e| text(&e))?;
    sender.connect(0, receiver.local_addr(), 0, "receiver").map_err(|e| text(&e))?;
    Ok((sender, receiver))
}

/// The best of [`TIMED_RUNS`] puts of [`TIMED`] bytes with a signal on connection 0 (its first
/// operations), in GB/s: host clock from submission to the sender's completion, which follows
/// the receiver's last write. `before` runs before each put, untimed.
fn best_put_gbps(
    sender: &TcpTransport,
    timeout: Duration,
    mut before: impl FnMut() -> Result<(), String>,
) -> Result<f64, String> {
    let mut best = f64::INFINITY;
    for run in 1..=TIMED_RUNS as u64 {
        before()?;
        let start = Instant::now();
        transfer(sender, &[(0, 0, TIMED as u64)], 2 * run, timeout)?;
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok(TIMED as f64 / best / 1e9)
}

fn staged_default() -> usize {
    weft_net::proxy::transport::staged::DEFAULT_STAGING_BYTES
}

fn case(comm: &Communicator, library: &KernelLibrary) -> Result<(), String> {
    let rank = comm.rank();
    let device = comm.device();
    let timeout = comm.env().device_timeout;
    let link = Loopback::new(comm, LEN, STAGING, FRAME)?;
    let mine: Vec<u8> = (0..LEN).map(|i| byte(rank, i)).collect();
    link.src.write(0, &mine).map_err(|e| text(&e))?;
    link.dst.fill(0, LEN, POISON).map_err(|e| text(&e))?;

    // The spinning kernel, on the legacy default stream: the stream a synchronous copy would use.
    let module = library.load(device, "port.cu").map_err(|e| text(&e))?.module;
    let kernel = module.kernel("weft_wait_token").map_err(|e| text(&e))?;
    let status = PinnedHostMemory::alloc(device, 8).map_err(|e| text(&e))?;
    status.write(0, 7u32).map_err(|e| text(&e))?;
    let legacy = Stream::legacy_default(device);
    // Ranks sharing a GPU run this case at once: a peer's set-up (module load, allocations,
    // the legacy-stream memset) would serialise behind this rank's spinning kernel, and this
    // rank's copies behind it. Every rank is set up before any kernel spins (nothing with a GPU
    // per rank).
    comm.settle_before_launch().map_err(|e| text(&e))?;
    let host_timeout = timeout + Duration::from_secs(30);
    let (outcome, idle) = legacy.launch_scope(host_timeout, "the kernel spinning on the TCP token", |scope| {
        test_launchers::wait_token(scope, &kernel, comm, rank, &link.token, PUTS.len() as u64, &status)
            .map_err(|e| text(&e))?;
        Ok::<_, String>(transfer(&link.sender, &PUTS, 2 * PUTS.len() as u64, timeout))
    });
    let outcome = outcome?;
    let idle = idle.map_err(|e| text(&e));
    // ... and no rank frees memory (a context-wide synchronisation) while a peer's kernel spins.
    comm.settle_before_launch().map_err(|e| text(&e))?;
    let dst = link.dst.clone();
    let finished = link.finish(host_timeout);
    outcome?;
    idle?;
    finished?;
    comm.check_device().map_err(|e| text(&e))?;
    match status.read::<u32>(0) {
        Ok(1) => {}
        other => return Err(format!("spinning kernel status {other:?} (1: it saw every signal)")),
    }
    let mut want = vec![POISON; LEN];
    for (s, d, n) in PUTS {
        let (s, d, n) = (s as usize, d as usize, n as usize);
        want[d..d + n].copy_from_slice(&mine[s..s + n]);
    }
    let mut got = vec![0u8; LEN];
    dst.read(0, &mut got).map_err(|e| text(&e))?;
    match got.iter().zip(&want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{} of {LEN} bytes wrong, first at {i}: {:#x}, want {:#x}",
            got.iter().zip(&want).filter(|(g, w)| g != w).count(),
            got[i],
            want[i]
        )),
    }
}

/// Submits every put of `puts` with a signal, then waits (bounded) until the receiver applied
/// the connection's first `ops` operations.
fn transfer(sender: &TcpTransport, puts: &[(u64, u64, u64)], ops: u64, timeout: Duration) -> Result<(), String> {
    let start = Instant::now();
    let overdue = || start.elapsed() > 2 * timeout;
    for &(src_offset, dst_offset, len) in puts {
        let ops = [Op::Put { src_memory: 0, src_offset, dst_memory: 0, dst_offset, len }, Op::Signal];
        loop {
            match sender.submit(0, &ops).map_err(|e| e.to_string())? {
                Submitted::Accepted { .. } => break,
                Submitted::Full if overdue() => return Err("the connection stayed full".into()),
                Submitted::Full => std::thread::sleep(Duration::from_micros(100)),
            }
        }
    }
    loop {
        let done = sender.completed(0).map_err(|e| e.to_string())?;
        if done >= ops {
            return Ok(());
        }
        if overdue() {
            return Err(format!("{done} of {ops} operations applied after {:?}", start.elapsed()));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
