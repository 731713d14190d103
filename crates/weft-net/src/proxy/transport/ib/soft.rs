//! A software reliable-connected fabric over host memory: [`Verbs`] without a NIC, so the
//! verbs transport runs end to end in tests (ours have no RDMA NIC).
//!
//! It keeps the RC semantics the transport relies on:
//! - a queue pair executes its work requests in posting order, each one in full before the next;
//! - a write with immediate consumes one posted receive of the peer's queue pair and completes
//!   there as [`CompletionKind::RecvWriteImm`], a send with immediate as
//!   [`CompletionKind::RecvSendImm`]; with no receive posted the queue pair stalls (receiver not
//!   ready, retried forever) and so do the requests behind it;
//! - the posted receives have no buffer: a send carrying bytes fails with "remote invalid
//!   request error" (the peer's NIC refuses it);
//! - a sender's completion means the peer applied the write (unsignalled writes complete only
//!   when they fail);
//! - an access outside a registration, or with a key of the wrong side, completes with an error
//!   and puts the queue pair into the error state: everything after it, and every receive
//!   posted on it, completes "flushed";
//! - a dead NIC ([`SoftFabric::kill`]) refuses posts, and writes towards it complete with
//!   "transport retry counter exceeded", as an RC queue pair reports a peer that stopped
//!   answering once its retries run out.
//!
//! Every call runs the fabric's delivery to a fixed point under one lock, so no thread is
//! needed and nothing waits. In deferred mode ([`SoftFabric::set_deferred`]) a post only
//! queues: each poll of any completion queue executes one write per queue pair, so data lands
//! after its submission returns, interleaved across queue pairs and in order within each.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::{
    CompletionError, CompletionKind, Immediate, LocalRegion, RemoteRegion, Verbs, VerbsError, WorkCompletion,
    WriteRequest,
};
use crate::proxy::transport::Memory;

/// Status text of writes towards a dead NIC.
pub const RETRY_EXCEEDED: &str = "transport retry counter exceeded";
/// Status text of a write outside the peer's registration or with a wrong remote key.
pub const REMOTE_ACCESS: &str = "remote access error";
/// Status text of a write whose source lies outside the local registration.
pub const LOCAL_PROTECTION: &str = "local protection error";
/// Status text of work requests flushed by a queue pair in the error state.
pub const FLUSHED: &str = "work request flushed in error";
/// Status text of a send carrying bytes (the peer's receives have no buffer for them).
pub const REMOTE_INVALID_REQUEST: &str = "remote invalid request error";

/// A failed completion as the fabric reports it: verbs.h's `ibv_wc_status` value and its text.
type SoftStatus = (u32, &'static str);
const RETRY_EXC_ERR: SoftStatus = (12, RETRY_EXCEEDED);
const REM_ACCESS_ERR: SoftStatus = (10, REMOTE_ACCESS);
const LOC_PROT_ERR: SoftStatus = (4, LOCAL_PROTECTION);
const WR_FLUSH_ERR: SoftStatus = (5, FLUSHED);
const REM_INV_REQ_ERR: SoftStatus = (9, REMOTE_INVALID_REQUEST);

/// The fabric: NICs, their registrations, queue pairs and completion queues.
#[derive(Debug, Default)]
pub struct SoftFabric {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    deferred: bool,
    nics: Vec<Nic>,
    regions: HashMap<u32, Region>,
    qps: HashMap<u32, Qp>,
    next_key: u32,
    next_qp: u32,
    next_addr: u64,
}

#[derive(Debug, Default)]
struct Nic {
    dead: bool,
    cq: VecDeque<WorkCompletion>,
    reverse_polls: bool,
}

#[derive(Debug)]
struct Region {
    nic: usize,
    addr: u64,
    memory: Arc<dyn Memory>,
}

#[derive(Debug)]
struct Qp {
    nic: usize,
    /// The connected queue pair; writes wait until there is one.
    peer: Option<u32>,
    /// Writes posted and not yet executed, in order.
    sends: VecDeque<WriteRequest>,
    /// Receives posted and not yet consumed.
    recvs: VecDeque<u64>,
    error: bool,
}

/// One NIC of a [`SoftFabric`], with its own completion queue.
#[derive(Clone, Debug)]
pub struct SoftNic {
    fabric: Arc<SoftFabric>,
    id: usize,
}

impl SoftFabric {
    /// An empty fabric.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Deferred delivery on or off (see the module docs).
    pub fn set_deferred(&self, deferred: bool) {
        self.lock().deferred = deferred;
    }

    /// A new NIC on the fabric.
    pub fn nic(self: &Arc<Self>) -> SoftNic {
        let mut s = self.lock();
        s.nics.push(Nic::default());
        SoftNic { fabric: self.clone(), id: s.nics.len() - 1 }
    }

    /// A queue pair on `a` connected to a queue pair on `b`: their numbers.
    pub fn connect(&self, a: &SoftNic, b: &SoftNic) -> (u32, u32) {
        let (qa, qb) = (self.create_qp(a), self.create_qp(b));
        // Both exist and are unconnected: this cannot fail.
        let _ = self.connect_qp(qa, qb).and_then(|()| self.connect_qp(qb, qa));
        (qa, qb)
    }

    /// A new queue pair on `nic`, not yet connected: its number.
    pub fn create_qp(&self, nic: &SoftNic) -> u32 {
        let mut s = self.lock();
        s.next_qp += 1;
        let qp = s.next_qp;
        s.qps.insert(qp, Qp { nic: nic.id, peer: None, sends: VecDeque::new(), recvs: VecDeque::new(), error: false });
        qp
    }

    /// Connects queue pair `qp` to the peer's `peer_qp` (each side connects its own).
    pub fn connect_qp(&self, qp: u32, peer_qp: u32) -> Result<(), VerbsError> {
        let mut s = self.lock();
        if !s.qps.contains_key(&peer_qp) {
            return Err(VerbsError::ForeignQp { qp: peer_qp });
        }
        let q = s.qps.get_mut(&qp).ok_or_else(|| VerbsError::UnknownQp { qp, device: "the software fabric".into() })?;
        if q.peer.is_some() {
            return Err(VerbsError::AlreadyConnected { qp });
        }
        q.peer = Some(peer_qp);
        s.deliver();
        Ok(())
    }

    /// `nic` stops answering: its posts fail, writes towards it fail at the sender.
    pub fn kill(&self, nic: &SoftNic) {
        let mut s = self.lock();
        s.nics[nic.id].dead = true;
        s.deliver();
    }

    /// `nic` is gone: as [`SoftFabric::kill`], and its registrations, queue pairs and
    /// completions are dropped (the fabric no longer keeps its memories alive, and a process
    /// making many communicators does not accumulate queue pairs).
    pub fn retire(&self, nic: &SoftNic) {
        let mut s = self.lock();
        s.nics[nic.id].dead = true;
        s.nics[nic.id].cq.clear();
        s.regions.retain(|_, r| r.nic != nic.id);
        s.qps.retain(|_, q| q.nic != nic.id);
        s.deliver();
    }
}

impl SoftNic {
    /// Registers `memory` with this NIC: the region for local use and the one peers write to.
    pub fn register(&self, memory: Arc<dyn Memory>) -> (LocalRegion, RemoteRegion) {
        let mut s = self.fabric.lock();
        s.next_key += 1;
        let key = s.next_key;
        // Regions get disjoint addresses with a gap, so an access past one never hits another.
        let addr = 0x1_0000_0000 + s.next_addr;
        let len = memory.len() as u64;
        s.next_addr += len.next_multiple_of(4096) + 4096;
        s.regions.insert(key, Region { nic: self.id, addr, memory });
        (LocalRegion { addr, len, lkey: key }, RemoteRegion { addr, len, rkey: key })
    }

    /// Test aid: return each polled batch of completions in reverse order.
    pub fn set_reverse_polls(&self, reverse: bool) {
        self.fabric.lock().nics[self.id].reverse_polls = reverse;
    }

    /// Queues a request on this NIC's queue pair `qp` with `queue`, then delivers (unless
    /// deferred).
    fn post(&self, qp: u32, queue: impl FnOnce(&mut Qp)) -> Result<(), VerbsError> {
        let mut s = self.fabric.lock();
        queue(self.own_qp(&mut s, qp)?);
        if !s.deferred {
            s.deliver();
        }
        Ok(())
    }

    /// Checks that `qp` exists on this NIC and the NIC is alive.
    fn own_qp<'a>(&self, s: &'a mut State, qp: u32) -> Result<&'a mut Qp, VerbsError> {
        if s.nics[self.id].dead {
            return Err(VerbsError::DeviceRemoved);
        }
        let device = || format!("this device (software NIC {})", self.id);
        s.qps.get_mut(&qp).filter(|q| q.nic == self.id).ok_or_else(|| VerbsError::UnknownQp { qp, device: device() })
    }
}

impl Verbs for SoftNic {
    fn post_write(&self, qp: u32, request: WriteRequest) -> Result<(), VerbsError> {
        self.post(qp, |q| q.sends.push_back(request))
    }

    fn post_recv(&self, qp: u32, wr_id: u64) -> Result<(), VerbsError> {
        self.post(qp, |q| q.recvs.push_back(wr_id))
    }

    fn close(&self) {
        self.fabric.kill(self);
    }

    fn poll_cq(&self, out: &mut Vec<WorkCompletion>) -> Result<(), VerbsError> {
        let mut s = self.fabric.lock();
        if s.deferred {
            s.step();
        }
        let nic = &mut s.nics[self.id];
        let start = out.len();
        out.extend(nic.cq.drain(..));
        if nic.reverse_polls {
            out[start..].reverse();
        }
        Ok(())
    }
}

/// What executing the head write of a queue pair did.
enum Step {
    /// Executed (or failed); the next one may go.
    Done,
    /// Waiting for the peer to post a receive (or for the queue pair to be connected).
    ReceiverNotReady,
}

impl State {
    /// Executes every queue pair's writes in order until none can make progress.
    fn deliver(&mut self) {
        loop {
            let mut moved = false;
            let qps: Vec<u32> = self.qps.keys().copied().collect();
            for qp in qps {
                while let Some(&head) = self.qps.get(&qp).and_then(|q| q.sends.front()) {
                    match self.execute(qp, head) {
                        Step::Done => {
                            if let Some(q) = self.qps.get_mut(&qp) {
                                q.sends.pop_front();
                            }
                            moved = true;
                        }
                        Step::ReceiverNotReady => break,
                    }
                }
                moved |= self.flush_if_failed(qp);
            }
            if !moved {
                return;
            }
        }
    }

    /// Executes at most one write per queue pair, in queue pair order (deferred mode).
    fn step(&mut self) {
        let mut qps: Vec<u32> = self.qps.keys().copied().collect();
        qps.sort_unstable();
        for qp in qps {
            let head = self.qps.get(&qp).and_then(|q| q.sends.front().copied());
            if let Some(head) = head
                && let Step::Done = self.execute(qp, head)
                && let Some(q) = self.qps.get_mut(&qp)
            {
                q.sends.pop_front();
            }
            self.flush_if_failed(qp);
        }
    }

    fn complete(&mut self, nic: usize, wr_id: u64, kind: CompletionKind, status: Result<(), SoftStatus>) {
        let status = status.map_err(|(status, text)| CompletionError { status, text: text.into() });
        self.nics[nic].cq.push_back(WorkCompletion { wr_id, kind, status });
    }

    fn execute(&mut self, qp: u32, w: WriteRequest) -> Step {
        let (nic, peer) = match self.qps.get(&qp) {
            Some(Qp { nic, peer: Some(peer), .. }) => (*nic, *peer),
            Some(_) => return Step::ReceiverNotReady,
            None => return Step::Done,
        };
        let peer_nic = self.qps.get(&peer).map(|q| q.nic);
        let failure = if self.qps[&qp].error {
            Some(WR_FLUSH_ERR)
        } else if peer_nic.is_none_or(|n| self.nics[n].dead) || self.qps[&peer].error {
            Some(RETRY_EXC_ERR)
        } else if w.imm.is_some() && self.qps[&peer].recvs.is_empty() {
            return Step::ReceiverNotReady;
        } else if let Some(Immediate::Send(_)) = w.imm {
            (w.len != 0).then_some(REM_INV_REQ_ERR)
        } else {
            self.copy(nic, peer_nic.unwrap_or(nic), &w).err()
        };
        if let Some(status) = failure {
            if let Some(q) = self.qps.get_mut(&qp) {
                q.error = true;
            }
            self.complete(nic, w.wr_id, CompletionKind::Write, Err(status));
            return Step::Done;
        }
        if let Some(imm) = w.imm {
            let kind = match imm {
                Immediate::Write(imm) => CompletionKind::RecvWriteImm { qp: peer, imm },
                Immediate::Send(imm) => CompletionKind::RecvSendImm { qp: peer, imm },
            };
            // The peer's queue pair exists and has a receive posted (checked above).
            let p = self.qps.get_mut(&peer);
            if let Some((peer_nic, Some(recv))) = p.map(|p| (p.nic, p.recvs.pop_front())) {
                self.complete(peer_nic, recv, kind, Ok(()));
            }
        }
        if w.signaled {
            self.complete(nic, w.wr_id, CompletionKind::Write, Ok(()));
        }
        Step::Done
    }

    /// Moves `w`'s bytes from the sender's registration to the receiver's.
    fn copy(&self, nic: usize, peer_nic: usize, w: &WriteRequest) -> Result<(), SoftStatus> {
        if w.len == 0 {
            return Ok(());
        }
        let source = self.region_range(w.lkey, nic, w.local_addr, w.len).ok_or(LOC_PROT_ERR)?;
        let target = self.region_range(w.rkey, peer_nic, w.remote_addr, w.len).ok_or(REM_ACCESS_ERR)?;
        let mut bytes = vec![0; source.1];
        source.0.memory.read(source.2, &mut bytes).map_err(|_| LOC_PROT_ERR)?;
        target.0.memory.write(target.2, &bytes).map_err(|_| REM_ACCESS_ERR)
    }

    /// The region `key` of `nic` if `[addr, addr + len)` lies inside it, with the length and
    /// the offset as usizes.
    fn region_range(&self, key: u32, nic: usize, addr: u64, len: u64) -> Option<(&Region, usize, usize)> {
        let r = self.regions.get(&key).filter(|r| r.nic == nic)?;
        let offset = addr.checked_sub(r.addr)?;
        let end = offset.checked_add(len)?;
        if end > r.memory.len() as u64 {
            return None;
        }
        Some((r, usize::try_from(len).ok()?, usize::try_from(offset).ok()?))
    }

    /// A queue pair in the error state flushes its posted receives; true if it flushed any.
    fn flush_if_failed(&mut self, qp: u32) -> bool {
        let Some(q) = self.qps.get_mut(&qp).filter(|q| q.error && !q.recvs.is_empty()) else { return false };
        let (nic, recvs): (usize, Vec<u64>) = (q.nic, q.recvs.drain(..).collect());
        for wr_id in recvs {
            self.complete(nic, wr_id, CompletionKind::RecvWriteImm { qp, imm: 0 }, Err(WR_FLUSH_ERR));
        }
        true
    }
}
