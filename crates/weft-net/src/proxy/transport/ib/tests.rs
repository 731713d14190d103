//! The verbs transport between two ranks over the software fabric.

use std::sync::Arc;
use std::time::Duration;

use weft_types::CounterUpdate;

use super::soft::{self, SoftFabric, SoftNic};
use super::*;
use crate::proxy::counters::{CounterConfig, CounterError};
use crate::proxy::immediate::{CounterImmediate, wire_seq};
use crate::proxy::ordering::Arrival;
use crate::proxy::transport::reorder::ReorderCounters;
use crate::proxy::transport::{HostInbox, HostMemory, Memory, MemoryError, MemoryTable};

/// One side: a NIC, its memory (index 0 locally and for the peer), its inbox.
struct Side {
    transport: Arc<IbTransport<SoftNic>>,
    memory: Arc<HostMemory>,
    inbox: Arc<HostInbox>,
    arrivals: Arc<Arrivals>,
}

/// A [`HostInbox`] that records the wire sequence number of every counter update in the order
/// the updates arrive.
#[derive(Debug)]
struct Arrivals {
    inbox: Arc<HostInbox>,
    seqs: std::sync::Mutex<Vec<u8>>,
}

impl Arrivals {
    fn seqs(&self) -> Vec<u8> {
        self.seqs.lock().unwrap().clone()
    }
}

impl Inbox for Arrivals {
    fn write(&self, memory: u8, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        self.inbox.write(memory, offset, data)
    }
    fn signal(&self, connection: ConnectionId) -> Result<(), MemoryError> {
        self.inbox.signal(connection)
    }
    fn counter(&self, connection: ConnectionId, imm: u32, now: Instant) -> Result<Arrival, CounterError> {
        self.seqs.lock().unwrap().push(CounterImmediate::decode(imm).seq);
        self.inbox.counter(connection, imm, now)
    }
    fn expire_counters(&self, connection: ConnectionId, now: Instant) -> Result<(), CounterError> {
        self.inbox.expire_counters(connection, now)
    }
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
        let arrivals = Arc::new(Arrivals { inbox: inbox.clone(), seqs: Default::default() });
        let transport = Arc::new(IbTransport::new(nic, vec![local], arrivals.clone(), config));
        (Side { transport, memory, inbox, arrivals }, remote)
    };
    let (a, ra) = side(na);
    let (b, rb) = side(nb);
    a.transport.add_connection(a_conn, connection(qa, a_signals, "rank 1", rb)).unwrap();
    b.transport.add_connection(b_conn, connection(qb, a_conn, "rank 0", ra)).unwrap();
    (fabric, a, b)
}

/// A connection over queue pair `qp` to `peer`, whose inbox counts it as `remote_connection`
/// and whose memory `remote` its puts write.
fn connection(qp: u32, remote_connection: ConnectionId, peer: &str, remote: RemoteRegion) -> IbConnection {
    IbConnection { qp, remote_connection, peer: peer.into(), remote: vec![remote] }
}

fn put(src_offset: u64, dst_offset: u64, len: u64) -> Op {
    Op::Put { src_memory: 0, src_offset, dst_memory: 0, dst_offset, len }
}

/// The `logical`-th counter update of a stream (counting from 0): `update` of `counter`.
fn counter(logical: u64, counter: u16, update: CounterUpdate) -> Op {
    let imm = CounterImmediate { seq: wire_seq(logical), counter, update }.encode().unwrap();
    Op::Counter { imm }
}

/// The updates of the counter tests: update `k` follows the 8-byte put at `8 * k`; even ones
/// add `k + 1` to counter 0, odd ones set counter 1 to `100 * k`, every third adds -1 to
/// counter 2 (wrapping below zero), so a lost, repeated or reordered update shows in the
/// values.
fn update(k: u64) -> (u16, CounterUpdate) {
    match k {
        k if k % 3 == 2 => (2, CounterUpdate::Add(-1)),
        k if k % 2 == 0 => (0, CounterUpdate::Add(k as i16 + 1)),
        k => (1, CounterUpdate::Set(100 * k as u16)),
    }
}

/// Counters 0..3 after the first `n` updates, applied in order.
fn values_after(n: u64) -> [u64; 3] {
    let mut values = [0u64; 3];
    for k in 0..n {
        let (c, u) = update(k);
        values[usize::from(c)] = u.apply(values[usize::from(c)]);
    }
    values
}

/// Put `k` (8 bytes of `k + 1` at `8 * k`, written into `a`'s memory first) and update `k`.
fn put_and_update(a: &Side, k: u64) -> [Op; 2] {
    a.memory.write(8 * k as usize, &[k as u8 + 1; 8]).unwrap();
    let (c, u) = update(k);
    [put(8 * k, 8 * k, 8), counter(k, c, u)]
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
    a.transport.progress().unwrap();
    let told = a.transport.submit(3, &[]).unwrap_err();
    assert!(matches!(&told, TransportError::Protocol { peer, connection: 3, .. } if peer == "rank 1"), "{told}");
    assert!(told.to_string().contains("a signal arrived on the queue pair of another connection"), "{told}");
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

#[test]
fn counter_updates_land_in_order_after_the_puts_they_follow() {
    let (fabric, a, b) = pair(IbConfig::default());
    let stream = b.inbox.register_counters(5, 0, CounterConfig::default()).unwrap();
    fabric.set_deferred(true);
    const UPDATES: u64 = 12;
    for k in 0..UPDATES {
        a.transport.submit(3, &put_and_update(&a, k)).unwrap();
    }
    let mut polls = 0;
    while stream.stream().applied() < UPDATES {
        b.transport.progress().unwrap();
        polls += 1;
        assert!(polls < 100, "after {polls} polls {} updates applied", stream.stream().applied());
        // Whatever prefix of the updates is applied, the puts before it are in place.
        let (applied, values) = stream.stream().snapshot();
        assert_eq!(values[..3], values_after(applied), "after {applied} updates");
        let memory = b.memory.snapshot();
        for k in 0..applied as usize {
            assert_eq!(memory[8 * k..8 * k + 8], [k as u8 + 1; 8], "update {k} landed before its put");
        }
    }
    assert!(polls >= 2 * UPDATES, "one work request per poll: {polls}");
    assert_eq!([stream.load(0), stream.load(1), stream.load(2)], values_after(UPDATES));
    assert_eq!(b.arrivals.seqs(), (0..UPDATES as u8).collect::<Vec<_>>(), "each arrived once, in order");
    assert_eq!(b.inbox.token(5), 0, "a counter update is no signal");
    a.transport.progress().unwrap();
    assert_eq!(a.transport.completed(3).unwrap(), 2 * UPDATES);
    assert_eq!(a.transport.flow.in_flight(3), 0, "every credit returned");
}

#[test]
fn signals_and_counter_updates_share_the_receives_and_keep_their_kinds() {
    // Two receives: signals and counter updates take turns waiting for the receiver.
    let config = IbConfig { recv_depth: 2, max_in_flight: 64, ..IbConfig::default() };
    let (_f, a, b) = pair(config);
    let stream = b.inbox.register_counters(5, 0, CounterConfig::default()).unwrap();
    const ROUNDS: u64 = 6;
    for k in 0..ROUNDS {
        let [p, c] = put_and_update(&a, k);
        let ops: &[Op] = if k % 2 == 0 { &[p, Op::Signal, c] } else { &[p, c, Op::Signal] };
        a.transport.submit(3, ops).unwrap();
    }
    for _ in 0..2 * ROUNDS {
        b.transport.progress().unwrap();
    }
    assert_eq!(b.inbox.token(5), ROUNDS, "every signal raised the token");
    assert_eq!(stream.stream().applied(), ROUNDS, "every counter update reached the stream");
    assert_eq!([stream.load(0), stream.load(1), stream.load(2)], values_after(ROUNDS));
    assert_eq!(b.arrivals.seqs().len() as u64, ROUNDS, "no signal was taken for a counter update");
    a.transport.progress().unwrap();
    assert_eq!(a.transport.completed(3).unwrap(), 3 * ROUNDS);
    assert!(b.transport.submit(5, &[Op::Signal]).is_ok(), "the receiving connection is healthy");
}

#[test]
fn counter_updates_reordered_on_the_way_are_applied_in_order() {
    let (_f, a, b) = pair(IbConfig::default());
    let stream = b.inbox.register_counters(5, 0, CounterConfig { window: 8, ..CounterConfig::default() }).unwrap();
    let reorder = ReorderCounters::new(a.transport.clone(), 42, None);
    const UPDATES: u64 = 40;
    // Rounds of one window each: the aid releases a round's updates in a random order.
    for round in (0..UPDATES).collect::<Vec<_>>().chunks(8) {
        for &k in round {
            let [p, c] = put_and_update(&a, k);
            reorder.submit(3, &[p]).unwrap();
            reorder.submit(3, &[c]).unwrap();
        }
        reorder.progress().unwrap();
        b.transport.progress().unwrap();
        let done = round[round.len() - 1] + 1;
        assert_eq!(stream.stream().applied(), done);
        assert_eq!([stream.load(0), stream.load(1), stream.load(2)], values_after(done));
    }
    let seqs = b.arrivals.seqs();
    assert_eq!(seqs.len() as u64, UPDATES);
    assert!(seqs.windows(2).any(|w| w[0] > w[1]), "nothing arrived out of order, the test proves nothing: {seqs:?}");
    reorder.progress().unwrap();
    assert_eq!(reorder.completed(3).unwrap(), 2 * UPDATES);
}

#[test]
fn a_lost_counter_update_fails_the_receiving_connection_naming_the_peer_and_the_sequence() {
    let (_f, a, b) = pair(IbConfig::default());
    let config = CounterConfig { window: 8, gap_timeout: Duration::from_millis(50) };
    let stream = b.inbox.register_counters(5, 0, config).unwrap();
    // The update of sequence 3 never leaves rank 0.
    let reorder = ReorderCounters::new(a.transport.clone(), 7, Some(3));
    for k in 0..6 {
        let [p, c] = put_and_update(&a, k);
        reorder.submit(3, &[p]).unwrap();
        reorder.submit(3, &[c]).unwrap();
    }
    reorder.progress().unwrap();
    let start = Instant::now();
    while b.transport.submit(5, &[]).is_ok() {
        assert!(start.elapsed() < Duration::from_secs(5), "the hole was never reported");
        b.transport.progress().unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(start.elapsed() >= Duration::from_millis(40), "reported before the gap timeout: {:?}", start.elapsed());
    let err = b.transport.submit(5, &[Op::Signal]).unwrap_err();
    assert!(matches!(&err, TransportError::Protocol { peer, connection: 5, .. } if peer == "rank 0"), "{err}");
    let text = err.to_string();
    assert!(text.contains("peer 0 channel 5: sequence 3 (update 3) missing"), "{text}");
    assert!(text.contains("2 later ones wait"), "{text}");
    assert_eq!([stream.load(0), stream.load(1), stream.load(2)], values_after(3), "the updates before the hole");
    a.transport.progress().unwrap();
    let told = a.transport.submit(3, &[]).unwrap_err().to_string();
    assert!(told.contains("rank 1") && told.contains("sequence 3 missing past the gap timeout"), "{told}");
}

#[test]
fn a_counter_update_on_a_connection_without_counters_fails_it_naming_the_peer() {
    let (_f, a, b) = pair(IbConfig::default());
    a.transport.submit(3, &[counter(0, 0, CounterUpdate::Add(1))]).unwrap();
    b.transport.progress().unwrap();
    let err = b.transport.submit(5, &[Op::Signal]).unwrap_err();
    assert!(matches!(&err, TransportError::Protocol { peer, connection: 5, .. } if peer == "rank 0"), "{err}");
    assert!(err.to_string().contains("connection 5, which has no counters registered"), "{err}");
    assert_eq!(b.inbox.token(5), 0, "no token moved");
    a.transport.progress().unwrap();
    assert_eq!(a.transport.completed(3).unwrap(), 1, "the send itself was delivered");
    let told = a.transport.submit(3, &[Op::Signal]).unwrap_err().to_string();
    assert!(told.contains("rank 1") && told.contains("which has no counters registered"), "{told}");
}

/// A second queue pair between `a` and `b`, carrying connection `a_conn` on `a` and `b_conn`
/// on `b`.
fn connect_again(fabric: &SoftFabric, a: &Side, b: &Side, a_conn: ConnectionId, b_conn: ConnectionId) {
    let (na, nb) = (a.transport.verbs(), b.transport.verbs());
    let (qa, qb) = fabric.connect(na, nb);
    let (_, ra) = na.register(a.memory.clone());
    let (_, rb) = nb.register(b.memory.clone());
    a.transport.add_connection(a_conn, connection(qa, b_conn, "rank 1", rb)).unwrap();
    b.transport.add_connection(b_conn, connection(qb, a_conn, "rank 0", ra)).unwrap();
}

#[test]
fn a_refused_counter_update_fails_the_senders_connection_promptly_with_the_receivers_reason() {
    let config = IbConfig { timeout: Duration::from_secs(5), ..IbConfig::default() };
    let (fabric, a, b) = pair(config);
    connect_again(&fabric, &a, &b, 4, 6);
    let stream = b.inbox.register_counters(5, 0, CounterConfig { window: 8, ..CounterConfig::default() }).unwrap();
    fabric.set_deferred(true);
    // Update 0 applies; update 20 is beyond the window of 8 after 1: the receiver refuses it.
    a.transport.submit(3, &put_and_update(&a, 0)).unwrap();
    a.transport.submit(3, &[put(0, 0, 8), counter(20, 0, CounterUpdate::Add(1)), put(0, 8, 8)]).unwrap();
    let start = Instant::now();
    while a.transport.submit(3, &[]).is_ok() {
        assert!(start.elapsed() < config.timeout / 10, "the sender was never told");
        b.transport.progress().unwrap();
        a.transport.progress().unwrap();
    }
    let told = a.transport.submit(3, &[Op::Signal]).unwrap_err();
    assert!(matches!(&told, TransportError::Protocol { peer, connection: 3, .. } if peer == "rank 1"), "{told}");
    let reason = "sequence 20 is beyond the window";
    assert!(
        told.to_string().contains(&format!("the peer closed the connection with an error: counter update: {reason}")),
        "{told}"
    );

    // The receiver's own error is the one it always gave.
    let own = b.transport.submit(5, &[Op::Signal]).unwrap_err();
    assert!(matches!(&own, TransportError::Protocol { peer, connection: 5, .. } if peer == "rank 0"), "{own}");
    let own = own.to_string();
    assert!(
        own.contains(&format!("a counter update: counter immediate from peer 0 channel 5: {reason} of 8 after 1")),
        "{own}"
    );
    assert_eq!(stream.stream().applied(), 1, "only the update before the refused one");

    // Both sides' other connection goes on, both ways.
    a.transport.submit(4, &[put(0, 64, 8), Op::Signal]).unwrap();
    b.transport.submit(6, &[put(0, 64, 8), Op::Signal]).unwrap();
    for _ in 0..8 {
        a.transport.progress().unwrap();
        b.transport.progress().unwrap();
    }
    assert_eq!((a.inbox.token(4), b.inbox.token(6)), (1, 1));
    assert_eq!((a.transport.completed(4).unwrap(), b.transport.completed(6).unwrap()), (2, 2));
}

#[test]
fn a_counter_update_towards_a_dead_peer_fails_the_connection_like_a_signal() {
    let (fabric, a, b) = pair(IbConfig::default());
    fabric.kill(b.transport.verbs());
    a.transport.submit(3, &[counter(0, 0, CounterUpdate::Add(1))]).unwrap();
    a.transport.progress().unwrap();
    let err = a.transport.completed(3).unwrap_err();
    assert!(matches!(&err, TransportError::PeerLost { peer, .. } if peer == "rank 1"), "{err}");
    assert!(err.to_string().contains(soft::RETRY_EXCEEDED), "{err}");
}

#[test]
fn the_software_fabric_refuses_a_send_that_carries_bytes() {
    let fabric = SoftFabric::new();
    let (na, nb) = (fabric.nic(), fabric.nic());
    let (qa, qb) = fabric.connect(&na, &nb);
    let (local, _) = na.register(Arc::new(HostMemory::new(64)));
    nb.post_recv(qb, RECV_WR_TAG).unwrap();
    let send = WriteRequest {
        wr_id: 1,
        local_addr: local.addr,
        lkey: local.lkey,
        len: 8,
        remote_addr: 0,
        rkey: 0,
        imm: Some(Immediate::Send(7)),
        signaled: true,
    };
    na.post_write(qa, send).unwrap();
    let mut out = Vec::new();
    na.poll_cq(&mut out).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].status.as_ref().unwrap_err().text, soft::REMOTE_INVALID_REQUEST);
    na.post_write(qa, WriteRequest { len: 0, wr_id: 2, ..send }).unwrap();
    na.poll_cq(&mut out).unwrap();
    assert_eq!(out[1].status.as_ref().unwrap_err().text, soft::FLUSHED, "the queue pair is in the error state");
}

#[test]
fn refusals_survive_their_immediate_and_no_signal_reads_as_one() {
    use super::refusal::Refusal;
    let refusals = [
        Refusal::Unspecified { code: 0 },
        Refusal::Unspecified { code: 200 },
        Refusal::NoCounters,
        Refusal::BeyondWindow { seq: 255 },
        Refusal::ConflictingDuplicate { seq: 7 },
        Refusal::Missing { seq: 0 },
        Refusal::Store,
        Refusal::MisdirectedSignal,
    ];
    for r in refusals {
        assert_eq!(Refusal::decode(r.encode()), Some(r));
    }
    assert!((0..=u32::from(ConnectionId::MAX)).all(|signal| Refusal::decode(signal).is_none()));
}
