//! The argument checks of every collective call, apart from the GPU: a call whose arguments
//! fail returns the error before it enqueues anything. Whether a range lies in device memory of
//! this rank's GPU is asked of an injected predicate (`weft_gpu::check_device_range` on the
//! communicator's device), so the checks run without a GPU in tests.

use weft_gpu::DevicePtr;
use weft_types::{DataType, MAX_RANKS, P2pPlan};

use crate::collectives::{P2pKind, P2pOp};

/// Why a call's arguments were refused (the call enqueued nothing).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgError {
    /// `count × factor` elements of the type take more bytes than an address space holds.
    #[error("{count} x {factor} elements of {} overflow", dtype.name())]
    Overflow {
        /// Elements per block.
        count: usize,
        /// Blocks.
        factor: usize,
        /// The element type.
        dtype: DataType,
    },
    /// A non-empty buffer at address 0.
    #[error("{buffer} buffer is null")]
    Null {
        /// Which buffer (`send`, `recv`, `send block`...).
        buffer: &'static str,
    },
    /// A buffer that is not device memory of this rank's GPU.
    #[error("{buffer} buffer: {detail}")]
    NotDeviceMemory {
        /// Which buffer.
        buffer: &'static str,
        /// What the GPU said of the range.
        detail: String,
    },
    /// Two buffers of one call overlap, and not in the call's in-place layout.
    #[error("{a} and {b} overlap{}", in_place_layout(a, b, *in_place))]
    Overlap {
        /// One buffer.
        a: &'static str,
        /// The other.
        b: &'static str,
        /// Where `a` starts in `b` in place; `None`: the call has no in-place form for them.
        in_place: Option<u64>,
    },
    /// Two buffers of a send/receive group overlap, a receive among them, and are not one
    /// buffer sent and received (in place).
    #[error(
        "a {a} buffer overlaps a {b} buffer of the same group (only a send and a receive of the same buffer, same address and length, may share it: in place)"
    )]
    GroupOverlap {
        /// One buffer.
        a: &'static str,
        /// The other.
        b: &'static str,
    },
    /// A root outside the communicator.
    #[error("root {root} out of range for {ranks} ranks")]
    RootOutOfRange {
        /// The root named.
        root: usize,
        /// Ranks of the communicator.
        ranks: usize,
    },
    /// All-to-all or send/receive on more ranks than their per-rank arrays hold.
    #[error("{ranks} ranks: all-to-all and send/receive handle at most {max} (the ranks of one node)", max = MAX_RANKS)]
    DirectRanks {
        /// Ranks of the communicator.
        ranks: usize,
    },
    /// A send/receive peer outside the communicator.
    #[error("peer {peer} out of range for {ranks} ranks")]
    PeerOutOfRange {
        /// The peer named.
        peer: usize,
        /// Ranks of the communicator.
        ranks: usize,
    },
    /// AllToAll buffers that overlap without being the same buffer.
    #[error(
        "send ({send:#x}) and recv ({recv:#x}) of {bytes} bytes overlap without being equal (in place means sendbuff == recvbuff)"
    )]
    PartlyInPlace {
        /// The send buffer.
        send: DevicePtr,
        /// The receive buffer.
        recv: DevicePtr,
        /// Bytes of each.
        bytes: usize,
    },
    /// AllToAllv counts or displacements of another length than the ranks.
    #[error("all_to_allv needs {ranks} counts and displacements per side")]
    BlockLists {
        /// Ranks of the communicator.
        ranks: usize,
    },
    /// An AllToAllv whose transfer to this rank differs in size at its two ends.
    #[error("all_to_allv sends {sent} bytes to itself but receives {received}")]
    SelfTransfer {
        /// Bytes sent to itself.
        sent: u64,
        /// Bytes received from itself.
        received: u64,
    },
    /// `ReduceOp::PreMulSum` without its scalar.
    #[error("premulsum needs its scalar: pass Reduction::PreMulSum, not ReduceOp::PreMulSum")]
    MissingScalar,
    /// A PreMulSum scalar of another type than the call's elements.
    #[error("the premulsum scalar is {} but the call reduces {}: an operator's type must be the call's", scalar.name(), call.name())]
    ScalarType {
        /// The scalar's type.
        scalar: DataType,
        /// The call's element type.
        call: DataType,
    },
    /// Scalar bytes that are not one element of the type.
    #[error("a {} scalar takes {} bytes, not {bytes}", dtype.name(), dtype.size())]
    ScalarBytes {
        /// The scalar's type.
        dtype: DataType,
        /// Bytes given.
        bytes: usize,
    },
    /// A send/receive round whose send to this rank has no receive from it of the same size.
    #[error("a send to this rank needs a receive from it of the same size")]
    UnmatchedSelfSend,
}

/// The end of [`ArgError::Overlap`]'s message.
fn in_place_layout(a: &str, b: &str, in_place: Option<u64>) -> String {
    match in_place {
        Some(offset) => format!(" without the in-place layout (in place means {a} = {b} + {offset})"),
        None => String::new(),
    }
}

/// A device buffer argument: what it is called in errors, where it starts, how long it is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Buffer {
    pub(crate) what: &'static str,
    pub(crate) ptr: DevicePtr,
    pub(crate) len: usize,
}

impl Buffer {
    pub(crate) fn overlaps(&self, other: &Buffer) -> bool {
        self.len > 0
            && other.len > 0
            && self.ptr < other.ptr + other.len as u64
            && other.ptr < self.ptr + self.len as u64
    }
}

/// The sizes of an AllGather or ReduceScatter, one block of `block` bytes on one side, `total`
/// (a block per rank) on the other, and its receive buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Blocked {
    pub(crate) recv: Buffer,
    pub(crate) block: usize,
    pub(crate) total: usize,
}

/// The launch plan of round `round` of a send/receive group: the `round`-th operation of every
/// (peer, direction), or `None` past the last round. Peers are in range (checked before).
pub(crate) fn p2p_round(ops: &[P2pOp], round: usize) -> Option<P2pPlan> {
    let mut plan = P2pPlan::default();
    let mut seen = [[0usize; 2]; MAX_RANKS];
    let mut any = false;
    for op in ops {
        let index = &mut seen[op.peer][op.kind as usize];
        if *index == round {
            let len = (op.count * op.dtype.size()) as u64;
            match op.kind {
                P2pKind::Send => (plan.send_ptr[op.peer], plan.send_bytes[op.peer]) = (op.ptr, len),
                P2pKind::Recv => (plan.recv_ptr[op.peer], plan.recv_bytes[op.peer]) = (op.ptr, len),
            }
            any = true;
        }
        *index += 1;
    }
    any.then_some(plan)
}

/// Whether `len` bytes at `ptr` are device memory of this rank's GPU; the error says why not.
pub(crate) trait InDevice: Fn(DevicePtr, usize) -> Result<(), String> {}

impl<F: Fn(DevicePtr, usize) -> Result<(), String>> InDevice for F {}

/// The checks of one rank.
pub(crate) struct Args<F> {
    pub(crate) rank: usize,
    pub(crate) ranks: usize,
    pub(crate) in_device: F,
}

impl<F: InDevice> Args<F> {
    /// Whether all-to-all and send/receive, whose plans keep an entry per rank
    /// ([`P2pPlan`]), can run on this communicator.
    fn direct_ranks(&self) -> Result<(), ArgError> {
        if self.ranks > MAX_RANKS { Err(ArgError::DirectRanks { ranks: self.ranks }) } else { Ok(()) }
    }

    /// `count * factor` elements of `dtype` in bytes, or an error on overflow.
    pub(crate) fn bytes(&self, count: usize, dtype: DataType, factor: usize) -> Result<usize, ArgError> {
        count
            .checked_mul(dtype.size())
            .and_then(|b| b.checked_mul(factor))
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or(ArgError::Overflow { count, factor, dtype })
    }

    /// Every non-empty buffer is non-null device memory of this GPU, and each pair
    /// `(a, b, in_place)` is disjoint or (with `Some(offset)`) starts exactly at `b + offset`,
    /// the in-place layout.
    pub(crate) fn buffers(&self, buffers: &[Buffer], pairs: &[(Buffer, Buffer, Option<u64>)]) -> Result<(), ArgError> {
        for b in buffers.iter().filter(|b| b.len > 0) {
            if b.ptr == 0 {
                return Err(ArgError::Null { buffer: b.what });
            }
            (self.in_device)(b.ptr, b.len).map_err(|detail| ArgError::NotDeviceMemory { buffer: b.what, detail })?;
        }
        for (a, b, in_place) in pairs {
            if a.overlaps(b) && *in_place != Some(a.ptr.wrapping_sub(b.ptr)) {
                return Err(ArgError::Overlap { a: a.what, b: b.what, in_place: *in_place });
            }
        }
        Ok(())
    }

    /// [`Args::buffers`] for point-to-point buffers: a receive buffer may overlap nothing.
    pub(crate) fn p2p_buffers(&self, buffers: &[Buffer]) -> Result<(), ArgError> {
        self.buffers(buffers, &[])?;
        for (i, a) in buffers.iter().enumerate() {
            for b in &buffers[i + 1..] {
                if (a.what.starts_with("recv") || b.what.starts_with("recv")) && a.overlaps(b) {
                    return Err(ArgError::Overlap { a: a.what, b: b.what, in_place: None });
                }
            }
        }
        Ok(())
    }

    /// AllReduce's `send` and `recv` of `count` elements: disjoint or equal (in place).
    pub(crate) fn all_reduce(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
    ) -> Result<(Buffer, Buffer), ArgError> {
        let bytes = self.bytes(count, dtype, 1)?;
        let (send, recv) =
            (Buffer { what: "send", ptr: send, len: bytes }, Buffer { what: "recv", ptr: recv, len: bytes });
        self.buffers(&[send, recv], &[(send, recv, Some(0))])?;
        Ok((send, recv))
    }

    /// AllGather (`gathers`) or ReduceScatter of `count` elements per block: in place, the
    /// single block sits at block `rank` of the other buffer.
    pub(crate) fn blocked(
        &self,
        gathers: bool,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
    ) -> Result<Blocked, ArgError> {
        let block = self.bytes(count, dtype, 1)?;
        let total = self.bytes(count, dtype, self.ranks)?;
        let send = Buffer { what: "send", ptr: send, len: if gathers { block } else { total } };
        let recv = Buffer { what: "recv", ptr: recv, len: if gathers { total } else { block } };
        let (single, whole) = if gathers { (send, recv) } else { (recv, send) };
        let in_place = (block * self.rank) as u64;
        self.buffers(&[send, recv], &[(single, whole, Some(in_place))])?;
        Ok(Blocked { recv, block, total })
    }

    /// Broadcast (`broadcasts`) or Reduce of `count` elements from or to `root`: the root uses
    /// both buffers (equal: in place), the others only the one every rank uses. The bytes.
    pub(crate) fn rooted(
        &self,
        broadcasts: bool,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        root: usize,
    ) -> Result<usize, ArgError> {
        let bytes = self.bytes(count, dtype, 1)?;
        if root >= self.ranks {
            return Err(ArgError::RootOutOfRange { root, ranks: self.ranks });
        }
        let send = Buffer { what: "send", ptr: send, len: bytes };
        let recv = Buffer { what: "recv", ptr: recv, len: bytes };
        if root == self.rank {
            self.buffers(&[send, recv], &[(send, recv, Some(0))])?;
        } else {
            self.buffers(&[if broadcasts { recv } else { send }], &[])?;
        }
        Ok(bytes)
    }

    /// AllToAll's `send` and `recv` of a block of `count` elements per rank (disjoint), for
    /// a plan. Their bytes.
    pub(crate) fn all_to_all(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
    ) -> Result<usize, ArgError> {
        self.direct_ranks()?;
        let total = self.bytes(count, dtype, self.ranks)?;
        self.p2p_buffers(&[
            Buffer { what: "send", ptr: send, len: total },
            Buffer { what: "recv", ptr: recv, len: total },
        ])?;
        Ok(total)
    }

    /// Whether an AllToAll of `total` bytes per rank runs in place: `send == recv` (the input
    /// is staged first, so the result is the out-of-place one, as NCCL's). Disjoint buffers
    /// are not; buffers that overlap without being equal are an error (NCCL does not define
    /// that layout). `recv` is checked as device memory when in place.
    pub(crate) fn all_to_all_in_place(&self, send: DevicePtr, recv: DevicePtr, total: usize) -> Result<bool, ArgError> {
        self.direct_ranks()?;
        let (s, r) = (Buffer { what: "send", ptr: send, len: total }, Buffer { what: "recv", ptr: recv, len: total });
        if !s.overlaps(&r) {
            return Ok(false);
        }
        if send != recv {
            return Err(ArgError::PartlyInPlace { send, recv, bytes: total });
        }
        self.buffers(&[r], &[])?;
        Ok(true)
    }

    /// The counts and displacements (elements) of AllToAll as an AllToAllv: a block of `count`
    /// per rank.
    pub(crate) fn even_blocks(
        &self,
        count: usize,
        dtype: DataType,
    ) -> Result<([usize; MAX_RANKS], [usize; MAX_RANKS]), ArgError> {
        self.direct_ranks()?;
        let n = self.ranks;
        let mut displs = [0usize; MAX_RANKS];
        for (p, d) in displs.iter_mut().enumerate().take(n) {
            *d = p.checked_mul(count).ok_or(ArgError::Overflow { count, factor: n, dtype })?;
        }
        Ok(([count; MAX_RANKS], displs))
    }

    /// AllToAllv's transfers: a count and displacement per rank and side, no receive block
    /// overlapping any other block, as many bytes to this rank as from it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn all_to_allv(
        &self,
        send: DevicePtr,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: DevicePtr,
        recv_counts: &[usize],
        recv_displs: &[usize],
        dtype: DataType,
    ) -> Result<P2pPlan, ArgError> {
        self.direct_ranks()?;
        let n = self.ranks;
        if [send_counts.len(), send_displs.len(), recv_counts.len(), recv_displs.len()].iter().any(|&l| l != n) {
            return Err(ArgError::BlockLists { ranks: n });
        }
        let mut plan = P2pPlan::default();
        let mut buffers = [Buffer { what: "", ptr: 0, len: 0 }; 2 * MAX_RANKS];
        for p in 0..n {
            let (sb, rb) = (self.bytes(send_counts[p], dtype, 1)?, self.bytes(recv_counts[p], dtype, 1)?);
            let (so, ro) = (self.bytes(send_displs[p], dtype, 1)?, self.bytes(recv_displs[p], dtype, 1)?);
            buffers[2 * p] = Buffer { what: "send block", ptr: send.wrapping_add(so as u64), len: sb };
            buffers[2 * p + 1] = Buffer { what: "recv block", ptr: recv.wrapping_add(ro as u64), len: rb };
            (plan.send_ptr[p], plan.send_bytes[p], plan.recv_ptr[p], plan.recv_bytes[p]) =
                (send.wrapping_add(so as u64), sb as u64, recv.wrapping_add(ro as u64), rb as u64);
        }
        let me = self.rank;
        if plan.send_bytes[me] != plan.recv_bytes[me] {
            let (sent, received) = (plan.send_bytes[me], plan.recv_bytes[me]);
            return Err(ArgError::SelfTransfer { sent, received });
        }
        self.p2p_buffers(&buffers[..2 * n])?;
        Ok(plan)
    }

    /// A send/receive group: peers in range, buffers in device memory, no receive buffer
    /// overlapping another buffer of the group unless it is exactly a send buffer of the group
    /// (same address and length: in place, the send is staged first), and every round's send to
    /// this rank matched by a receive from it of the same size. The indices of the sends to
    /// stage (empty when nothing is in place: no allocation).
    pub(crate) fn send_recv(&self, ops: &[P2pOp]) -> Result<Vec<usize>, ArgError> {
        self.direct_ranks()?;
        let buffer = |op: &P2pOp| -> Result<Buffer, ArgError> {
            if op.peer >= self.ranks {
                return Err(ArgError::PeerOutOfRange { peer: op.peer, ranks: self.ranks });
            }
            let what = if op.kind == P2pKind::Send { "send" } else { "recv" };
            Ok(Buffer { what, ptr: op.ptr, len: self.bytes(op.count, op.dtype, 1)? })
        };
        let mut staged = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let a = buffer(op)?;
            self.buffers(&[a], &[])?;
            for (j, other) in ops.iter().enumerate().skip(i + 1) {
                let b = buffer(other)?;
                if (op.kind == P2pKind::Recv || other.kind == P2pKind::Recv) && a.overlaps(&b) {
                    if op.kind == other.kind || (a.ptr, a.len) != (b.ptr, b.len) {
                        return Err(ArgError::GroupOverlap { a: a.what, b: b.what });
                    }
                    let send = if op.kind == P2pKind::Send { i } else { j };
                    if !staged.contains(&send) {
                        staged.push(send);
                    }
                }
            }
        }
        let me = self.rank;
        if (0..).map_while(|r| p2p_round(ops, r)).any(|p| p.send_bytes[me] != p.recv_bytes[me]) {
            return Err(ArgError::UnmatchedSelfSend);
        }
        Ok(staged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 1 of 4 whose GPU holds one allocation, [BASE, BASE + SIZE).
    const BASE: DevicePtr = 0x10_0000;
    const SIZE: usize = 1 << 20;

    fn args() -> Args<impl InDevice> {
        Args {
            rank: 1,
            ranks: 4,
            in_device: |ptr: DevicePtr, len: usize| {
                let inside = ptr >= BASE && ptr.checked_add(len as u64).is_some_and(|end| end <= BASE + SIZE as u64);
                if inside { Ok(()) } else { Err(format!("{len} bytes at {ptr:#x} are not device memory")) }
            },
        }
    }

    #[test]
    fn all_to_all_and_send_receive_refuse_more_ranks_than_their_plans_hold() {
        // 16 ranks across nodes: every direct call is an error, none indexes past its arrays.
        let wide = Args { ranks: 16, ..args() };
        fn refused<T>(r: Result<T, ArgError>) -> bool {
            matches!(r, Err(ArgError::DirectRanks { ranks: 16 }))
        }
        assert!(refused(wide.all_to_all(BASE, BASE + 4096, 4, DataType::F32)));
        assert!(refused(wide.all_to_all_in_place(BASE, BASE, 4096)));
        assert!(refused(wide.even_blocks(4, DataType::F32)));
        let lists = vec![0usize; 16];
        assert!(refused(wide.all_to_allv(BASE, &lists, &lists, BASE + 4096, &lists, &lists, DataType::F32)));
        let op = P2pOp { kind: P2pKind::Send, peer: 12, ptr: BASE, count: 4, dtype: DataType::F32 };
        assert!(refused(wide.send_recv(&[op])));
        let error = wide.send_recv(&[op]).unwrap_err().to_string();
        assert!(error.contains("16 ranks") && error.contains("at most 8"), "{error}");
        // At 8 the same calls pass this check.
        assert!(Args { ranks: 8, ..args() }.even_blocks(4, DataType::F32).is_ok());
    }

    fn assert_err<T: std::fmt::Debug>(result: Result<T, ArgError>, expected: &str) {
        let err = result.expect_err(expected).to_string();
        assert!(err.contains(expected), "{err:?} does not say {expected:?}");
    }

    const F32: DataType = DataType::F32;

    #[test]
    fn valid_calls_pass_in_place_or_not() {
        let a = args();
        assert!(a.all_reduce(BASE, BASE + 4096, 1024, F32).is_ok());
        assert!(a.all_reduce(BASE, BASE, 1024, F32).is_ok());
        // Empty calls touch nothing: any pointer, null included.
        assert!(a.all_reduce(0, 0, 0, F32).is_ok());
        // Rank 1's block of the gather is the second of recv.
        assert!(a.blocked(true, BASE + 64, BASE, 16, F32).is_ok());
        assert!(a.blocked(false, BASE, BASE + 64, 16, F32).is_ok());
        assert_eq!(a.rooted(true, 0, BASE, 16, F32, 0), Ok(64));
        assert_eq!(a.all_to_all(BASE, BASE + 256, 16, F32), Ok(256));
        let plan = a.all_to_allv(BASE, &[1, 2, 3, 4], &[0, 1, 3, 6], BASE + 4096, &[4, 2, 1, 0], &[0, 4, 6, 7], F32);
        assert_eq!(plan.unwrap().send_bytes[..4], [4, 8, 12, 16]);
        let ops = [
            P2pOp { kind: P2pKind::Send, peer: 1, ptr: BASE, count: 4, dtype: F32 },
            P2pOp { kind: P2pKind::Recv, peer: 1, ptr: BASE + 16, count: 4, dtype: F32 },
            P2pOp { kind: P2pKind::Send, peer: 3, ptr: BASE, count: 4, dtype: F32 },
        ];
        assert_eq!(a.send_recv(&ops), Ok(vec![]));
    }

    #[test]
    fn null_and_foreign_pointers_are_rejected() {
        let a = args();
        assert_err(a.all_reduce(0, BASE, 1, F32), "send buffer is null");
        assert_err(a.all_reduce(BASE, 0, 1, F32), "recv buffer is null");
        assert_err(a.all_reduce(BASE, 0x1000, 1, F32), "recv buffer: 4 bytes at 0x1000 are not device memory");
        // Past the end of the allocation.
        assert_err(a.all_reduce(BASE, BASE + SIZE as u64 - 4, 2, F32), "recv buffer");
        assert_err(a.rooted(false, 0, BASE, 1, F32, 3), "send buffer is null");
        let null_recv = P2pOp { kind: P2pKind::Recv, peer: 0, ptr: 0, count: 1, dtype: F32 };
        assert_err(a.send_recv(&[null_recv]), "recv buffer is null");
    }

    #[test]
    fn counts_whose_bytes_overflow_are_rejected() {
        let a = args();
        assert_err(a.all_reduce(BASE, BASE, usize::MAX / 2, F32), "overflow");
        // Fits as elements and as one block, not as a block per rank.
        let huge = isize::MAX as usize / 8;
        assert_err(a.blocked(true, BASE, BASE, huge, F32), "x 4 elements of f32 overflow");
        assert_err(a.rooted(true, BASE, BASE, usize::MAX, DataType::U8, 0), "overflow");
        assert_err(a.all_to_all(BASE, BASE + 64, huge, F32), "overflow");
        assert_err(a.all_to_allv(BASE, &[0, usize::MAX, 0, 0], &[0; 4], BASE, &[0; 4], &[0; 4], F32), "overflow");
        assert_err(a.all_to_allv(BASE, &[0; 4], &[0, usize::MAX, 0, 0], BASE, &[0; 4], &[0; 4], F32), "overflow");
        let op = P2pOp { kind: P2pKind::Send, peer: 0, ptr: BASE, count: usize::MAX, dtype: F32 };
        assert_err(a.send_recv(&[op]), "overflow");
    }

    #[test]
    fn overlaps_outside_the_in_place_layout_are_rejected() {
        let a = args();
        assert_err(a.all_reduce(BASE, BASE + 4, 16, F32), "send and recv overlap without the in-place layout");
        // In place, rank 1's block is at recv + 64 (gather) or send + 64 (scatter), not at 0.
        assert_err(a.blocked(true, BASE, BASE, 16, F32), "in place means send = recv + 64");
        assert_err(a.blocked(false, BASE, BASE, 16, F32), "in place means recv = send + 64");
        assert_err(a.rooted(true, BASE, BASE + 4, 16, F32, 1), "overlap without the in-place layout");
        assert_err(a.all_to_all(BASE, BASE, 16, F32), "send and recv overlap");
        assert_err(a.all_to_all_in_place(BASE, BASE + 4, 256), "overlap without being equal");
        let overlapping = a.all_to_allv(BASE, &[4; 4], &[0, 4, 8, 12], BASE + 32, &[4; 4], &[0, 4, 8, 12], F32);
        assert_err(overlapping, "overlap");
        let ops = [
            P2pOp { kind: P2pKind::Send, peer: 0, ptr: BASE, count: 4, dtype: F32 },
            P2pOp { kind: P2pKind::Recv, peer: 2, ptr: BASE + 8, count: 4, dtype: F32 },
        ];
        assert_err(a.send_recv(&ops), "a send buffer overlaps a recv buffer of the same group");
        // Two sends may share a source.
        let sends = [ops[0], P2pOp { peer: 2, ..ops[0] }];
        assert_eq!(a.send_recv(&sends), Ok(vec![]));
        // Two receives into one buffer may not, even exactly.
        let recvs = [ops[1], P2pOp { peer: 0, ..ops[1] }];
        assert_err(a.send_recv(&recvs), "a recv buffer overlaps a recv buffer");
    }

    #[test]
    fn in_place_all_to_all_and_send_receive_take_exactly_equal_buffers() {
        let a = args();
        assert_eq!(a.all_to_all_in_place(BASE, BASE, 256), Ok(true));
        assert_eq!(a.all_to_all_in_place(BASE, BASE + 256, 256), Ok(false));
        // Empty calls are never in place, whatever the pointers.
        assert_eq!(a.all_to_all_in_place(0, 0, 0), Ok(false));
        assert_err(a.all_to_all_in_place(BASE, BASE + 16, 256), "overlap without being equal");
        assert_err(a.all_to_all_in_place(BASE + 16, BASE, 256), "in place means sendbuff == recvbuff");
        // In place, recv must still be device memory of this GPU.
        assert_err(a.all_to_all_in_place(0x1000, 0x1000, 256), "recv buffer");
        let op = |kind, peer, ptr, count| P2pOp { kind, peer, ptr, count, dtype: F32 };
        // Send to 2 and receive from 0 through the same buffer, as nccl-tests' in-place
        // send/receive does; the send (index 0 or 1) is the one staged.
        let ring = [op(P2pKind::Send, 2, BASE, 8), op(P2pKind::Recv, 0, BASE, 8)];
        assert_eq!(a.send_recv(&ring), Ok(vec![0]));
        let reversed = [ring[1], ring[0]];
        assert_eq!(a.send_recv(&reversed), Ok(vec![1]));
        // An in-place all-to-all as a group: block p is sent to p and received from p.
        let blocks: Vec<P2pOp> = (0..4)
            .flat_map(|p| {
                [op(P2pKind::Send, p, BASE + 32 * p as u64, 8), op(P2pKind::Recv, p, BASE + 32 * p as u64, 8)]
            })
            .collect();
        assert_eq!(a.send_recv(&blocks), Ok(vec![0, 2, 4, 6]));
        // Partially overlapping, or of another length: refused.
        assert_err(a.send_recv(&[ring[0], op(P2pKind::Recv, 0, BASE + 4, 8)]), "same address and length");
        assert_err(a.send_recv(&[ring[0], op(P2pKind::Recv, 0, BASE, 4)]), "a send buffer overlaps a recv buffer");
    }

    #[test]
    fn roots_and_peers_out_of_range_are_rejected() {
        let a = args();
        assert_err(a.rooted(true, BASE, BASE, 1, F32, 4), "root 4 out of range for 4 ranks");
        assert_err(a.rooted(false, BASE, BASE, 1, F32, usize::MAX), "out of range");
        let op = P2pOp { kind: P2pKind::Send, peer: 4, ptr: BASE, count: 1, dtype: F32 };
        assert_err(a.send_recv(&[op]), "peer 4 out of range for 4 ranks");
        // A send to this rank (1) needs a receive from it of the same size.
        let to_self = P2pOp { peer: 1, ..op };
        assert_err(a.send_recv(&[to_self]), "a send to this rank needs a receive");
    }

    #[test]
    fn all_to_allv_lengths_and_self_transfers_must_match() {
        let a = args();
        let (c, d) = ([1; 4], [0, 1, 2, 3]);
        assert_err(a.all_to_allv(BASE, &c[..3], &d, BASE + 64, &c, &d, F32), "needs 4 counts and displacements");
        assert_err(a.all_to_allv(BASE, &c, &d[..3], BASE + 64, &c, &d, F32), "needs 4");
        assert_err(a.all_to_allv(BASE, &c, &d, BASE + 64, &[1; 5], &[0; 5], F32), "needs 4");
        assert_err(a.all_to_allv(BASE, &c, &d, BASE + 64, &c, &[], F32), "needs 4");
        assert_err(
            a.all_to_allv(BASE, &c, &d, BASE + 64, &[1, 2, 1, 1], &[0, 1, 3, 4], F32),
            "sends 4 bytes to itself but receives 8",
        );
        assert_err(a.all_to_allv(BASE, &c, &d, 0x10, &c, &d, F32), "recv block");
    }

    #[test]
    fn send_recv_groups_split_into_rounds_matched_per_peer_and_direction() {
        let op = |kind, peer, ptr, count| P2pOp { kind, peer, ptr, count, dtype: F32 };
        let ops = [
            op(P2pKind::Send, 1, 0x100, 4),
            op(P2pKind::Send, 1, 0x200, 8),
            op(P2pKind::Recv, 1, 0x300, 2),
            op(P2pKind::Recv, 2, 0x400, 1),
        ];
        let first = p2p_round(&ops, 0).unwrap();
        assert_eq!((first.send_ptr[1], first.send_bytes[1]), (0x100, 16));
        assert_eq!((first.recv_ptr[1], first.recv_bytes[1]), (0x300, 8));
        assert_eq!((first.recv_ptr[2], first.recv_bytes[2]), (0x400, 4));
        let second = p2p_round(&ops, 1).unwrap();
        assert_eq!((second.send_ptr[1], second.send_bytes[1]), (0x200, 32));
        assert_eq!(second.recv_bytes, [0; MAX_RANKS]);
        assert!(p2p_round(&ops, 2).is_none());
        assert!(p2p_round(&[], 0).is_none());
    }

    #[test]
    fn buffers_overlap_only_when_they_share_a_byte() {
        let b = |ptr, len| Buffer { what: "x", ptr, len };
        assert!(b(0, 16).overlaps(&b(15, 1)));
        assert!(!b(0, 16).overlaps(&b(16, 16)));
        assert!(!b(0, 0).overlaps(&b(0, 16)));
    }
}
