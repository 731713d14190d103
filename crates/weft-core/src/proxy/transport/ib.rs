//! InfiniBand verbs transport (cargo feature `ib`), written against a [`Verbs`] trait.
//!
//! **Status.** Our machines have no RDMA NIC, so this module is compiled and unit-tested with
//! a mock verbs layer only. The binding of [`Verbs`] to rdma-core (`ibv_post_send` on a
//! reliable-connected queue pair, `ibv_poll_cq`, memory registration, queue-pair setup over the
//! bootstrap) is **not written**; nothing here talks to a NIC.
//!
//! **Mapping.** A connection is one RC queue pair. A put is an RDMA write from a registered
//! local memory to a registered remote one; a signal is a zero-length RDMA write with
//! immediate data (the connection index) that the receiver turns into an increment of the
//! connection's inbound token. An RC queue pair executes its work requests in order, so the
//! signal lands after every put posted before it, which is the transport contract. Every work
//! request is signalled; completions (polled in [`Transport::progress`], never blocking) advance
//! the connection's completed count and return its flow-control credits. A failed completion
//! fails the connection with an error naming the peer.

use std::sync::Mutex;

use super::{ConnectionId, MAX_CONNECTIONS, MemoryError, Op, Submitted, Transport, TransportError};
use crate::proxy::flow::FlowControl;

const NAME: &str = "ib";

/// A registered local memory: its address and local key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalRegion {
    /// Address of the first byte.
    pub addr: u64,
    /// Size in bytes.
    pub len: u64,
    /// Local key of the registration.
    pub lkey: u32,
}

/// A peer's registered memory: its address and remote key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteRegion {
    /// Address of the first byte in the peer's address space.
    pub addr: u64,
    /// Size in bytes.
    pub len: u64,
    /// Remote key of the registration.
    pub rkey: u32,
}

/// One RDMA write work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteRequest {
    /// Identifies the request in its completion.
    pub wr_id: u64,
    /// Source address.
    pub local_addr: u64,
    /// Source key.
    pub lkey: u32,
    /// Bytes.
    pub len: u64,
    /// Destination address.
    pub remote_addr: u64,
    /// Destination key.
    pub rkey: u32,
    /// Immediate data (write with immediate) for signals.
    pub imm: Option<u32>,
}

/// A work completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The request's `wr_id`.
    pub wr_id: u64,
    /// `Ok` or the verbs status text.
    pub status: Result<(), String>,
}

/// The verbs a real binding provides (one completion queue shared by the connections).
pub trait Verbs: Send + Sync + std::fmt::Debug {
    /// Posts `request` on queue pair `qp`; never blocks.
    fn post_write(&self, qp: u32, request: WriteRequest) -> Result<(), String>;
    /// Appends available completions to `out`; never blocks.
    fn poll_cq(&self, out: &mut Vec<WorkCompletion>) -> Result<(), String>;
}

/// One connection: a queue pair to a peer and the peer's memories.
#[derive(Clone, Debug)]
pub struct IbConnection {
    /// Queue pair number.
    pub qp: u32,
    /// Who the peer is (for errors).
    pub peer: String,
    /// The peer's registered memories, by index.
    pub remote: Vec<RemoteRegion>,
}

#[derive(Debug)]
struct ConnState {
    conn: IbConnection,
    submitted: u64,
    completed: u64,
    /// Completed tickets not yet contiguous with `completed`.
    done_out_of_order: std::collections::BTreeSet<u64>,
    failure: Option<TransportError>,
}

/// The verbs transport.
#[derive(Debug)]
pub struct IbTransport<V> {
    verbs: V,
    local: Vec<LocalRegion>,
    conns: Vec<Mutex<Option<ConnState>>>,
    flow: FlowControl,
}

fn wr_id(connection: ConnectionId, ticket: u64) -> u64 {
    (u64::from(connection) << 48) | (ticket & ((1 << 48) - 1))
}

impl<V: Verbs> IbTransport<V> {
    /// A transport over `verbs` with local memories `local` and `max_in_flight` operations per
    /// connection.
    pub fn new(verbs: V, local: Vec<LocalRegion>, max_in_flight: u64) -> Self {
        Self {
            verbs,
            local,
            conns: (0..MAX_CONNECTIONS).map(|_| Mutex::new(None)).collect(),
            flow: FlowControl::new(MAX_CONNECTIONS, max_in_flight.max(2)),
        }
    }

    /// Sets up connection `id` (the queue pair is already connected by the caller).
    pub fn add_connection(&self, id: ConnectionId, conn: IbConnection) -> Result<(), TransportError> {
        let slot = self
            .conns
            .get(usize::from(id))
            .ok_or(TransportError::UnknownConnection { transport: NAME, connection: id })?;
        *slot.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(ConnState { conn, submitted: 0, completed: 0, done_out_of_order: Default::default(), failure: None });
        Ok(())
    }

    fn with<T>(
        &self,
        connection: ConnectionId,
        f: impl FnOnce(&mut ConnState) -> Result<T, TransportError>,
    ) -> Result<T, TransportError> {
        let unknown = TransportError::UnknownConnection { transport: NAME, connection };
        let slot = self.conns.get(usize::from(connection)).ok_or(unknown.clone())?;
        let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        let state = guard.as_mut().ok_or(unknown)?;
        if let Some(e) = &state.failure {
            return Err(e.clone());
        }
        f(state)
    }

    fn request(
        &self,
        connection: ConnectionId,
        conn: &IbConnection,
        ticket: u64,
        op: &Op,
    ) -> Result<WriteRequest, TransportError> {
        let mem = |source| TransportError::Memory { transport: NAME, connection, source };
        match *op {
            Op::Put { src_memory, src_offset, dst_memory, dst_offset, len } => {
                let l = self
                    .local
                    .get(usize::from(src_memory))
                    .ok_or(mem(MemoryError::UnknownMemory { index: src_memory }))?;
                let r = conn
                    .remote
                    .get(usize::from(dst_memory))
                    .ok_or(mem(MemoryError::UnknownMemory { index: dst_memory }))?;
                super::check_range(src_memory, src_offset, len, l.len).map_err(mem)?;
                super::check_range(dst_memory, dst_offset, len, r.len).map_err(mem)?;
                Ok(WriteRequest {
                    wr_id: wr_id(connection, ticket),
                    local_addr: l.addr + src_offset,
                    lkey: l.lkey,
                    len,
                    remote_addr: r.addr + dst_offset,
                    rkey: r.rkey,
                    imm: None,
                })
            }
            Op::Signal => Ok(WriteRequest {
                wr_id: wr_id(connection, ticket),
                local_addr: 0,
                lkey: 0,
                len: 0,
                remote_addr: 0,
                rkey: 0,
                imm: Some(u32::from(connection)),
            }),
        }
    }
}

impl<V: Verbs> Transport for IbTransport<V> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn submit(&self, connection: ConnectionId, ops: &[Op]) -> Result<Submitted, TransportError> {
        self.with(connection, |state| {
            let requests = ops
                .iter()
                .enumerate()
                .map(|(i, op)| self.request(connection, &state.conn, state.submitted + i as u64, op))
                .collect::<Result<Vec<_>, _>>()?;
            if requests.is_empty() {
                return Ok(Submitted::Accepted { last: state.submitted.wrapping_sub(1) });
            }
            if !self.flow.try_acquire(usize::from(connection), requests.len() as u64) {
                return Ok(Submitted::Full);
            }
            for r in requests {
                if let Err(detail) = self.verbs.post_write(state.conn.qp, r) {
                    let e =
                        TransportError::PeerLost { transport: NAME, connection, peer: state.conn.peer.clone(), detail };
                    state.failure = Some(e.clone());
                    return Err(e);
                }
                state.submitted += 1;
            }
            Ok(Submitted::Accepted { last: state.submitted - 1 })
        })
    }

    fn completed(&self, connection: ConnectionId) -> Result<u64, TransportError> {
        self.with(connection, |s| Ok(s.completed))
    }

    fn submitted(&self, connection: ConnectionId) -> Result<u64, TransportError> {
        self.with(connection, |s| Ok(s.submitted))
    }

    fn progress(&self) -> Result<(), TransportError> {
        let mut out = Vec::new();
        self.verbs.poll_cq(&mut out).map_err(|detail| TransportError::Protocol {
            transport: NAME,
            connection: 0,
            peer: "local CQ".into(),
            detail,
        })?;
        for wc in out {
            // Both fields come from wr_id(), which packs a ConnectionId into the top 16 bits.
            let connection = (wc.wr_id >> 48) as ConnectionId;
            let ticket = wc.wr_id & ((1 << 48) - 1);
            self.with(connection, |state| {
                if let Err(detail) = &wc.status {
                    let e = TransportError::PeerLost {
                        transport: NAME,
                        connection,
                        peer: state.conn.peer.clone(),
                        detail: format!("work request {ticket} failed: {detail}"),
                    };
                    state.failure = Some(e.clone());
                    return Err(e);
                }
                state.done_out_of_order.insert(ticket);
                let mut released = 0;
                while state.done_out_of_order.remove(&state.completed) {
                    state.completed += 1;
                    released += 1;
                }
                self.flow.release(usize::from(connection), released);
                Ok(())
            })?;
        }
        Ok(())
    }

    fn shutdown(&self) {}
}

#[cfg(all(test, not(weft_loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;

    /// Records posts; completes them (or fails the chosen one) when polled.
    #[derive(Debug, Default)]
    struct MockVerbs {
        posted: Mutex<Vec<(u32, WriteRequest)>>,
        fail_wr: Option<u64>,
    }

    impl Verbs for MockVerbs {
        fn post_write(&self, qp: u32, request: WriteRequest) -> Result<(), String> {
            self.posted.lock().unwrap().push((qp, request));
            Ok(())
        }
        fn poll_cq(&self, out: &mut Vec<WorkCompletion>) -> Result<(), String> {
            for (_, r) in self.posted.lock().unwrap().drain(..).rev() {
                let status = if Some(r.wr_id) == self.fail_wr { Err("remote access error".into()) } else { Ok(()) };
                out.push(WorkCompletion { wr_id: r.wr_id, status });
            }
            Ok(())
        }
    }

    fn transport(fail_wr: Option<u64>) -> IbTransport<MockVerbs> {
        let t = IbTransport::new(
            MockVerbs { posted: Mutex::new(Vec::new()), fail_wr },
            vec![LocalRegion { addr: 0x1000, len: 4096, lkey: 7 }],
            4,
        );
        let conn = IbConnection {
            qp: 42,
            peer: "rank 1".into(),
            remote: vec![RemoteRegion { addr: 0x9000, len: 1024, rkey: 9 }],
        };
        t.add_connection(3, conn).unwrap();
        t
    }

    fn put(len: u64) -> Op {
        Op::Put { src_memory: 0, src_offset: 16, dst_memory: 0, dst_offset: 32, len }
    }

    #[test]
    fn a_put_and_signal_become_ordered_writes_on_one_queue_pair() {
        let t = transport(None);
        assert_eq!(t.submit(3, &[put(100), Op::Signal]).unwrap(), Submitted::Accepted { last: 1 });
        let posted = t.verbs.posted.lock().unwrap().clone();
        assert_eq!(posted.len(), 2);
        assert_eq!(posted[0].0, 42);
        assert_eq!(posted[0].1.local_addr, 0x1010);
        assert_eq!(posted[0].1.remote_addr, 0x9020);
        assert_eq!((posted[0].1.lkey, posted[0].1.rkey, posted[0].1.imm), (7, 9, None));
        assert_eq!(posted[1].1.imm, Some(3), "the signal carries the connection as immediate data");
        assert_eq!(t.completed(3).unwrap(), 0);
        t.progress().unwrap();
        assert_eq!(t.completed(3).unwrap(), 2, "completions polled in any order complete in order");
    }

    #[test]
    fn flow_control_and_bounds_are_enforced() {
        let t = transport(None);
        assert!(matches!(t.submit(3, &[put(100), put(1)]).unwrap(), Submitted::Accepted { .. }));
        assert!(matches!(t.submit(3, &[put(1), put(1)]).unwrap(), Submitted::Accepted { .. }));
        assert_eq!(t.submit(3, &[Op::Signal]).unwrap(), Submitted::Full);
        t.progress().unwrap();
        assert!(matches!(t.submit(3, &[Op::Signal]).unwrap(), Submitted::Accepted { last: 4 }));
        assert!(matches!(t.submit(3, &[put(2000)]), Err(TransportError::Memory { .. })), "beyond the remote region");
        assert!(matches!(t.submit(5, &[Op::Signal]), Err(TransportError::UnknownConnection { .. })));
    }

    #[test]
    fn a_failed_completion_fails_the_connection_naming_the_peer() {
        let t = transport(Some(wr_id(3, 1)));
        t.submit(3, &[put(8), Op::Signal]).unwrap();
        let err = t.progress().unwrap_err();
        assert!(err.to_string().contains("rank 1"), "{err}");
        assert!(t.submit(3, &[Op::Signal]).is_err());
        assert!(t.completed(3).is_err());
    }
}
