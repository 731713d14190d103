//! The proxy driven by host-memory FIFOs over the copy-engine transport, with the copy engine
//! simulated on host memory (`proxy::transport::sim`): signals after their data while a writer
//! spins on the token (as a kernel would), flushes, the emulated NIC's latency and bandwidth
//! cap, its chaos (`CopyEngineConfig::chaos`: operations delivered out of order, signals still
//! after their data, flushes after everything, under several seeds), a stalled engine (a
//! timeout naming the peer, writers released), shutdown right after the pushes (drained, or
//! abandoned at the deadline), bad memory indices, and `TransferCmd` counter updates in order and
//! under chaos (after their writes, in the sender's order). Every test runs under a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;
use common::{start_service, within};

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_core::LinkModel;
use weft_net::fifo::{FifoError, FifoMemory, FifoReader, FifoWriter, HostFifo};
use weft_net::proxy::counters::COUNTERS_PER_STREAM;
use weft_net::proxy::transport::ce::{CopyEngineConfig, CopyEngineTransport, KeepAlive, PACED_PIECE, PeerLink};
use weft_net::proxy::transport::sim::{HostAddressSpace, HostCopyQueue};
use weft_net::proxy::{
    HostMemory, Memory, Op, ProxyConfig, ProxyError, ProxyService, ShutdownReport, Submitted, TransferConfig,
    TransferHandler, TransferLink, Transport, TransportError,
};
use weft_types::{CounterUpdate, FifoCommand, FifoCommandFields, FifoOp, TRANSFER_FIFO_OP, Transfer, TransferCmd};

fn command(op: FifoOp, dst_memory: u8, src_offset: u32, dst_offset: u32, size: u32) -> FifoCommand {
    FifoCommand::encode(FifoCommandFields {
        op: op as u8,
        connection: 0,
        src_memory: 0,
        dst_memory,
        src_offset,
        dst_offset,
        size,
    })
    .unwrap()
}

/// Rank A's memory 0 (`src`) and a connection 0 to rank B whose memory 3 is `dst` and whose
/// inbound token lives at `token`.
struct Setup {
    space: Arc<HostAddressSpace>,
    src: Arc<HostMemory>,
    dst: Arc<HostMemory>,
    token: u64,
    transport: Arc<CopyEngineTransport<HostCopyQueue>>,
    fifo: HostFifo,
    service: Option<ProxyService>,
}

fn setup(len: usize, delay: Duration, config: CopyEngineConfig, paced: bool) -> Setup {
    let space = HostAddressSpace::new();
    let (src_addr, src) = space.alloc(len);
    let (dst_addr, dst) = space.alloc(len);
    let (token, _) = space.alloc(8);
    let transport = Arc::new(CopyEngineTransport::new(config).unwrap());
    assert_eq!(transport.register_local(src_addr, len as u64, src.clone()).unwrap(), 0);
    let queue = HostCopyQueue::new(space.clone(), delay);
    transport.connect(0, link("rank 1", queue, token, vec![(3, dst_addr, len as u64)], dst.clone(), paced)).unwrap();
    let fifo = HostFifo::new(64).unwrap();
    let service = start_service(transport.clone(), std::slice::from_ref(&fifo), ProxyConfig::default());
    Setup { space, src, dst, token, transport, fifo, service: Some(service) }
}

/// `command` on connection `connection`.
fn on_connection(connection: u16, command: FifoCommand) -> FifoCommand {
    FifoCommand::encode(FifoCommandFields { connection, ..command.fields() }).unwrap()
}

fn link(
    peer: &str,
    queue: HostCopyQueue,
    token: u64,
    remote: Vec<(u8, u64, u64)>,
    keep: KeepAlive,
    paced: bool,
) -> PeerLink<HostCopyQueue> {
    PeerLink { peer: peer.into(), queue, token, remote, keep, paced }
}

fn pattern(round: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + round * 7 + 1) as u8).collect()
}

#[test]
fn a_writer_spinning_on_the_token_sees_each_signal_only_after_its_data() {
    within(30, || {
        let s = setup(1 << 16, Duration::from_micros(200), CopyEngineConfig::default(), false);
        let writer = FifoWriter::new(s.fifo.clone(), Some(Duration::from_secs(10)));
        let chunk = 4096usize;
        for round in 0..16 {
            s.src.write(round * chunk, &pattern(round, chunk)).unwrap();
            writer
                .push(command(FifoOp::PutSignal, 3, (round * chunk) as u32, (round * chunk) as u32, chunk as u32))
                .unwrap();
        }
        // Spin like a kernel waiting on its semaphore; every value seen must cover its data.
        let start = Instant::now();
        let mut seen = 0;
        while seen < 16 {
            assert!(start.elapsed() < Duration::from_secs(10), "token stuck at {seen}");
            let token = s.space.load_u64(s.token).unwrap();
            assert!(token <= 16);
            for round in seen..token as usize {
                let mut got = vec![0; chunk];
                s.dst.read(round * chunk, &mut got).unwrap();
                assert_eq!(got, pattern(round, chunk), "signal {} arrived before put {round}", round + 1);
            }
            seen = token as usize;
        }
        let report = s.service.unwrap().shutdown().unwrap();
        assert_eq!(report.executed, 16);
        assert_eq!(s.transport.submitted(0).unwrap(), 32);
    });
}

#[test]
fn a_flush_is_consumed_only_once_the_engine_executed_everything_before_it() {
    within(30, || {
        let s = setup(1024, Duration::from_millis(30), CopyEngineConfig::default(), false);
        let writer = FifoWriter::new(s.fifo.clone(), Some(Duration::from_secs(10)));
        s.src.write(0, &pattern(1, 1024)).unwrap();
        writer.push(command(FifoOp::Put, 3, 0, 0, 1024)).unwrap();
        let flush = writer.push(command(FifoOp::SignalFlush, 0, 0, 0, 0)).unwrap();
        assert!(!writer.poll(flush), "the engine waits 30 ms per operation");
        writer.sync(flush).unwrap();
        assert_eq!(s.dst.snapshot(), pattern(1, 1024));
        assert_eq!(s.space.load_u64(s.token).unwrap(), 1);
        assert_eq!(s.transport.completed(0).unwrap(), 2);
        assert_eq!(s.transport.flow().in_flight(0), 0, "completion returned every credit");
    });
}

/// The chaos seeds the emulated NIC's tests run under, after the run in order (`None`).
const CHAOS: [Option<u64>; 4] = [None, Some(1), Some(2), Some(0xC0FFEE)];

#[test]
fn the_emulated_nic_delays_each_message_by_alpha_and_caps_bandwidth() {
    within(60, || {
        for chaos in CHAOS {
            emulated_nic_delays_each_message_by_alpha_and_caps_bandwidth(chaos);
        }
    });
}

fn emulated_nic_delays_each_message_by_alpha_and_caps_bandwidth(chaos: Option<u64>) {
    // α = 40 ms, β = 0.05 GB/s: a 1 MB put leaves after 20 ms and lands 40 ms later
    // (chaos only adds to that).
    let link = Some(LinkModel::new(40_000.0, Some(0.05)));
    let config = CopyEngineConfig { link, chaos, ..Default::default() };
    let s = setup(1 << 20, Duration::ZERO, config, true);
    let writer = FifoWriter::new(s.fifo.clone(), Some(Duration::from_secs(10)));
    s.src.write(0, &pattern(2, 1 << 20)).unwrap();
    let start = Instant::now();
    let pos = writer.push(command(FifoOp::PutSignalFlush, 3, 0, 0, 1 << 20)).unwrap();
    while s.space.load_u64(s.token).unwrap() == 0 {
        assert!(start.elapsed() < Duration::from_secs(5));
        std::hint::spin_loop();
    }
    let arrived = start.elapsed();
    assert!(arrived >= Duration::from_millis(60), "signal after {arrived:?}, before α + bytes/β = 60 ms");
    assert_eq!(s.dst.snapshot(), pattern(2, 1 << 20));
    writer.sync(pos).unwrap();
    // An unpaced connection of the same transport is not delayed.
    let t = s.transport.link().unwrap();
    assert!((t.message_time(1_000_000).as_secs_f64() - 0.06).abs() < 1e-9);
}

#[test]
fn a_paced_put_longer_than_a_piece_lands_piece_by_piece_and_its_signal_after_the_last() {
    within(30, || {
        // α = 5 ms, β = 0.05 GB/s: each 1 MiB piece crosses the link in 21 ms, so the first
        // lands at ~26 ms, the last at ~89 ms, and the signal after it.
        let len = 4 * PACED_PIECE as usize;
        let link = LinkModel::new(5_000.0, Some(0.05));
        let config = CopyEngineConfig { link: Some(link), ..Default::default() };
        let s = setup(len, Duration::ZERO, config, true);
        let writer = FifoWriter::new(s.fifo.clone(), Some(Duration::from_secs(10)));
        let data = pattern(3, len);
        s.src.write(0, &data).unwrap();
        let start = Instant::now();
        let pos = writer.push(command(FifoOp::PutSignalFlush, 3, 0, 0, len as u32)).unwrap();
        let piece = PACED_PIECE as usize;
        let (mut first, mut last) = (vec![0; piece], vec![0; piece]);
        // Landing piece by piece: some look finds the first piece in place and the last not
        // yet, a state that lasts ~63 ms; a put landing whole never shows it.
        let mut saw_partial = false;
        while s.space.load_u64(s.token).unwrap() == 0 {
            assert!(start.elapsed() < Duration::from_secs(5), "no signal");
            s.dst.read(0, &mut first).unwrap();
            s.dst.read(len - piece, &mut last).unwrap();
            saw_partial |= first == data[..piece] && last != data[len - piece..];
        }
        let signalled = start.elapsed();
        let model = link.message_time(len as u64);
        assert!(signalled >= model, "signal after {signalled:?}, before the model's {model:?}");
        assert!(saw_partial, "the put never showed its first piece without its last");
        assert_eq!(s.dst.snapshot(), data, "the pieces tile the put");
        writer.sync(pos).unwrap();
        assert_eq!(s.transport.completed(0).unwrap(), 2, "a put and a signal, however many pieces");
    });
}

#[test]
fn an_unpaced_connection_ignores_the_link_model() {
    within(30, || {
        let config = CopyEngineConfig { link: Some(LinkModel::new(500_000.0, None)), ..Default::default() };
        let s = setup(64, Duration::ZERO, config, false);
        let writer = FifoWriter::new(s.fifo.clone(), Some(Duration::from_secs(10)));
        let start = Instant::now();
        let pos = writer.push(command(FifoOp::PutSignalFlush, 3, 0, 0, 64)).unwrap();
        writer.sync(pos).unwrap();
        assert!(start.elapsed() < Duration::from_millis(400), "took {:?}", start.elapsed());
    });
}

#[test]
fn a_stalled_engine_fails_the_proxy_with_a_timeout_naming_the_peer_and_releases_the_writer() {
    within(30, || {
        let config = CopyEngineConfig { timeout: Duration::from_millis(200), ..Default::default() };
        let space = HostAddressSpace::new();
        let (src_addr, src) = space.alloc(64);
        let (dst_addr, dst) = space.alloc(64);
        let (token, _) = space.alloc(8);
        let transport = Arc::new(CopyEngineTransport::new(config).unwrap());
        transport.register_local(src_addr, 64, src).unwrap();
        let queue = HostCopyQueue::new(space.clone(), Duration::ZERO);
        queue.stall(true);
        transport.connect(0, link("rank 7", queue, token, vec![(0, dst_addr, 64)], dst, false)).unwrap();
        let fifo = HostFifo::new(8).unwrap();
        let service = start_service(transport.clone(), std::slice::from_ref(&fifo), ProxyConfig::default());
        let writer = FifoWriter::new(fifo, None);
        let pos = writer.push(command(FifoOp::PutFlush, 0, 0, 0, 64)).unwrap();
        assert!(matches!(writer.sync(pos), Err(FifoError::Stopped { code: 2, .. })));
        match service.shutdown() {
            Err(ProxyError::Transport(TransportError::PeerTimeout { peer, pending, .. })) => {
                assert_eq!(peer, "rank 7");
                assert_eq!(pending, 1);
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    });
}

/// Pushes `n` put-with-signal commands, command `i` copying `pattern(i, chunk)` from offset
/// `i * chunk` of rank A's memory to the same offset of rank B's.
fn push_puts_with_signals(s: &Setup, n: usize, chunk: usize) {
    let writer = FifoWriter::new(s.fifo.clone(), Some(Duration::from_secs(10)));
    for i in 0..n {
        s.src.write(i * chunk, &pattern(i, chunk)).unwrap();
        let off = (i * chunk) as u32;
        writer.push(command(FifoOp::PutSignal, 3, off, off, chunk as u32)).unwrap();
    }
}

#[test]
fn shutdown_right_after_the_pushes_waits_for_what_the_emulated_nic_still_holds() {
    within(60, || {
        for chaos in CHAOS {
            shutdown_right_after_the_pushes_waits_for_the_emulated_nic(chaos);
        }
    });
}

fn shutdown_right_after_the_pushes_waits_for_the_emulated_nic(chaos: Option<u64>) {
    const N: usize = 20;
    const CHUNK: usize = 1024;
    // α = 20 ms: every operation is still held by the pacer when the FIFO is empty.
    let config = CopyEngineConfig { link: Some(LinkModel::new(20_000.0, None)), chaos, ..Default::default() };
    let mut s = setup(N * CHUNK, Duration::ZERO, config, true);
    push_puts_with_signals(&s, N, CHUNK);
    let report = s.service.take().unwrap().shutdown().unwrap();
    assert_eq!(report.executed + report.abandoned, N as u64, "{report:?}");
    assert_eq!(s.space.load_u64(s.token).unwrap(), report.executed, "signals vs commands counted as executed");
    assert_eq!(report.executed, N as u64, "the drain had time for every command");
    for i in 0..N {
        let mut got = vec![0; CHUNK];
        s.dst.read(i * CHUNK, &mut got).unwrap();
        assert_eq!(got, pattern(i, CHUNK), "put {i}");
    }
}

#[test]
fn under_chaos_a_writer_spinning_on_the_token_sees_each_signal_only_after_its_data() {
    within(60, || {
        const N: usize = 32;
        const CHUNK: usize = 4096;
        for seed in 1..=4 {
            // α = 300 µs: each operation lands up to 1.2 ms later still, so puts overtake.
            let link = Some(LinkModel::new(300.0, None));
            let config = CopyEngineConfig { link, chaos: Some(seed), ..Default::default() };
            let s = setup(N * CHUNK, Duration::ZERO, config, true);
            push_puts_with_signals(&s, N, CHUNK);
            let start = Instant::now();
            let mut seen = 0;
            while seen < N {
                assert!(start.elapsed() < Duration::from_secs(10), "seed {seed}: token stuck at {seen}");
                let token = s.space.load_u64(s.token).unwrap() as usize;
                assert!(token <= N);
                for round in seen..token {
                    let mut got = vec![0; CHUNK];
                    s.dst.read(round * CHUNK, &mut got).unwrap();
                    assert_eq!(got, pattern(round, CHUNK), "seed {seed}: signal {} before put {round}", round + 1);
                }
                seen = token;
            }
            // A lone put and a flush behind it: the flush is done only once the put landed.
            let writer = FifoWriter::new(s.fifo.clone(), Some(Duration::from_secs(10)));
            s.src.write(0, &pattern(N, CHUNK)).unwrap();
            writer.push(command(FifoOp::Put, 3, 0, 0, CHUNK as u32)).unwrap();
            let flush = writer.push(command(FifoOp::Flush, 0, 0, 0, 0)).unwrap();
            writer.sync(flush).unwrap();
            let mut got = vec![0; CHUNK];
            s.dst.read(0, &mut got).unwrap();
            assert_eq!(got, pattern(N, CHUNK), "seed {seed}: the flush finished before the put landed");
            assert_eq!(s.transport.completed(0).unwrap(), 2 * N as u64 + 1);
            assert_eq!(s.service.unwrap().shutdown().unwrap().executed, N as u64 + 2);
        }
    });
}

/// Pushes `pairs` pairs of puts to one destination each (the first writes `pattern(2i)`, the
/// second `pattern(2i + 1)`) and a flush, and returns how many destinations kept the first
/// put's data: the earlier put landed last.
fn overtaken_puts(chaos: Option<u64>, pairs: usize, chunk: usize) -> usize {
    let link = Some(LinkModel::new(500.0, None));
    let config = CopyEngineConfig { link, chaos, ..Default::default() };
    let s = setup(2 * pairs * chunk, Duration::ZERO, config, true);
    let writer = FifoWriter::new(s.fifo.clone(), Some(Duration::from_secs(10)));
    for i in 0..2 * pairs {
        s.src.write(i * chunk, &pattern(i, chunk)).unwrap();
        let (src, dst) = ((i * chunk) as u32, (i / 2 * chunk) as u32);
        writer.push(command(FifoOp::Put, 3, src, dst, chunk as u32)).unwrap();
    }
    let flush = writer.push(command(FifoOp::Flush, 0, 0, 0, 0)).unwrap();
    writer.sync(flush).unwrap();
    (0..pairs)
        .filter(|&i| {
            let mut got = vec![0; chunk];
            s.dst.read(i * chunk, &mut got).unwrap();
            assert!(got == pattern(2 * i, chunk) || got == pattern(2 * i + 1, chunk), "pair {i}: torn data");
            got == pattern(2 * i, chunk)
        })
        .count()
}

#[test]
fn under_chaos_later_puts_land_before_earlier_ones_and_in_order_they_never_do() {
    within(60, || {
        assert_eq!(overtaken_puts(None, 16, 256), 0, "without chaos the emulated NIC keeps order");
        for seed in [1, 2, 3] {
            let overtaken = overtaken_puts(Some(seed), 16, 256);
            assert!(overtaken > 0, "seed {seed}: no put overtook the one before it");
        }
    });
}

#[test]
fn commands_a_stalled_engine_never_ran_are_abandoned_at_the_drain_deadline() {
    within(30, || {
        // The engine's timeout (5 s) is longer than the drain (1 s): the deadline ends it.
        let mut s = setup(1024, Duration::ZERO, CopyEngineConfig::default(), false);
        s.transport.for_each_queue(|q| q.stall(true));
        push_puts_with_signals(&s, 4, 256);
        let start = Instant::now();
        while s.fifo.tail().load(std::sync::atomic::Ordering::Acquire) < 4 {
            assert!(start.elapsed() < Duration::from_secs(10), "the proxy did not pop the commands");
            std::thread::sleep(Duration::from_millis(1));
        }
        let start = Instant::now();
        let report = s.service.take().unwrap().shutdown().unwrap();
        let drain = ProxyConfig::default().drain_timeout;
        assert!(start.elapsed() < drain + Duration::from_secs(1), "shutdown took {:?}", start.elapsed());
        assert_eq!(report, ShutdownReport { executed: 0, abandoned: 4 });
        assert_eq!(s.space.load_u64(s.token).unwrap(), 0);
    });
}

#[test]
fn commands_outside_registered_memory_are_errors_not_corruption() {
    within(30, || {
        for bad in
            [command(FifoOp::Put, 3, 0, 60, 8), command(FifoOp::Put, 4, 0, 0, 8), command(FifoOp::Put, 3, 60, 0, 8)]
        {
            let mut s = setup(64, Duration::ZERO, CopyEngineConfig::default(), false);
            let writer = FifoWriter::new(s.fifo.clone(), Some(Duration::from_secs(5)));
            writer.push(bad).unwrap();
            let err = s.service.take().unwrap();
            let start = Instant::now();
            while err.failure().is_none() {
                assert!(start.elapsed() < Duration::from_secs(5));
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(matches!(err.shutdown(), Err(ProxyError::Transport(TransportError::Memory { .. }))));
            assert_eq!(s.dst.snapshot(), vec![0; 64]);
        }
    });
}

#[test]
fn connections_are_checked_when_made() {
    let space = HostAddressSpace::new();
    let (token, keep) = space.alloc(16);
    let transport = CopyEngineTransport::new(CopyEngineConfig::default()).unwrap();
    let q = || HostCopyQueue::new(space.clone(), Duration::ZERO);
    let to = |token: u64| link("p", q(), token, vec![], keep.clone(), false);
    assert!(transport.connect(0, to(token + 4)).is_err(), "misaligned token");
    transport.connect(0, to(token)).unwrap();
    assert!(transport.connect(0, to(token)).is_err(), "connected twice");
    assert!(transport.connect(1024, to(token)).is_err());
    assert!(matches!(transport.completed(5), Err(TransportError::UnknownConnection { connection: 5, .. })));
    assert!(
        CopyEngineTransport::<HostCopyQueue>::new(CopyEngineConfig { max_in_flight: 1, ..Default::default() }).is_err()
    );
}

#[test]
fn a_busy_connection_shares_markers_and_an_idle_one_still_completes_each_command() {
    within(30, || {
        let space = HostAddressSpace::new();
        let (src_addr, src) = space.alloc(4096);
        let (dst_addr, dst) = space.alloc(4096);
        let (token, _) = space.alloc(8);
        let transport = CopyEngineTransport::new(CopyEngineConfig::default()).unwrap();
        transport.register_local(src_addr, 4096, src.clone()).unwrap();
        let queue = HostCopyQueue::new(space.clone(), Duration::from_micros(200));
        let marks = queue.mark_counter();
        transport.connect(0, link("rank 1", queue, token, vec![(0, dst_addr, 4096)], dst.clone(), false)).unwrap();
        let put = |i: u64| Op::Put { src_memory: 0, src_offset: i * 64, dst_memory: 0, dst_offset: i * 64, len: 64 };
        let await_completed = |ops: u64| {
            let start = Instant::now();
            while transport.completed(0).unwrap() < ops {
                assert!(start.elapsed() < Duration::from_secs(10), "stuck at {}", transport.completed(0).unwrap());
                std::thread::sleep(Duration::from_micros(100));
            }
        };
        // 64 commands back to back while the engine works through them: far fewer markers.
        for i in 0..64 {
            assert!(matches!(transport.submit(0, &[put(i), Op::Signal]).unwrap(), Submitted::Accepted { .. }));
        }
        await_completed(128);
        let busy = marks.load(std::sync::atomic::Ordering::Relaxed);
        assert!(busy <= 128 / 16 + 4, "{busy} markers for 64 commands");
        assert_eq!(space.load_u64(token).unwrap(), 64);
        // A lone command on an idle connection completes without any later submission.
        transport.submit(0, &[put(0), Op::Signal]).unwrap();
        await_completed(130);
        assert_eq!(space.load_u64(token).unwrap(), 65);
    });
}

/// The paced operations one round releases go to the queue coalesced: `n` commands of a put
/// and a signal, all due at once, become one copy and one store where the puts continue each
/// other in source and destination, `n` copies and one store where only the source does; the
/// data, the token, the completed count and the credits are those of the operations issued one
/// by one, in order and under chaos.
#[test]
fn a_rounds_contiguous_puts_become_one_copy_and_its_signals_one_store() {
    within(60, || {
        for chaos in CHAOS {
            for contiguous in [true, false] {
                a_rounds_puts_and_signals_coalesce(chaos, contiguous);
            }
        }
    });
}

fn a_rounds_puts_and_signals_coalesce(chaos: Option<u64>, contiguous: bool) {
    let (n, chunk) = (16u64, 1024u64);
    let space = HostAddressSpace::new();
    let (src_addr, src) = space.alloc((n * chunk) as usize);
    let (dst_addr, dst) = space.alloc((2 * n * chunk) as usize);
    let (token, _) = space.alloc(8);
    let alpha = Duration::from_millis(20);
    let model = Some(LinkModel::new(alpha.as_secs_f64() * 1e6, None));
    let transport = CopyEngineTransport::new(CopyEngineConfig { link: model, chaos, ..Default::default() }).unwrap();
    transport.register_local(src_addr, n * chunk, src.clone()).unwrap();
    let queue = HostCopyQueue::new(space.clone(), Duration::ZERO);
    transport.connect(0, link("rank 1", queue, token, vec![(3, dst_addr, 2 * n * chunk)], dst.clone(), true)).unwrap();
    let stride = if contiguous { chunk } else { 2 * chunk };
    for i in 0..n {
        src.write((i * chunk) as usize, &pattern(i as usize, chunk as usize)).unwrap();
        let put = Op::Put { src_memory: 0, src_offset: i * chunk, dst_memory: 3, dst_offset: i * stride, len: chunk };
        assert_eq!(transport.submit(0, &[put, Op::Signal]).unwrap(), Submitted::Accepted { last: 2 * i + 1 });
    }
    // Every operation is due by now (chaos adds at most 4α): the first poll releases them all
    // in one round (under chaos, the signals as their fence clears them).
    std::thread::sleep(6 * alpha);
    let start = Instant::now();
    while transport.completed(0).unwrap() < 2 * n {
        assert!(start.elapsed() < Duration::from_secs(10), "stuck at {}", transport.completed(0).unwrap());
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(transport.completed(0).unwrap(), 2 * n, "{chaos:?}");
    assert_eq!(transport.flow().in_flight(0), 0, "completion returned every credit");
    assert_eq!(space.load_u64(token).unwrap(), n, "the token counts every signal");
    for i in 0..n {
        let mut got = vec![0; chunk as usize];
        dst.read((i * stride) as usize, &mut got).unwrap();
        assert_eq!(got, pattern(i as usize, chunk as usize), "put {i} ({chaos:?}, contiguous: {contiguous})");
    }
    let mut executed = 0;
    transport.for_each_queue(|q| executed = q.executed());
    match (chaos, contiguous) {
        (None, true) => assert_eq!(executed, 2, "one copy and one store for {n} puts and signals"),
        (None, false) => assert_eq!(executed, n + 1, "a copy per put, one store"),
        _ => assert!(executed <= 2 * n, "{executed} queue operations for {} operations", 2 * n),
    }
}

/// Counter updates of `TransferCmd`s over the copy engine, in order and under the emulated
/// NIC's chaos: update `k` follows write `k`; even updates set counter 1 to `k / 2 + 1`, odd ones
/// add 1 to counter 0. A reader spinning on the counters must see both only grow and every
/// write an applied update announces in place; the final values are exact.
#[test]
fn counter_updates_land_after_their_writes_and_in_order_even_under_chaos() {
    within(60, || {
        const N: usize = 64;
        const CHUNK: usize = 1024;
        for chaos in CHAOS {
            let model = Some(LinkModel::new(300.0, None));
            let config = CopyEngineConfig { link: model, chaos, ..Default::default() };
            let space = HostAddressSpace::new();
            let (src_addr, src) = space.alloc(N * CHUNK);
            let (dst_addr, dst) = space.alloc(N * CHUNK);
            let (token, _) = space.alloc(8);
            let (counters, _) = space.alloc(8 * COUNTERS_PER_STREAM);
            let transport = Arc::new(CopyEngineTransport::new(config).unwrap());
            transport.register_local(src_addr, (N * CHUNK) as u64, src.clone()).unwrap();
            let queue = HostCopyQueue::new(space.clone(), Duration::ZERO);
            let remote = vec![(3, dst_addr, (N * CHUNK) as u64)];
            transport.connect(0, link("rank 1", queue, token, remote, dst.clone(), true)).unwrap();
            let bare = Op::Counter { imm: 0 };
            let refused = transport.submit(0, &[bare]).unwrap_err();
            assert!(matches!(refused, TransportError::Unsupported { connection: 0, .. }), "{refused}");
            transport.connect_counters(0, counters).unwrap();
            assert!(transport.connect_counters(0, counters).is_err(), "counters are set once");

            let handler = Arc::new(TransferHandler::new(0, transport.clone(), TransferConfig::default()).unwrap());
            handler.connect(0, TransferLink { peer: 1, src_memory: 0, dst_memory: 3 }).unwrap();
            let fifo = HostFifo::new(1024).unwrap();
            let service = ProxyService::builder(ProxyConfig::default())
                .handler(TRANSFER_FIFO_OP as u8, handler)
                .unwrap()
                .fifo(FifoReader::new(fifo.clone()).unwrap())
                .start()
                .unwrap();
            let writer = FifoWriter::new(fifo.clone(), Some(Duration::from_secs(10)));
            let transfer = |t: Transfer| TransferCmd::encode(t).unwrap().to_fifo_command();
            for k in 0..N {
                src.write(k * CHUNK, &pattern(k, CHUNK)).unwrap();
                let off = (k * CHUNK) as u32;
                writer
                    .push(transfer(Transfer::Write {
                        connection: 0,
                        src_offset: off,
                        dst_offset: off,
                        len: CHUNK as u32,
                    }))
                    .unwrap();
                let (counter, update) =
                    if k % 2 == 0 { (1, CounterUpdate::Set((k / 2 + 1) as u16)) } else { (0, CounterUpdate::Add(1)) };
                writer.push(transfer(Transfer::Counter { connection: 0, counter, update })).unwrap();
            }
            let start = Instant::now();
            let (mut adds, mut sets) = (0, 0);
            while adds < N / 2 || sets < N / 2 {
                assert!(start.elapsed() < Duration::from_secs(10), "{chaos:?}: counters stuck at {adds}, {sets}");
                let a = space.load_u64(counters).unwrap() as usize;
                let s = space.load_u64(counters + 8).unwrap() as usize;
                assert!(
                    a >= adds && s >= sets && a <= N / 2 && s <= N / 2,
                    "{chaos:?}: ({adds}, {sets}) then ({a}, {s})"
                );
                // Counter 0 at `a`: update 2a - 1 applied; counter 1 at `s`: update 2s - 2.
                let applied = (2 * a).max((2 * s).saturating_sub(1));
                for k in 0..applied {
                    let mut got = vec![0; CHUNK];
                    dst.read(k * CHUNK, &mut got).unwrap();
                    assert_eq!(got, pattern(k, CHUNK), "{chaos:?}: an update after write {k} landed before it");
                }
                (adds, sets) = (a, s);
            }
            let quiet = writer.push(transfer(Transfer::Quiet { connection: 0 })).unwrap();
            writer.sync(quiet).unwrap();
            assert_eq!(transport.completed(0).unwrap(), 2 * N as u64);
            assert_eq!(service.shutdown().unwrap().executed, 2 * N as u64 + 1);
        }
    });
}

/// A PortProxy with several FIFOs and threads (`WEFT_PROXY_FIFOS`, `WEFT_PROXY_THREADS`): two
/// connections to one peer, each pushed into its own FIFO by its own writer and served by its
/// own proxy thread, share the transport and the emulated NIC's pacer. Each connection's
/// signals still come after its own data, in order and under chaos, and its flush after its puts.
#[test]
fn two_threads_on_two_fifos_keep_each_connection_s_signals_after_its_data() {
    within(90, || {
        const N: usize = 24;
        const CHUNK: usize = 4096;
        for chaos in [None, Some(3), Some(0xFEED)] {
            let config = CopyEngineConfig { link: Some(LinkModel::new(200.0, None)), chaos, ..Default::default() };
            let space = HostAddressSpace::new();
            let transport = Arc::new(CopyEngineTransport::new(config).unwrap());
            let (src_addr, src) = space.alloc(2 * N * CHUNK);
            assert_eq!(transport.register_local(src_addr, (2 * N * CHUNK) as u64, src.clone()).unwrap(), 0);
            let mut ends = Vec::new();
            for connection in 0..2u16 {
                let (dst_addr, dst) = space.alloc(N * CHUNK);
                let (token, _) = space.alloc(8);
                let queue = HostCopyQueue::new(space.clone(), Duration::ZERO);
                let remote = vec![(3, dst_addr, (N * CHUNK) as u64)];
                transport.connect(connection, link("rank 1", queue, token, remote, dst.clone(), true)).unwrap();
                ends.push((dst, token, HostFifo::new(64).unwrap()));
            }
            let fifos: Vec<HostFifo> = ends.iter().map(|(_, _, f)| f.clone()).collect();
            let service =
                start_service(transport.clone(), &fifos, ProxyConfig { threads: 2, ..ProxyConfig::default() });
            let writers: Vec<_> = (0..2usize)
                .map(|c| {
                    let (fifo, src) = (fifos[c].clone(), src.clone());
                    std::thread::spawn(move || {
                        let writer = FifoWriter::new(fifo, Some(Duration::from_secs(20)));
                        for i in 0..N {
                            let data = pattern(c * N + i, CHUNK);
                            src.write((c * N + i) * CHUNK, &data).unwrap();
                            let (from, to) = (((c * N + i) * CHUNK) as u32, (i * CHUNK) as u32);
                            let put = command(FifoOp::PutSignal, 3, from, to, CHUNK as u32);
                            writer.push(on_connection(c as u16, put)).unwrap();
                        }
                        let at = writer.push(on_connection(c as u16, command(FifoOp::Flush, 0, 0, 0, 0))).unwrap();
                        writer.sync(at).unwrap();
                    })
                })
                .collect();
            // Spin on both tokens as two kernels would: every signal seen covers its data.
            let start = Instant::now();
            let mut seen = [0usize; 2];
            while seen != [N, N] {
                for (c, (dst, token, _)) in ends.iter().enumerate() {
                    assert!(
                        start.elapsed() < Duration::from_secs(20),
                        "{chaos:?}: connection {c} stuck at {}",
                        seen[c]
                    );
                    let value = space.load_u64(*token).unwrap() as usize;
                    assert!(value <= N);
                    for i in seen[c]..value {
                        let mut got = vec![0; CHUNK];
                        dst.read(i * CHUNK, &mut got).unwrap();
                        assert_eq!(
                            got,
                            pattern(c * N + i, CHUNK),
                            "{chaos:?}: connection {c}: signal {} before put {i}",
                            i + 1
                        );
                    }
                    seen[c] = value;
                }
            }
            for w in writers {
                w.join().unwrap();
            }
            let report = service.shutdown().unwrap();
            assert_eq!(report.executed, 2 * (N as u64 + 1), "{chaos:?}");
            for c in 0..2u16 {
                assert_eq!(transport.completed(c).unwrap(), 2 * N as u64, "{chaos:?}: connection {c}");
            }
        }
    });
}
