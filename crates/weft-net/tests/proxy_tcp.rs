//! The proxy driven by host-memory FIFOs over the TCP transport on loopback: ordering with
//! reordered frames over several sockets, flushes, backpressure from a full FIFO and exhausted
//! credits, a dead or silent peer (an error naming it, no hang), shutdown with commands in
//! flight (drained to the peer, or reported abandoned when it cannot be), a receiver shutting
//! down right after a signal (it still acknowledges), unknown ops and per-op handlers, garbage,
//! truncated, oversized or misplaced frames from either end (refused, naming the sender), an
//! endpoint stopped by a dead peer (its other peers are told which). Every test runs under a
//! deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;
use common::{start_service as service, within};

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weft_net::fifo::{FifoError, FifoReader, FifoWriter, HostFifo};
use weft_net::proxy::transport::Op;
use weft_net::proxy::transport::tcp::{TcpConfig, TcpTransport};
use weft_net::proxy::{
    CommandHandler, Handled, HostInbox, HostMemory, Inbox, Memory, MemoryError, MemoryTable, ProxyConfig, ProxyError,
    ProxyService, ShutdownReport, Submitted, Transport, TransportError,
};
use weft_types::{FifoCommand, FifoCommandFields, FifoOp};

fn command(op: FifoOp, connection: u16, src_offset: u32, dst_offset: u32, size: u32) -> FifoCommand {
    FifoCommand::encode(FifoCommandFields {
        op: op as u8,
        connection,
        src_memory: 0,
        dst_memory: 0,
        src_offset,
        dst_offset,
        size,
    })
    .unwrap()
}

/// A sender (memory 0 = `src`) and a receiver (memory 0 = `dst`, tokens in `inbox`), with
/// connections `0..connections` from sender to receiver.
struct Pair {
    src: Arc<HostMemory>,
    dst: Arc<HostMemory>,
    inbox: Arc<HostInbox>,
    sender: Arc<TcpTransport>,
    receiver: Option<TcpTransport>,
}

fn pair(config: TcpConfig, len: usize, connections: u16) -> Pair {
    pair_pausing(config, len, connections, Duration::ZERO)
}

/// A [`pair`] whose receiver pauses `pause` after applying each signal.
fn pair_pausing(config: TcpConfig, len: usize, connections: u16, pause: Duration) -> Pair {
    let src = Arc::new(HostMemory::new(len));
    let dst = Arc::new(HostMemory::new(len));
    let src_table = MemoryTable::new();
    src_table.register(src.clone()).unwrap();
    let dst_table = MemoryTable::new();
    dst_table.register(dst.clone()).unwrap();
    let inbox = Arc::new(HostInbox::new(dst_table));
    let slow = Arc::new(SlowSignals { inbox: inbox.clone(), pause });
    let receiver = TcpTransport::bind(config.clone(), "receiver", Arc::new(MemoryTable::new()), slow).unwrap();
    let unused_inbox = Arc::new(HostInbox::new(MemoryTable::new()));
    let sender = TcpTransport::bind(config, "sender", Arc::new(src_table), unused_inbox).unwrap();
    for c in 0..connections {
        sender.connect(c, receiver.local_addr(), c, "receiver").unwrap();
    }
    Pair { src, dst, inbox, sender: Arc::new(sender), receiver: Some(receiver) }
}

fn pattern(round: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (round * 31 + i * 7 + 1) as u8).collect()
}

#[test]
fn signals_follow_their_data_although_frames_arrive_reordered_over_several_sockets() {
    within(60, || {
        let config = TcpConfig {
            streams: 3,
            max_frame_payload: 1000,
            shuffle_window: 8,
            shuffle_seed: 7,
            max_in_flight: 8,
            ..TcpConfig::default()
        };
        const ROUNDS: usize = 40;
        const CHUNK: usize = 5000;
        let p = pair(config, ROUNDS * CHUNK, 1);
        let fifo = HostFifo::new(16).unwrap();
        let svc = service(p.sender.clone(), std::slice::from_ref(&fifo), ProxyConfig::default());
        let writer = FifoWriter::new(fifo, Some(Duration::from_secs(20)));

        // Checker: whenever the token reads t, the data of rounds 0..t must already be in place.
        let (inbox, dst) = (p.inbox.clone(), p.dst.clone());
        let checker = std::thread::spawn(move || {
            let start = Instant::now();
            let mut checked = 0;
            while checked < ROUNDS {
                assert!(start.elapsed() < Duration::from_secs(30), "signals stopped at {checked}");
                let t = inbox.token(0) as usize;
                if t > checked {
                    let bytes = dst.snapshot();
                    for r in checked..t {
                        assert_eq!(&bytes[r * CHUNK..(r + 1) * CHUNK], &pattern(r, CHUNK)[..], "round {r}");
                    }
                    checked = t;
                }
                std::thread::yield_now();
            }
        });
        for r in 0..ROUNDS {
            p.src.write(r * CHUNK, &pattern(r, CHUNK)).unwrap();
            let off = (r * CHUNK) as u32;
            writer.push(command(FifoOp::Put, 0, off, off, CHUNK as u32)).unwrap();
            writer.push(command(FifoOp::Signal, 0, 0, 0, 0)).unwrap();
        }
        checker.join().unwrap();
        assert_eq!(p.inbox.token(0), ROUNDS as u64);
        let report = svc.shutdown().unwrap();
        assert_eq!(report.executed, 2 * ROUNDS as u64);
        assert!(p.receiver.as_ref().unwrap().inbound_errors().is_empty());
    });
}

#[test]
fn a_flush_is_consumed_only_after_its_data_is_applied() {
    within(30, || {
        let p = pair(TcpConfig { streams: 2, max_frame_payload: 256, ..TcpConfig::default() }, 1 << 16, 1);
        let fifo = HostFifo::new(8).unwrap();
        let svc = service(p.sender.clone(), std::slice::from_ref(&fifo), ProxyConfig::default());
        let writer = FifoWriter::new(fifo, Some(Duration::from_secs(10)));
        for r in 0..10 {
            let data = pattern(r, 4096);
            p.src.write(0, &data).unwrap();
            let pos = writer.push(command(FifoOp::PutSignalFlush, 0, 0, 4096, 4096)).unwrap();
            writer.sync(pos).unwrap();
            // Consumed means applied at the peer: no waiting on the token needed.
            assert_eq!(&p.dst.snapshot()[4096..8192], &data[..]);
            assert_eq!(p.inbox.token(0), r as u64 + 1);
            // A bare flush completes at once when nothing is outstanding.
            let pos = writer.push(command(FifoOp::Flush, 0, 0, 0, 0)).unwrap();
            writer.sync(pos).unwrap();
        }
        svc.shutdown().unwrap();
    });
}

#[test]
fn a_full_fifo_and_exhausted_credits_slow_the_writer_down_without_losing_commands() {
    within(60, || {
        let config = TcpConfig { max_in_flight: 2, window_frames: 4, max_frame_payload: 64, ..TcpConfig::default() };
        let p = pair(config, 1 << 16, 1);
        let fifo = HostFifo::new(2).unwrap();
        let svc = service(p.sender.clone(), std::slice::from_ref(&fifo), ProxyConfig::default());
        let writer = FifoWriter::new(fifo.clone(), Some(Duration::from_secs(20)));
        let sender = p.sender.clone();
        let max_seen = Arc::new(AtomicU64::new(0));
        let (m, f) = (max_seen.clone(), fifo.clone());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let sampler = std::thread::spawn(move || {
            let mut ring_full = false;
            while !s2.load(Ordering::Acquire) {
                m.fetch_max(sender.flow().in_flight(0), Ordering::AcqRel);
                // Positions handed out beyond the two slots mean a writer waited on a full ring.
                ring_full |= f.head() > 2 + writer_tail(&f);
                std::thread::yield_now();
            }
            ring_full
        });
        const N: u64 = 300;
        for i in 0..N {
            let off = (i % 64) as u32 * 512;
            writer.push(command(FifoOp::PutSignal, 0, off, off, 512)).unwrap();
        }
        assert!(p.inbox.wait_token(0, N, Duration::from_secs(30)), "token {}", p.inbox.token(0));
        stop.store(true, Ordering::Release);
        let ring_was_full = sampler.join().unwrap();
        assert!(max_seen.load(Ordering::Acquire) <= 2, "flow control exceeded: {}", max_seen.load(Ordering::Acquire));
        assert!(ring_was_full, "the writer never met a full ring");
        assert_eq!(svc.shutdown().unwrap().executed, N);
    });
}

/// The tail as the writer sees it (positions below it are consumed).
fn writer_tail(fifo: &HostFifo) -> u64 {
    use weft_net::fifo::FifoMemory;
    fifo.tail().load(Ordering::Acquire)
}

#[test]
fn a_peer_that_dies_fails_the_proxy_with_an_error_naming_it_and_releases_the_writer() {
    within(30, || {
        let mut p = pair(TcpConfig { timeout: Duration::from_secs(2), ..TcpConfig::default() }, 1 << 12, 1);
        let fifo = HostFifo::new(4).unwrap();
        let svc = service(p.sender.clone(), std::slice::from_ref(&fifo), ProxyConfig::default());
        let writer = FifoWriter::new(fifo, None);
        let pos = writer.push(command(FifoOp::PutSignalFlush, 0, 0, 0, 64)).unwrap();
        writer.sync(pos).unwrap();
        drop(p.receiver.take());
        // No timeout on the writer: only the proxy's stop word can release it.
        let mut outcome: Result<(), FifoError> = Ok(());
        for _ in 0..1000 {
            outcome = writer.push(command(FifoOp::PutSignalFlush, 0, 0, 0, 64)).and_then(|pos| writer.sync(pos));
            if outcome.is_err() {
                break;
            }
        }
        assert!(matches!(outcome, Err(FifoError::Stopped { code: 2, .. })), "{outcome:?}");
        let err = svc.shutdown().unwrap_err();
        assert!(
            matches!(&err, ProxyError::Transport(TransportError::PeerLost { peer, .. }) if peer.starts_with("receiver@")),
            "{err}"
        );
        assert!(err.to_string().contains("receiver@127.0.0.1:"), "{err}");
    });
}

/// A sender connected (connection 0) to a peer called "silent" that accepts the connection and
/// never reads or acknowledges anything; the socket keeps the connection open while held.
fn sender_to_a_silent_peer(timeout: Duration) -> (TcpTransport, std::net::TcpStream) {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let keep = std::thread::spawn(move || silent.accept().map(|(s, _)| s));
    let table = MemoryTable::new();
    table.register(Arc::new(HostMemory::new(4096))).unwrap();
    let config = TcpConfig { timeout, ..TcpConfig::default() };
    let t =
        TcpTransport::bind(config, "sender", Arc::new(table), Arc::new(HostInbox::new(MemoryTable::new()))).unwrap();
    t.connect(0, addr, 0, "silent").unwrap();
    (t, keep.join().unwrap().unwrap())
}

#[test]
fn a_peer_that_stops_answering_is_a_timeout_naming_it() {
    within(30, || {
        let (t, _socket) = sender_to_a_silent_peer(Duration::from_millis(300));
        let t: Arc<dyn Transport> = Arc::new(t);
        let fifo = HostFifo::new(4).unwrap();
        let svc = service(t, std::slice::from_ref(&fifo), ProxyConfig::default());
        let writer = FifoWriter::new(fifo, None);
        let pos = writer.push(command(FifoOp::PutFlush, 0, 0, 0, 128)).unwrap();
        assert!(matches!(writer.sync(pos), Err(FifoError::Stopped { code: 2, .. })));
        let err = svc.shutdown().unwrap_err();
        assert!(matches!(&err, ProxyError::Transport(TransportError::PeerTimeout { .. })), "{err}");
        assert!(err.to_string().contains("silent@"), "{err}");
    });
}

#[test]
fn shutdown_with_commands_in_flight_drains_stops_writers_and_returns() {
    within(30, || {
        let p = pair(TcpConfig { max_in_flight: 4, ..TcpConfig::default() }, 1 << 16, 1);
        let fifo = HostFifo::new(8).unwrap();
        let svc = service(
            p.sender.clone(),
            std::slice::from_ref(&fifo),
            ProxyConfig { drain_timeout: Duration::from_millis(500), ..ProxyConfig::default() },
        );
        let writer = FifoWriter::new(fifo, None);
        let w = writer.clone();
        let pushing = std::thread::spawn(move || {
            let mut pushed = 0u64;
            loop {
                match w.push(command(FifoOp::PutSignal, 0, 0, 0, 1024)) {
                    Ok(_) => pushed += 1,
                    Err(e) => return (pushed, e),
                }
            }
        });
        while p.inbox.token(0) < 50 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let report = svc.shutdown().unwrap();
        let (pushed, err) = pushing.join().unwrap();
        assert!(matches!(err, FifoError::Stopped { code: 1, .. }), "{err}");
        assert!(report.executed >= 50 && report.executed <= pushed, "{report:?}, pushed {pushed}");
        assert!(matches!(writer.sync(pushed + 5), Err(FifoError::Stopped { .. })));
    });
}

#[test]
fn shutdown_does_not_wait_forever_for_a_flush_that_cannot_complete() {
    within(30, || {
        let (t, _socket) = sender_to_a_silent_peer(Duration::from_secs(60));
        let fifo = HostFifo::new(4).unwrap();
        let svc = service(
            Arc::new(t),
            std::slice::from_ref(&fifo),
            ProxyConfig { drain_timeout: Duration::from_millis(200), ..ProxyConfig::default() },
        );
        let writer = FifoWriter::new(fifo, None);
        let pos = writer.push(command(FifoOp::PutFlush, 0, 0, 0, 128)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!writer.poll(pos));
        let start = Instant::now();
        let report = svc.shutdown().unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(report.abandoned, 1);
        assert!(matches!(writer.sync(pos), Err(FifoError::Stopped { code: 1, .. })));
    });
}

#[test]
fn shutdown_right_after_the_pushes_delivers_every_command_it_counts_as_executed() {
    within(60, || {
        const N: usize = 100;
        const CHUNK: usize = 1024;
        // A receiver pausing 2 ms per signal and a window of 4 frames: when the FIFO is empty,
        // about 30 popped commands are still queued in the sender, most not even sent.
        let config = TcpConfig { window_frames: 4, ..TcpConfig::default() };
        let p = pair_pausing(config, N * CHUNK, 1, Duration::from_millis(2));
        let fifo = HostFifo::new(128).unwrap();
        let drain = ProxyConfig { drain_timeout: Duration::from_secs(20), ..ProxyConfig::default() };
        let svc = service(p.sender.clone(), std::slice::from_ref(&fifo), drain);
        let writer = FifoWriter::new(fifo, Some(Duration::from_secs(10)));
        for i in 0..N {
            p.src.write(i * CHUNK, &pattern(i, CHUNK)).unwrap();
            let off = (i * CHUNK) as u32;
            writer.push(command(FifoOp::PutSignal, 0, off, off, CHUNK as u32)).unwrap();
        }
        let report = svc.shutdown().unwrap();
        assert_eq!(report.executed + report.abandoned, N as u64, "{report:?}");
        assert_eq!(p.inbox.token(0), report.executed, "signals delivered vs commands counted as executed");
        assert_eq!(report.executed, N as u64, "the drain had time for every command");
        let bytes = p.dst.snapshot();
        for i in 0..N {
            assert_eq!(&bytes[i * CHUNK..(i + 1) * CHUNK], &pattern(i, CHUNK)[..], "put {i}");
        }
    });
}

/// Pushes `n` put-with-signal commands on connection 0 and waits until the proxy popped
/// `popped` of them.
fn push_and_await_pops(fifo: &HostFifo, n: u64, popped: u64) {
    let writer = FifoWriter::new(fifo.clone(), Some(Duration::from_secs(10)));
    for _ in 0..n {
        writer.push(command(FifoOp::PutSignal, 0, 0, 0, 128)).unwrap();
    }
    let start = Instant::now();
    while writer_tail(fifo) < popped {
        assert!(start.elapsed() < Duration::from_secs(10), "popped {} of {popped}", writer_tail(fifo));
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn commands_stranded_at_a_silent_peer_are_all_abandoned_and_shutdown_keeps_the_deadline() {
    within(30, || {
        let (t, _socket) = sender_to_a_silent_peer(Duration::from_secs(60));
        let fifo = HostFifo::new(64).unwrap();
        let drain = Duration::from_millis(300);
        let svc = service(
            Arc::new(t),
            std::slice::from_ref(&fifo),
            ProxyConfig { drain_timeout: drain, ..ProxyConfig::default() },
        );
        // 64 credits: 32 commands are popped into the transport, 8 stay in the FIFO.
        push_and_await_pops(&fifo, 40, 32);
        let start = Instant::now();
        let report = svc.shutdown().unwrap();
        assert!(start.elapsed() < drain + Duration::from_secs(1), "shutdown took {:?}", start.elapsed());
        assert_eq!(report, ShutdownReport { executed: 0, abandoned: 40 });
    });
}

#[test]
fn a_peer_lost_while_draining_ends_the_drain_at_once_with_the_error() {
    within(30, || {
        let (t, socket) = sender_to_a_silent_peer(Duration::from_secs(60));
        let fifo = HostFifo::new(64).unwrap();
        let svc = service(
            Arc::new(t),
            std::slice::from_ref(&fifo),
            ProxyConfig { drain_timeout: Duration::from_secs(20), ..ProxyConfig::default() },
        );
        // Every command popped (exactly the credits): only the drain sees the failure.
        push_and_await_pops(&fifo, 32, 32);
        drop(socket);
        let start = Instant::now();
        let err = svc.shutdown().unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5), "shutdown took {:?}", start.elapsed());
        assert!(
            matches!(&err, ProxyError::Transport(TransportError::PeerLost { peer, .. }) if peer.starts_with("silent@")),
            "{err}"
        );
    });
}

#[derive(Debug, Default)]
struct Counter(AtomicU64);

impl CommandHandler for Counter {
    fn handle(&self, command: &FifoCommand) -> Result<Handled, ProxyError> {
        self.0.fetch_add(u64::from(command.fields().size), Ordering::AcqRel);
        Ok(Handled::Done)
    }
}

#[test]
fn several_fifos_on_two_threads_with_a_handler_per_op_and_an_unknown_op_stops_the_service() {
    within(30, || {
        let p = pair(TcpConfig::default(), 1 << 12, 4);
        let fifos: Vec<HostFifo> = (0..4).map(|_| HostFifo::new(4).unwrap()).collect();
        let counter = Arc::new(Counter::default());
        let mut b = ProxyService::builder(ProxyConfig { threads: 2, ..ProxyConfig::default() })
            .transport(p.sender.clone())
            .handler(9, counter.clone())
            .unwrap();
        assert!(ProxyService::builder(ProxyConfig::default()).handler(16, counter.clone()).is_err());
        for f in &fifos {
            b = b.fifo(FifoReader::new(f.clone()).unwrap());
        }
        let svc = b.start().unwrap();
        let writers: Vec<FifoWriter> = fifos.iter().map(|f| FifoWriter::new(f.clone(), None)).collect();
        let custom = FifoCommand::encode(FifoCommandFields { op: 9, size: 5, ..Default::default() }).unwrap();
        for round in 0..20 {
            for (c, w) in writers.iter().enumerate() {
                w.push(command(FifoOp::Signal, c as u16, 0, 0, 0)).unwrap();
                if round % 4 == 0 {
                    w.push(custom).unwrap();
                }
            }
        }
        for c in 0..4 {
            assert!(p.inbox.wait_token(c, 20, Duration::from_secs(10)), "connection {c}");
        }
        let start = Instant::now();
        while counter.0.load(Ordering::Acquire) < 4 * 5 * 5 {
            assert!(start.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(1));
        }
        let unknown = FifoCommand::encode(FifoCommandFields { op: 12, ..Default::default() }).unwrap();
        let pos = writers[1].push(unknown).unwrap();
        assert!(matches!(writers[1].sync(pos), Err(FifoError::Stopped { code: 2, .. })));
        // A push that finds a free slot does not read the stop word (it stays off PCIe on a
        // GPU); the writer's next wait reports the failed service.
        let lost = writers[3].push(custom).unwrap();
        assert!(matches!(writers[3].sync(lost), Err(FifoError::Stopped { code: 2, .. })));
        let err = svc.shutdown().unwrap_err();
        assert!(matches!(err, ProxyError::UnknownOp { fifo: 1, op: 12, .. }), "{err}");
    });
}

#[test]
fn commands_outside_registered_memory_are_errors_not_corruption() {
    within(30, || {
        let p = pair(TcpConfig::default(), 1024, 1);
        let fifo = HostFifo::new(4).unwrap();
        let svc = service(p.sender.clone(), std::slice::from_ref(&fifo), ProxyConfig::default());
        let writer = FifoWriter::new(fifo, None);
        let pos = writer.push(command(FifoOp::Put, 0, 1000, 0, 100)).unwrap();
        assert!(writer.sync(pos).is_err());
        let err = svc.shutdown().unwrap_err();
        assert!(matches!(err, ProxyError::Transport(TransportError::Memory { .. })), "{err}");
    });
}

#[test]
fn the_receiver_refuses_writes_outside_its_memory_and_the_sender_reports_it() {
    within(30, || {
        // Destination memory of 1024 bytes, source of 4096: the put fits the source only.
        let src = Arc::new(HostMemory::new(4096));
        let src_table = MemoryTable::new();
        src_table.register(src).unwrap();
        let dst_table = MemoryTable::new();
        dst_table.register(Arc::new(HostMemory::new(1024))).unwrap();
        let receiver = TcpTransport::bind(
            TcpConfig::default(),
            "receiver",
            Arc::new(MemoryTable::new()),
            Arc::new(HostInbox::new(dst_table)),
        )
        .unwrap();
        let sender = TcpTransport::bind(
            TcpConfig::default(),
            "sender",
            Arc::new(src_table),
            Arc::new(HostInbox::new(MemoryTable::new())),
        )
        .unwrap();
        sender.connect(0, receiver.local_addr(), 0, "receiver").unwrap();
        let fifo = HostFifo::new(4).unwrap();
        let svc = service(Arc::new(sender), std::slice::from_ref(&fifo), ProxyConfig::default());
        let writer = FifoWriter::new(fifo, None);
        let pos = writer.push(command(FifoOp::PutFlush, 0, 0, 512, 2048)).unwrap();
        assert!(writer.sync(pos).is_err());
        let err = svc.shutdown().unwrap_err();
        assert!(err.to_string().contains("receiver@"), "{err}");
        assert!(!receiver.inbound_errors().is_empty());
    });
}

/// A memory whose reads fail, as a staged device memory does when its copy fails or times out.
#[derive(Debug)]
struct Failing;

impl Memory for Failing {
    fn len(&self) -> usize {
        1 << 16
    }
    fn read(&self, _: usize, _: &mut [u8]) -> Result<(), MemoryError> {
        Err(MemoryError::Device { detail: "the copy out of the GPU timed out".into() })
    }
    fn write(&self, _: usize, _: &[u8]) -> Result<(), MemoryError> {
        Ok(())
    }
}

#[test]
fn a_source_memory_that_fails_fails_the_connection_with_its_reason() {
    within(30, || {
        let config = TcpConfig { timeout: Duration::from_secs(5), ..TcpConfig::default() };
        let inbox = Arc::new(HostInbox::new(MemoryTable::new()));
        let receiver = TcpTransport::bind(config.clone(), "receiver", Arc::new(MemoryTable::new()), inbox).unwrap();
        let table = MemoryTable::new();
        table.register(Arc::new(Failing)).unwrap();
        let sender =
            TcpTransport::bind(config, "sender", Arc::new(table), Arc::new(HostInbox::new(MemoryTable::new())))
                .unwrap();
        sender.connect(0, receiver.local_addr(), 0, "receiver").unwrap();
        let put = weft_net::proxy::transport::Op::Put {
            src_memory: 0,
            src_offset: 0,
            dst_memory: 0,
            dst_offset: 0,
            len: 100,
        };
        sender.submit(0, &[put]).unwrap();
        let start = Instant::now();
        let err = loop {
            match sender.completed(0) {
                Err(e) => break e,
                Ok(_) => {
                    assert!(start.elapsed() < Duration::from_secs(10), "the failed read was not reported");
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        };
        assert!(err.to_string().contains("the copy out of the GPU timed out"), "{err}");
        sender.shutdown();
        receiver.shutdown();
    });
}

/// A host inbox that pauses after each signal, before the receiver acknowledges it: a slow
/// receiver, and the moment when the signal's observer may already be shutting its endpoint
/// down.
#[derive(Debug)]
struct SlowSignals {
    inbox: Arc<HostInbox>,
    pause: Duration,
}

impl Inbox for SlowSignals {
    fn write(&self, memory: u8, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        self.inbox.write(memory, offset, data)
    }
    fn signal(&self, connection: u16) -> Result<(), MemoryError> {
        self.inbox.signal(connection)?;
        if !self.pause.is_zero() {
            std::thread::sleep(self.pause);
        }
        Ok(())
    }
}

#[test]
fn a_receiver_shutting_down_right_after_a_signal_still_acknowledges_it() {
    within(30, || {
        let config = TcpConfig { timeout: Duration::from_secs(3), ..TcpConfig::default() };
        let dst = MemoryTable::new();
        dst.register(Arc::new(HostMemory::new(64))).unwrap();
        let inbox = Arc::new(SlowSignals { inbox: Arc::new(HostInbox::new(dst)), pause: Duration::from_millis(200) });
        let receiver =
            TcpTransport::bind(config.clone(), "receiver", Arc::new(MemoryTable::new()), inbox.clone()).unwrap();
        let src = MemoryTable::new();
        src.register(Arc::new(HostMemory::new(64))).unwrap();
        let unused = Arc::new(HostInbox::new(MemoryTable::new()));
        let sender = TcpTransport::bind(config, "sender", Arc::new(src), unused).unwrap();
        sender.connect(0, receiver.local_addr(), 0, "receiver").unwrap();
        let put = weft_net::proxy::Op::Put { src_memory: 0, src_offset: 0, dst_memory: 0, dst_offset: 0, len: 64 };
        sender.submit(0, &[put, weft_net::proxy::Op::Signal]).unwrap();
        // The signal's observer sees the token and shuts its endpoint down at once.
        assert!(inbox.inbox.wait_token(0, 1, Duration::from_secs(5)));
        receiver.shutdown();
        let start = Instant::now();
        loop {
            match sender.completed(0) {
                Ok(2) => break,
                Ok(_) => assert!(start.elapsed() < Duration::from_secs(5), "the acknowledgement never came"),
                Err(e) => panic!("the sender lost the connection before its acknowledgement: {e}"),
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // The closed connection owes nothing, but takes no more work; work it took before
        // the close was noticed is outstanding for good, an error.
        let start = Instant::now();
        let mut accepted = 0;
        while sender.submit(0, &[weft_net::proxy::Op::Signal]).is_ok() {
            accepted += 1;
            assert!(start.elapsed() < Duration::from_secs(5), "the closed connection still takes work");
            std::thread::sleep(Duration::from_millis(1));
        }
        match sender.completed(0) {
            Ok(done) => assert!(accepted == 0 && done == 2, "accepted {accepted}, completed {done}"),
            Err(_) => assert!(accepted > 0, "an error with nothing outstanding"),
        }
    });
}

/// Connects to `addr`, writes `bytes`, and waits (bounded) for the other side to close; returns
/// this end's address, by which the receiver names it until it has said hello.
fn send_and_expect_refusal(addr: std::net::SocketAddr, bytes: &[u8]) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let local = stream.local_addr().unwrap();
    stream.write_all(bytes).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let mut reply = Vec::new();
    if let Err(e) = stream.read_to_end(&mut reply) {
        assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "the receiver kept the connection open");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    local
}

#[test]
fn garbage_truncated_and_oversized_frames_are_refused_naming_their_sender_and_other_connections_go_on() {
    use weft_net::proxy::transport::frame::{Frame, encode_header};
    within(30, || {
        let p = pair(TcpConfig { timeout: Duration::from_secs(2), ..TcpConfig::default() }, 1 << 12, 1);
        let receiver = p.receiver.as_ref().unwrap();
        let addr = receiver.local_addr();
        let hello = |name: &str| Frame::Hello { connection: 9, stream: 0, streams: 1, name: name.into() }.encode();

        // Not a proxy frame at all, before any hello: named by its address.
        let http = send_and_expect_refusal(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        // A header announcing 1 GiB after a hello: refused before anything is allocated.
        let oversized = [hello("oversized"), encode_header(2, 1 << 30).to_vec()].concat();
        send_and_expect_refusal(addr, &oversized);
        // Half a signal frame, then the sender goes away.
        let signal = Frame::Signal { seq: 0 }.encode();
        let truncated = [hello("truncated"), signal[..signal.len() - 3].to_vec()].concat();
        {
            use std::io::Write;
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream.write_all(&truncated).unwrap();
        }
        // An acknowledgement where data is expected.
        let misplaced = [hello("misplaced"), Frame::Ack { next: 1 }.encode()].concat();
        send_and_expect_refusal(addr, &misplaced);

        let deadline = Instant::now() + Duration::from_secs(5);
        // After its hello a sender is named as it named itself (a transport's name is
        // `name@listen address`).
        let expected = [format!("{http}: "), "oversized: ".into(), "truncated: ".into(), "misplaced: ".into()];
        let errors = loop {
            let errors = receiver.inbound_errors();
            if expected.iter().all(|who| errors.iter().any(|e| e.starts_with(who.as_str()))) {
                break errors;
            }
            assert!(Instant::now() < deadline, "not every sender is named: {errors:?}");
            std::thread::sleep(Duration::from_millis(10));
        };
        for error in &errors {
            println!("receiver: {error}");
        }

        // The real sender's connection still carries data and signals.
        let data = pattern(1, 256);
        p.src.write(0, &data).unwrap();
        let put = Op::Put { src_memory: 0, src_offset: 0, dst_memory: 0, dst_offset: 64, len: 256 };
        assert!(matches!(p.sender.submit(0, &[put, Op::Signal]).unwrap(), Submitted::Accepted { .. }));
        assert!(p.inbox.wait_token(0, 1, Duration::from_secs(5)));
        assert_eq!(&p.dst.snapshot()[64..320], &data[..]);
    });
}

#[test]
fn a_receiver_that_answers_garbage_fails_the_sender_with_an_error_naming_it() {
    use std::io::{Read, Write};
    within(30, || {
        let timeout = Duration::from_secs(2);
        let liar = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = liar.local_addr().unwrap();
        let fake = std::thread::spawn(move || {
            let (mut stream, _) = liar.accept().unwrap();
            let mut hello = [0u8; 16];
            stream.read_exact(&mut hello).unwrap();
            stream.write_all(b"\x00garbage where acknowledgements belong").unwrap();
            stream
        });
        let table = MemoryTable::new();
        table.register(Arc::new(HostMemory::new(4096))).unwrap();
        let config = TcpConfig { timeout, ..TcpConfig::default() };
        let t = TcpTransport::bind(config, "sender", Arc::new(table), Arc::new(HostInbox::new(MemoryTable::new())))
            .unwrap();
        t.connect(0, addr, 0, "liar").unwrap();
        let started = Instant::now();
        let put = Op::Put { src_memory: 0, src_offset: 0, dst_memory: 0, dst_offset: 0, len: 64 };
        // The garbage may be read before the put is submitted (the submit fails) or after (its
        // completion does): either way the error names the liar.
        let error = match t.submit(0, &[put]) {
            Err(e) => e,
            Ok(_) => loop {
                match t.completed(0) {
                    Err(e) => break e,
                    Ok(_) => {
                        assert!(started.elapsed() < timeout + Duration::from_secs(1), "no error from a lying receiver");
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            },
        };
        println!("sender: {error} (after {:?})", started.elapsed());
        assert!(error.to_string().contains(&format!("liar@{addr}")), "{error}");
        drop(fake.join().unwrap());
    });
}

/// An endpoint with nothing to send or receive, called `name`.
fn endpoint(name: &str) -> TcpTransport {
    let table = MemoryTable::new();
    table.register(Arc::new(HostMemory::new(64))).unwrap();
    let config = TcpConfig { timeout: Duration::from_secs(2), ..TcpConfig::default() };
    TcpTransport::bind(config, name, Arc::new(table), Arc::new(HostInbox::new(MemoryTable::new()))).unwrap()
}

/// Waits (bounded) until connection `c` of `t` has failed; returns the failure.
fn await_failure(t: &TcpTransport, c: u16) -> TransportError {
    let start = Instant::now();
    loop {
        if let Some(e) = t.failure(c).unwrap() {
            return e;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "connection {c} never failed");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn an_endpoint_stopped_by_a_dead_peer_tells_its_other_peers_which_peer_died() {
    within(30, || {
        // Rank 0 sends to rank 1 (its connection 1); rank 2 sends to rank 0 (its connection 0).
        let rank0 = endpoint("rank 0");
        let rank1 = endpoint("rank 1");
        let rank2 = endpoint("rank 2");
        rank0.connect(1, rank1.local_addr(), 0, "rank 1").unwrap();
        rank2.connect(0, rank0.local_addr(), 2, "rank 0").unwrap();
        // A signal through: rank 0 has accepted rank 2's connection and read its hello.
        rank2.submit(0, &[Op::Signal]).unwrap();
        let start = Instant::now();
        while rank2.completed(0).unwrap() < 1 {
            assert!(start.elapsed() < Duration::from_secs(5), "rank 0 never acknowledged the signal");
            std::thread::sleep(Duration::from_millis(1));
        }
        let rank1_addr = rank1.local_addr();
        drop(rank1);
        let cause = await_failure(&rank0, 1);
        assert!(cause.to_string().contains(&format!("rank 1@{rank1_addr}")), "{cause}");
        rank0.shutdown();
        let text = await_failure(&rank2, 0).to_string();
        assert!(text.contains(&format!("rank 0@{}", rank0.local_addr())), "{text}");
        assert!(text.contains(&format!("rank 1@{rank1_addr}")), "{text}");
        // Nothing was outstanding: the close costs rank 2 none of its completed work.
        assert_eq!(rank2.completed(0).unwrap(), 1);
    });
}

#[test]
fn an_endpoint_shut_down_cleanly_closes_its_peers_connections_without_blame() {
    within(30, || {
        let rank0 = endpoint("rank 0");
        let rank2 = endpoint("rank 2");
        rank2.connect(0, rank0.local_addr(), 2, "rank 0").unwrap();
        rank0.shutdown();
        let seen = await_failure(&rank2, 0);
        // A close or a reset, depending on what the socket still held: a lost peer, no reason.
        assert!(matches!(&seen, TransportError::PeerLost { peer, .. } if peer.starts_with("rank 0@")), "{seen}");
    });
}
