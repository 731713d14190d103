//! The verbs transport between two ranks over the software fabric.

use std::sync::Arc;
use std::time::Duration;

use super::soft::{self, SoftFabric, SoftNic};
use super::*;
use crate::proxy::transport::{HostInbox, HostMemory, Memory, MemoryTable};

/// One side: a NIC, its memory (index 0 locally and for the peer), its inbox.
struct Side {
    transport: IbTransport<SoftNic>,
    memory: Arc<HostMemory>,
    inbox: Arc<HostInbox>,
}

/// Ranks `a` and `b`, each with a 4 KiB memory; connection 3 on `a` and 5 on `b` share one
/// queue pair.
fn pair(config: IbConfig) -> (Arc<SoftFabric>, Side, Side) {
    pair_with(config, 3, 5, 5)
}

/// As [`pair`], but `a`'s signals name `b`'s connection `a_signals`.
fn pair_with(
    config: IbConfig,
    a_conn: ConnectionId,
    b_conn: ConnectionId,
    a_signals: ConnectionId,
) -> (Arc<SoftFabric>, Side, Side) {
    let fabric = SoftFabric::new();
    let (na, nb) = (fabric.nic(), fabric.nic());
    let (qa, qb) = fabric.connect(&na, &nb);
    let side = |nic: SoftNic| {
        let memory = Arc::new(HostMemory::new(4096));
        let (local, remote) = nic.register(memory.clone());
        let inbox = Arc::new(HostInbox::new(MemoryTable::new()));
        (IbTransport::new(nic, vec![local], inbox.clone(), config), memory, inbox, remote)
    };
    let (ta, ma, ia, ra) = side(na);
    let (tb, mb, ib, rb) = side(nb);
    let conn = |qp, remote_connection, peer: &str, remote| IbConnection {
        qp,
        remote_connection,
        peer: peer.into(),
        remote: vec![remote],
    };
    ta.add_connection(a_conn, conn(qa, a_signals, "rank 1", rb)).unwrap();
    tb.add_connection(b_conn, conn(qb, a_conn, "rank 0", ra)).unwrap();
    (fabric, Side { transport: ta, memory: ma, inbox: ia }, Side { transport: tb, memory: mb, inbox: ib })
}

fn put(src_offset: u64, dst_offset: u64, len: u64) -> Op {
    Op::Put { src_memory: 0, src_offset, dst_memory: 0, dst_offset, len }
}

#[test]
fn a_put_and_its_signal_land_in_order_and_raise_the_peers_token() {
    let (_f, a, b) = pair(IbConfig::default());
    a.memory.write(16, b"hello, verbs").unwrap();
    assert_eq!(a.transport.submit(3, &[put(16, 32, 12), Op::Signal]).unwrap(), Submitted::Accepted { last: 1 });
    assert_eq!(&b.memory.snapshot()[32..44], b"hello, verbs");
    assert_eq!(b.inbox.token(5), 0, "the token rises when the receiver's proxy polls");
    b.transport.progress().unwrap();
    assert_eq!(b.inbox.token(5), 1);
    assert_eq!(a.transport.completed(3).unwrap(), 0);
    a.transport.progress().unwrap();
    assert_eq!(a.transport.completed(3).unwrap(), 2);
    // And back, on the same queue pair.
    b.memory.write(0, b"pong").unwrap();
    b.transport.submit(5, &[put(0, 100, 4), Op::Signal]).unwrap();
    a.transport.progress().unwrap();
    assert_eq!((&a.memory.snapshot()[100..104], a.inbox.token(3)), (&b"pong"[..], 1));
}

#[test]
fn completions_polled_in_reverse_still_complete_in_ticket_order() {
    let (_f, a, b) = pair(IbConfig::default());
    a.transport.verbs().set_reverse_polls(true);
    a.transport.submit(3, &[put(0, 0, 8), put(8, 8, 8), Op::Signal]).unwrap();
    a.transport.progress().unwrap();
    assert_eq!(a.transport.completed(3).unwrap(), 3);
    b.transport.progress().unwrap();
    assert_eq!(b.inbox.token(5), 1);
}

#[test]
fn signals_beyond_the_posted_receives_wait_for_the_receiver_and_arrive_in_full() {
    let config = IbConfig { recv_depth: 2, max_in_flight: 16, ..IbConfig::default() };
    let (_f, a, b) = pair(config);
    for round in 0..6u8 {
        a.memory.write(usize::from(round), &[round + 1]).unwrap();
        a.transport.submit(3, &[put(u64::from(round), u64::from(round), 1), Op::Signal]).unwrap();
    }
    // Two receives were posted: two signals (and the puts before the third) went through.
    a.transport.progress().unwrap();
    assert_eq!(a.transport.completed(3).unwrap(), 5, "the third signal waits: receiver not ready");
    assert_eq!(&b.memory.snapshot()[..4], &[1, 2, 3, 0], "and so does every write behind it");
    for _ in 0..6 {
        b.transport.progress().unwrap();
    }
    assert_eq!(b.inbox.token(5), 6);
    assert_eq!(&b.memory.snapshot()[..6], &[1, 2, 3, 4, 5, 6]);
    a.transport.progress().unwrap();
    assert_eq!(a.transport.completed(3).unwrap(), 12);
}

#[test]
fn flow_control_and_bounds_are_enforced_without_failing_the_connection() {
    let (_f, a, _b) = pair(IbConfig { max_in_flight: 4, ..IbConfig::default() });
    assert!(matches!(a.transport.submit(3, &[put(0, 0, 100), put(0, 0, 1)]).unwrap(), Submitted::Accepted { .. }));
    assert!(matches!(a.transport.submit(3, &[put(0, 0, 1), put(0, 0, 1)]).unwrap(), Submitted::Accepted { .. }));
    assert_eq!(a.transport.submit(3, &[Op::Signal]).unwrap(), Submitted::Full);
    a.transport.progress().unwrap();
    assert_eq!(a.transport.submit(3, &[Op::Signal]).unwrap(), Submitted::Accepted { last: 4 });
    let beyond = a.transport.submit(3, &[put(0, 4000, 200)]);
    assert!(matches!(beyond, Err(TransportError::Memory { .. })), "beyond the remote region: {beyond:?}");
    assert!(matches!(a.transport.submit(3, &[put(0, 0, 1)]).unwrap(), Submitted::Accepted { .. }), "still usable");
    assert!(matches!(a.transport.submit(4, &[Op::Signal]), Err(TransportError::UnknownConnection { .. })));
}

#[test]
fn a_dead_peer_fails_the_connection_naming_it() {
    let (fabric, a, b) = pair(IbConfig::default());
    fabric.kill(b.transport.verbs());
    a.transport.submit(3, &[put(0, 0, 8), Op::Signal]).unwrap();
    a.transport.progress().unwrap();
    let err = a.transport.completed(3).unwrap_err();
    assert!(matches!(&err, TransportError::PeerLost { peer, .. } if peer == "rank 1"), "{err}");
    assert!(err.to_string().contains(soft::RETRY_EXCEEDED), "{err}");
    assert_eq!(a.transport.submit(3, &[Op::Signal]).unwrap_err(), err);
}

#[test]
fn a_signal_for_another_connection_is_a_protocol_error() {
    let (_f, a, b) = pair_with(IbConfig::default(), 3, 5, 6);
    a.transport.submit(3, &[Op::Signal]).unwrap();
    b.transport.progress().unwrap();
    assert_eq!(b.transport.completed(5).unwrap(), 0, "nothing of b's was outstanding: it owes nothing");
    let err = b.transport.submit(5, &[Op::Signal]).unwrap_err();
    assert!(matches!(&err, TransportError::Protocol { peer, .. } if peer == "rank 0"), "{err}");
    assert!(err.to_string().contains("connection 6 arrived on the queue pair of connection 5"), "{err}");
    assert_eq!(b.inbox.token(5) + b.inbox.token(6), 0, "no token moved");
}

#[test]
fn a_peer_that_never_posts_receives_is_a_timeout_naming_it() {
    let config = IbConfig { recv_depth: 0, timeout: Duration::from_millis(50), ..IbConfig::default() };
    let (_f, a, _b) = pair(config);
    a.transport.submit(3, &[Op::Signal]).unwrap();
    a.transport.progress().unwrap();
    std::thread::sleep(Duration::from_millis(80));
    a.transport.progress().unwrap();
    let err = a.transport.completed(3).unwrap_err();
    assert!(matches!(&err, TransportError::PeerTimeout { peer, pending: 1, .. } if peer == "rank 1"), "{err}");
}

#[test]
fn an_idle_connection_never_times_out() {
    let (_f, a, _b) = pair(IbConfig { timeout: Duration::from_millis(20), ..IbConfig::default() });
    a.transport.submit(3, &[put(0, 0, 8)]).unwrap();
    a.transport.progress().unwrap();
    std::thread::sleep(Duration::from_millis(40));
    a.transport.progress().unwrap();
    assert_eq!(a.transport.completed(3).unwrap(), 1);
}

#[test]
fn a_wrong_remote_key_fails_the_connection_naming_the_peer() {
    let fabric = SoftFabric::new();
    let (na, nb) = (fabric.nic(), fabric.nic());
    let (qa, _qb) = fabric.connect(&na, &nb);
    let memory: Arc<dyn Memory> = Arc::new(HostMemory::new(64));
    let (local, mut remote) = na.register(memory.clone());
    remote.rkey += 100;
    let inbox = Arc::new(HostInbox::new(MemoryTable::new()));
    let t = IbTransport::new(na, vec![local], inbox, IbConfig::default());
    t.add_connection(0, IbConnection { qp: qa, remote_connection: 0, peer: "rank 9".into(), remote: vec![remote] })
        .unwrap();
    t.submit(0, &[put(0, 0, 8), Op::Signal]).unwrap();
    t.progress().unwrap();
    let err = t.completed(0).unwrap_err();
    assert!(err.to_string().contains(soft::REMOTE_ACCESS) && err.to_string().contains("rank 9"), "{err}");
}

#[test]
fn connections_are_checked_when_added() {
    let fabric = SoftFabric::new();
    let (na, nb) = (fabric.nic(), fabric.nic());
    let (qa, _) = fabric.connect(&na, &nb);
    let t = IbTransport::new(na, vec![], Arc::new(HostInbox::new(MemoryTable::new())), IbConfig::default());
    let conn = |qp, remote_connection| IbConnection { qp, remote_connection, peer: "p".into(), remote: vec![] };
    t.add_connection(1, conn(qa, 1)).unwrap();
    let again = t.add_connection(1, conn(qa + 10, 1)).unwrap_err();
    assert!(again.to_string().contains("already connected"), "{again}");
    let shared_qp = t.add_connection(2, conn(qa, 1)).unwrap_err();
    assert!(shared_qp.to_string().contains("already carries connection 1"), "{shared_qp}");
    let foreign = t.add_connection(3, conn(qa + 1, 1)).unwrap_err();
    assert!(foreign.to_string().contains("not on this device"), "{foreign}");
    assert!(t.add_connection(4, conn(999, u16::MAX)).is_err());
    assert!(matches!(t.submit(3, &[Op::Signal]), Err(TransportError::UnknownConnection { .. })));
}

#[test]
fn a_retired_nic_releases_its_memories_and_fails_writes_towards_it() {
    let (fabric, a, b) = pair(IbConfig::default());
    let before = Arc::strong_count(&b.memory);
    fabric.retire(b.transport.verbs());
    assert_eq!(Arc::strong_count(&b.memory), before - 1, "the fabric dropped its reference");
    a.transport.submit(3, &[put(0, 0, 8), Op::Signal]).unwrap();
    a.transport.progress().unwrap();
    assert!(a.transport.completed(3).unwrap_err().to_string().contains(soft::RETRY_EXCEEDED));
}

#[test]
fn puts_beyond_the_largest_write_go_in_parts_and_complete_once() {
    let (_f, a, b) = pair(IbConfig { max_write: 1000, ..IbConfig::default() });
    let data: Vec<u8> = (0..2500u32).map(|i| (i * 7 + 3) as u8).collect();
    a.memory.write(100, &data).unwrap();
    a.transport.submit(3, &[put(100, 1000, 2500), Op::Signal]).unwrap();
    b.transport.progress().unwrap();
    assert_eq!((&b.memory.snapshot()[1000..3500], b.inbox.token(5)), (&data[..], 1));
    a.transport.progress().unwrap();
    assert_eq!(a.transport.completed(3).unwrap(), 2, "three writes and a signal: two operations");
    assert_eq!(a.transport.flow.in_flight(3), 0, "every credit returned");
}

#[test]
fn a_failed_connection_leaves_the_others_running() {
    let fabric = SoftFabric::new();
    let (na, nb, nc) = (fabric.nic(), fabric.nic(), fabric.nic());
    let (ab, _) = fabric.connect(&na, &nb);
    let (ac, _) = fabric.connect(&na, &nc);
    let memory = Arc::new(HostMemory::new(64));
    let (local, _) = na.register(memory.clone());
    let (_, rb) = nb.register(Arc::new(HostMemory::new(64)));
    let (_, rc) = nc.register(Arc::new(HostMemory::new(64)));
    let t = IbTransport::new(na, vec![local], Arc::new(HostInbox::new(MemoryTable::new())), IbConfig::default());
    let conn =
        |qp, peer: &str, remote| IbConnection { qp, remote_connection: 0, peer: peer.into(), remote: vec![remote] };
    t.add_connection(0, conn(ab, "rank 1", rb)).unwrap();
    t.add_connection(1, conn(ac, "rank 2", rc)).unwrap();
    fabric.kill(&nb);
    t.submit(0, &[put(0, 0, 8)]).unwrap();
    t.submit(1, &[put(0, 0, 8)]).unwrap();
    t.progress().unwrap();
    assert!(t.completed(0).unwrap_err().to_string().contains("rank 1"));
    assert_eq!(t.completed(1).unwrap(), 1);
    t.submit(1, &[put(8, 8, 8)]).unwrap();
    t.progress().unwrap();
    assert_eq!(t.completed(1).unwrap(), 2, "rank 2's connection goes on");
}

#[test]
fn shutdown_fails_the_peers_writes_promptly() {
    let (_f, a, b) = pair(IbConfig::default());
    b.transport.shutdown();
    a.transport.submit(3, &[put(0, 0, 8)]).unwrap();
    a.transport.progress().unwrap();
    assert!(a.transport.completed(3).unwrap_err().to_string().contains(soft::RETRY_EXCEEDED));
}

#[test]
fn a_removed_connection_drops_its_queue_pairs_completions() {
    let (_f, a, b) = pair(IbConfig::default());
    b.transport.remove_connection(5);
    a.transport.submit(3, &[Op::Signal]).unwrap();
    b.transport.progress().unwrap();
    assert!(matches!(b.transport.submit(5, &[Op::Signal]), Err(TransportError::UnknownConnection { .. })));
    assert_eq!(b.inbox.token(5), 0);
}

#[test]
fn deferred_delivery_lands_data_at_a_later_poll_and_still_in_order() {
    let (fabric, a, b) = pair(IbConfig::default());
    fabric.set_deferred(true);
    a.memory.write(0, b"abcdefgh").unwrap();
    a.transport.submit(3, &[put(0, 0, 4), put(4, 4, 4), Op::Signal]).unwrap();
    assert_eq!(&b.memory.snapshot()[..8], &[0; 8], "nothing moves at submission");
    let mut polls = 0;
    while b.inbox.token(5) == 0 {
        // Whenever the token shows, both puts must be in place.
        b.transport.progress().unwrap();
        polls += 1;
        assert!(polls < 10, "the signal never arrived");
    }
    assert_eq!(&b.memory.snapshot()[..8], b"abcdefgh");
    assert!(polls >= 3, "three writes, one per poll: {polls}");
    a.transport.progress().unwrap();
    assert_eq!(a.transport.completed(3).unwrap(), 3);
}
