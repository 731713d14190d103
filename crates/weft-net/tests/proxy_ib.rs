//! Two proxies driven by host-memory FIFOs over the verbs transport on the software RC fabric
//! (feature `ib`): both ranks put and signal each other at once through few posted receives,
//! with deferred delivery and puts in several writes, every signal follows its data; a peer whose NIC dies fails the proxy with an error naming it
//! and releases the writer. Every test runs under a deadline.
#![cfg(feature = "ib")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;
use common::{start_service as service, within};

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_net::fifo::{FifoError, FifoWriter, HostFifo};
use weft_net::proxy::transport::ib::soft::{RETRY_EXCEEDED, SoftFabric, SoftNic};
use weft_net::proxy::transport::ib::{IbConfig, IbConnection, IbTransport};
use weft_net::proxy::{HostInbox, HostMemory, Memory, MemoryTable, ProxyConfig, ProxyError, TransportError};
use weft_types::{FifoCommand, FifoCommandFields, FifoOp};

const CHUNK: usize = 3000;
const ROUNDS: usize = 50;

fn command(op: FifoOp, offset: usize, size: usize) -> FifoCommand {
    let offset = offset as u32;
    FifoCommand::encode(FifoCommandFields {
        op: op as u8,
        connection: 0,
        src_memory: 0,
        dst_memory: 0,
        src_offset: offset,
        dst_offset: offset,
        size: size as u32,
    })
    .unwrap()
}

fn pattern(rank: usize, round: usize) -> Vec<u8> {
    (0..CHUNK).map(|i| (rank * 101 + round * 31 + i * 7 + 1) as u8).collect()
}

/// A rank: its memory (sent from and written into), its inbox and its transport.
#[derive(Debug)]
struct Rank {
    memory: Arc<HostMemory>,
    inbox: Arc<HostInbox>,
    transport: Arc<IbTransport<SoftNic>>,
}

/// Two ranks whose connection 0 shares one queue pair; `recv_depth` receives per queue pair.
fn ranks(fabric: &Arc<SoftFabric>, config: IbConfig) -> [Rank; 2] {
    let nics = [fabric.nic(), fabric.nic()];
    let (qa, qb) = fabric.connect(&nics[0], &nics[1]);
    let memories = [Arc::new(HostMemory::new(2 * ROUNDS * CHUNK)), Arc::new(HostMemory::new(2 * ROUNDS * CHUNK))];
    let regions = [nics[0].register(memories[0].clone()), nics[1].register(memories[1].clone())];
    let mut out = Vec::new();
    for (rank, nic) in nics.into_iter().enumerate() {
        let inbox = Arc::new(HostInbox::new(MemoryTable::new()));
        let transport = IbTransport::new(nic, vec![regions[rank].0], inbox.clone(), config);
        let peer = 1 - rank;
        let qp = if rank == 0 { qa } else { qb };
        let conn =
            IbConnection { qp, remote_connection: 0, peer: format!("rank {peer}"), remote: vec![regions[peer].1] };
        transport.add_connection(0, conn).unwrap();
        out.push(Rank { memory: memories[rank].clone(), inbox, transport: Arc::new(transport) });
    }
    out.try_into().unwrap()
}

#[test]
fn both_ranks_put_and_signal_at_once_and_every_signal_follows_its_data() {
    within(60, || {
        let fabric = SoftFabric::new();
        // Writes land at later polls of either proxy, interleaved with the other direction.
        fabric.set_deferred(true);
        let config = IbConfig { recv_depth: 3, max_in_flight: 8, max_write: 1024, ..IbConfig::default() };
        let ranks = ranks(&fabric, config);
        let mut services = Vec::new();
        let mut senders = Vec::new();
        let mut checkers = Vec::new();
        for (rank, r) in ranks.iter().enumerate() {
            let fifo = HostFifo::new(8).unwrap();
            services.push(service(r.transport.clone(), std::slice::from_ref(&fifo), ProxyConfig::default()));
            // Rank r writes its rounds into the peer's half `rank` of the memory.
            let (memory, writer) = (r.memory.clone(), FifoWriter::new(fifo, Some(Duration::from_secs(20))));
            senders.push(std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    let offset = (rank * ROUNDS + round) * CHUNK;
                    memory.write(offset, &pattern(rank, round)).unwrap();
                    writer.push(command(FifoOp::Put, offset, CHUNK)).unwrap();
                    writer.push(command(FifoOp::Signal, 0, 0)).unwrap();
                }
            }));
            // Whenever rank r's token reads t, the peer's rounds 0..t must be in its memory.
            let (inbox, memory, peer) = (r.inbox.clone(), r.memory.clone(), 1 - rank);
            checkers.push(std::thread::spawn(move || {
                let start = Instant::now();
                let mut checked = 0;
                while checked < ROUNDS {
                    assert!(start.elapsed() < Duration::from_secs(30), "rank {rank}: signals stopped at {checked}");
                    let t = inbox.token(0) as usize;
                    assert!(t <= ROUNDS, "rank {rank}: {t} signals for {ROUNDS} rounds");
                    let bytes = memory.snapshot();
                    for round in checked..t {
                        let offset = (peer * ROUNDS + round) * CHUNK;
                        assert_eq!(
                            &bytes[offset..offset + CHUNK],
                            &pattern(peer, round)[..],
                            "rank {rank} round {round}"
                        );
                    }
                    checked = t;
                    std::thread::yield_now();
                }
            }));
        }
        for t in senders.into_iter().chain(checkers) {
            t.join().unwrap();
        }
        for s in services {
            let report = s.shutdown().unwrap();
            assert_eq!(report.executed, 2 * ROUNDS as u64);
        }
        for r in &ranks {
            assert_eq!(r.inbox.token(0), ROUNDS as u64);
        }
    });
}

#[test]
fn a_peer_whose_nic_dies_fails_the_proxy_naming_it_and_releases_the_writer() {
    within(30, || {
        let fabric = SoftFabric::new();
        let [a, b] = ranks(&fabric, IbConfig::default());
        let fifo = HostFifo::new(4).unwrap();
        let svc = service(a.transport.clone(), std::slice::from_ref(&fifo), ProxyConfig::default());
        let writer = FifoWriter::new(fifo, None);
        let pos = writer.push(command(FifoOp::PutSignalFlush, 0, 64)).unwrap();
        writer.sync(pos).unwrap();
        fabric.kill(b.transport.verbs());
        // No timeout on the writer: only the proxy's stop word can release it.
        let mut outcome: Result<(), FifoError> = Ok(());
        for _ in 0..1000 {
            outcome = writer.push(command(FifoOp::PutSignalFlush, 0, 64)).and_then(|pos| writer.sync(pos));
            if outcome.is_err() {
                break;
            }
        }
        assert!(matches!(outcome, Err(FifoError::Stopped { code: 2, .. })), "{outcome:?}");
        let err = svc.shutdown().unwrap_err();
        assert!(
            matches!(&err, ProxyError::Transport(TransportError::PeerLost { peer, .. }) if peer == "rank 1"),
            "{err}"
        );
        assert!(err.to_string().contains(RETRY_EXCEEDED), "{err}");
    });
}
