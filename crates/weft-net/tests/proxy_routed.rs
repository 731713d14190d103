//! One proxy serving peers over two transports, as a PortProxy does with peers inside and
//! outside its node: a host-memory FIFO drained into a `RoutedTransport` whose connection 0 goes
//! through the (simulated) copy engine and connection 1 over TCP on loopback. Memories are
//! registered after the transports started (a proxy registers them as channels are made).
//! Every test runs under a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;
use common::{start_service, within};

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_net::fifo::{FifoError, FifoWriter, HostFifo};
use weft_net::proxy::transport::ce::{CopyEngineConfig, CopyEngineTransport, PeerLink};
use weft_net::proxy::transport::routed::RoutedTransport;
use weft_net::proxy::transport::sim::{HostAddressSpace, HostCopyQueue};
use weft_net::proxy::transport::tcp::{TcpConfig, TcpTransport};
use weft_net::proxy::{HostInbox, HostMemory, Memory, MemoryTable, ProxyConfig, ProxyError, ProxyService};
use weft_types::{FifoCommand, FifoCommandFields, FifoOp};

const LEN: usize = 1 << 16;
const CHUNK: usize = 4096;
const NODE_PEER: u16 = 0;
const NET_PEER: u16 = 1;

fn command(op: FifoOp, connection: u16, offset: usize) -> FifoCommand {
    FifoCommand::encode(FifoCommandFields {
        op: op as u8,
        connection,
        src_memory: 0,
        dst_memory: 0,
        src_offset: offset as u32,
        dst_offset: offset as u32,
        size: CHUNK as u32,
    })
    .unwrap()
}

fn pattern(round: usize) -> Vec<u8> {
    (0..CHUNK).map(|i| (i * 13 + round * 5 + 3) as u8).collect()
}

/// Rank A's proxy (memory 0 = `src`) with connection 0 to a peer in its node (memory `node_dst`
/// behind the simulated copy engine, token at `node_token`) and connection 1 over TCP to a peer
/// in another node (memory 0 = `net_dst`, tokens in `net_inbox`).
struct World {
    src: Arc<HostMemory>,
    space: Arc<HostAddressSpace>,
    node_dst: Arc<HostMemory>,
    node_token: u64,
    net_dst: Arc<HostMemory>,
    net_inbox: Arc<HostInbox>,
    net_peer: Option<TcpTransport>,
    fifo: HostFifo,
    service: Option<ProxyService>,
}

fn world(tcp: TcpConfig) -> World {
    let space = HostAddressSpace::new();
    let (src_addr, src) = space.alloc(LEN);
    let (node_dst_addr, node_dst) = space.alloc(LEN);
    let (node_token, _) = space.alloc(8);

    // Transports first, with empty memory tables.
    let copy_engine = Arc::new(CopyEngineTransport::new(CopyEngineConfig::default()).unwrap());
    let sources = Arc::new(MemoryTable::new());
    let unused = Arc::new(HostInbox::new(MemoryTable::new()));
    let net = Arc::new(TcpTransport::bind(tcp.clone(), "rank A", sources.clone(), unused).unwrap());
    let net_inbox = Arc::new(HostInbox::new(MemoryTable::new()));
    let net_peer = TcpTransport::bind(tcp, "rank B", Arc::new(MemoryTable::new()), net_inbox.clone()).unwrap();
    let routes = Arc::new(RoutedTransport::new(vec![copy_engine.clone(), net.clone()]));
    let fifo = HostFifo::new(64).unwrap();
    let service = start_service(routes.clone(), std::slice::from_ref(&fifo), ProxyConfig::default());

    // Then memories and connections, while the proxy runs.
    assert_eq!(copy_engine.register_local(src_addr, LEN as u64, src.clone()).unwrap(), 0);
    assert_eq!(sources.register(src.clone()).unwrap(), 0);
    let net_dst = Arc::new(HostMemory::new(LEN));
    assert_eq!(net_inbox.memories().register(net_dst.clone()).unwrap(), 0);
    let queue = HostCopyQueue::new(space.clone(), Duration::from_micros(100));
    let link = PeerLink {
        peer: "rank C".into(),
        queue,
        token: node_token,
        remote: vec![(0, node_dst_addr, LEN as u64)],
        keep: node_dst.clone(),
        paced: false,
    };
    copy_engine.connect(NODE_PEER, link).unwrap();
    routes.route(NODE_PEER, 0).unwrap();
    net.connect(NET_PEER, net_peer.local_addr(), NET_PEER, "rank B").unwrap();
    routes.route(NET_PEER, 1).unwrap();
    World {
        src,
        space,
        node_dst,
        node_token,
        net_dst,
        net_inbox,
        net_peer: Some(net_peer),
        fifo,
        service: Some(service),
    }
}

fn tcp_config() -> TcpConfig {
    TcpConfig { streams: 2, max_frame_payload: 1000, timeout: Duration::from_secs(3), ..TcpConfig::default() }
}

#[test]
fn each_peer_gets_its_data_before_its_signals_through_its_own_transport() {
    within(60, || {
        let mut w = world(tcp_config());
        let writer = FifoWriter::new(w.fifo.clone(), Some(Duration::from_secs(10)));
        let rounds = LEN / CHUNK;
        for round in 0..rounds {
            w.src.write(round * CHUNK, &pattern(round)).unwrap();
            // Even rounds to the node peer, odd rounds over the network.
            let connection = if round % 2 == 0 { NODE_PEER } else { NET_PEER };
            writer.push(command(FifoOp::PutSignal, connection, round * CHUNK)).unwrap();
        }
        let flush = writer.push(command(FifoOp::Flush, NET_PEER, 0)).unwrap();
        writer.sync(flush).unwrap();
        // The flush is consumed once the network peer applied everything before it.
        assert_eq!(w.net_inbox.token(NET_PEER), rounds as u64 / 2);
        let start = Instant::now();
        while w.space.load_u64(w.node_token).unwrap() < rounds as u64 / 2 {
            assert!(start.elapsed() < Duration::from_secs(10), "the node peer's token is stuck");
            std::thread::sleep(Duration::from_micros(100));
        }
        for round in 0..rounds {
            let dst = if round % 2 == 0 { &w.node_dst } else { &w.net_dst };
            let mut got = vec![0; CHUNK];
            dst.read(round * CHUNK, &mut got).unwrap();
            assert_eq!(got, pattern(round), "round {round}");
            // Each chunk reached only its own peer.
            let other = if round % 2 == 0 { &w.net_dst } else { &w.node_dst };
            other.read(round * CHUNK, &mut got).unwrap();
            assert!(got.iter().all(|&b| b == 0), "round {round} leaked to the other peer");
        }
        let report = w.service.take().unwrap().shutdown().unwrap();
        assert_eq!(report.executed, rounds as u64 + 1);
    });
}

#[test]
fn a_dead_network_peer_fails_the_proxy_naming_it_and_releases_the_writer() {
    within(60, || {
        let mut w = world(tcp_config());
        let writer = FifoWriter::new(w.fifo.clone(), Some(Duration::from_secs(20)));
        w.src.write(0, &pattern(0)).unwrap();
        let first = writer.push(command(FifoOp::PutSignalFlush, NET_PEER, 0)).unwrap();
        writer.sync(first).unwrap();
        drop(w.net_peer.take());
        // Keep pushing until the proxy notices; the writer must be released with an error.
        let outcome = (0..10_000).try_for_each(|_| {
            let pos = writer.push(command(FifoOp::PutSignalFlush, NET_PEER, 0))?;
            writer.sync(pos)
        });
        assert!(matches!(outcome, Err(FifoError::Stopped { .. })), "{outcome:?}");
        let error = w.service.take().unwrap().shutdown().unwrap_err();
        assert!(matches!(error, ProxyError::Transport(_)), "{error}");
        assert!(error.to_string().contains("rank B"), "{error}");
    });
}
