//! Checked calls (`WEFT_CHECK_CALLS=1`): before a collective enqueues anything, every rank
//! exchanges the call it is making over the bootstrap and compares it with the others'.
//!
//! **Why.** A program whose ranks disagree on a call (a different collective, count, type,
//! operator or root) is wrong, and the device protocols cannot always tell: two ranks summing
//! 1024 `f32` and 1024 `i32` move the same bytes and finish "successfully" with garbage. Without
//! the check weft, as NCCL, only bounds the damage (a size mismatch times out naming the wait).
//! With it, the mismatch is an error on every rank, naming both calls, and nothing is launched
//! anywhere, so the communicator stays usable.
//!
//! **Cost.** One bootstrap all-gather of a few dozen bytes per call on the host (a message
//! from and to every rank over the bootstrap's sockets, on the calling thread before anything
//! is enqueued): a debugging mode, as PyTorch's
//! `TORCH_DISTRIBUTED_DEBUG=DETAIL`. A call captured into a CUDA graph is checked once, at
//! capture; replays are not. The exchange waits for every rank, so a program driving several
//! ranks from one thread must issue each rank's calls on a thread of its own (`libnccl.so.2`
//! does that itself for the calls of a group, as for captured calls).
//!
//! **Every rank decides alike.** Each rank compares all the signatures it gathered, which are
//! the same bytes on every rank, so either every rank reports the same disagreement or none
//! does. A rank whose own arguments were refused still takes part, carrying the refusal, so its
//! peers fail at once naming it instead of waiting out the bootstrap timeout.
//!
//! What is compared: the call's number on each rank (a rank that skipped a call shows up here);
//! the collective, element type, operator (for the reducing ones) and count; the root of
//! Broadcast and Reduce; for AllToAll(v), the bytes each rank sends to each peer against the
//! bytes that peer expects from it. Grouped send/receive is not checked: its operations involve
//! only the peers named, so an exchange among all ranks could wait on ranks that are not
//! calling.
//!
//! Wire format (little-endian): `call u64 | collective, type, operator: u8 length + name |
//! count u64 | root u32 (u32::MAX: none) | peers u32 (u32::MAX: no transfers), then per peer send u64
//! and receive u64 |
//! refusal: u32 length + UTF-8 (0: none)`.

use weft_bootstrap::{
    Bootstrap,
    codec::{CodecError, Reader, Writer},
};
use weft_types::{Collective, DataType, ReduceOp};

/// No root (written as `u32::MAX`).
const NO_ROOT: u32 = u32::MAX;
/// No transfers: not an AllToAll(v) (written as `u32::MAX` peers).
const NO_TRANSFERS: u32 = u32::MAX;

/// One rank's description of the call it is making.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CallSignature {
    /// How many checked calls this rank made before this one.
    pub(crate) call: u64,
    pub(crate) collective: Collective,
    pub(crate) dtype: DataType,
    /// The operator of a reducing collective; `None` for the others.
    pub(crate) op: Option<ReduceOp>,
    /// Elements as the call counts them (AllGather: sent; ReduceScatter: received; AllToAll:
    /// per block). Not compared for transfers, whose bytes per peer are.
    pub(crate) count: u64,
    /// The root of Broadcast and Reduce.
    pub(crate) root: Option<u32>,
    /// AllToAll(v): bytes this rank sends to and receives from each rank, indexed by rank.
    pub(crate) transfers: Option<Vec<(u64, u64)>>,
    /// Why this rank refused its own call (its arguments), if it did.
    pub(crate) refused: Option<String>,
}

impl CallSignature {
    /// A call of `collective` on `count` elements of `dtype`; `op` is kept only for the
    /// reducing collectives.
    pub(crate) fn new(collective: Collective, dtype: DataType, op: ReduceOp, count: usize) -> Self {
        Self {
            call: 0,
            collective,
            dtype,
            op: collective.reduces().then_some(op),
            count: count as u64,
            root: None,
            transfers: None,
            refused: None,
        }
    }

    /// The same call with `root`.
    pub(crate) fn rooted(mut self, root: usize) -> Self {
        self.root = Some(u32::try_from(root).unwrap_or(NO_ROOT - 1));
        self
    }

    /// The same call moving `send[p]` bytes to and `recv[p]` bytes from each rank `p`.
    pub(crate) fn transferring(mut self, send: &[u64], recv: &[u64]) -> Self {
        self.transfers = Some(send.iter().copied().zip(recv.iter().copied()).collect());
        self
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.put_u64(self.call);
        for name in [self.collective.name(), self.dtype.name(), self.op.map_or("", ReduceOp::name)] {
            // Names are a few ASCII letters.
            w.put_u8(name.len() as u8);
            w.put_bytes(name.as_bytes());
        }
        w.put_u64(self.count);
        w.put_u32(self.root.unwrap_or(NO_ROOT));
        let transfers = self.transfers.as_deref().unwrap_or_default();
        w.put_u32(self.transfers.as_ref().map_or(NO_TRANSFERS, |t| t.len() as u32));
        for &(send, recv) in transfers {
            w.put_u64(send);
            w.put_u64(recv);
        }
        let refused = self.refused.as_deref().unwrap_or_default();
        w.put_u32(refused.len() as u32);
        w.put_bytes(refused.as_bytes());
        w.into_inner()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, CodecError> {
        let mut r = Reader::new(bytes);
        let call = r.u64()?;
        let mut name = |field: &'static str| -> Result<String, CodecError> {
            let len = usize::from(r.u8()?);
            let text =
                std::str::from_utf8(r.take(len)?).map_err(|_| CodecError::InvalidValue { field, value: len as u64 })?;
            Ok(text.to_string())
        };
        let (collective, dtype, op) = (name("collective")?, name("element type")?, name("operator")?);
        let unknown = |field: &'static str| CodecError::InvalidValue { field, value: 0 };
        let collective = Collective::from_name(&collective).ok_or(unknown("collective"))?;
        let dtype = DataType::from_name(&dtype).ok_or(unknown("element type"))?;
        let op = match op.as_str() {
            "" => None,
            named => Some(ReduceOp::from_name(named).ok_or(unknown("operator"))?),
        };
        let count = r.u64()?;
        let root = Some(r.u32()?).filter(|&root| root != NO_ROOT);
        let peers = r.u32()?;
        let transfers = match peers {
            NO_TRANSFERS => None,
            // Each peer takes 16 bytes: a count beyond what is left is malformed, not an allocation.
            peers if peers as usize > r.remaining() / 16 => {
                return Err(CodecError::InvalidValue { field: "peers", value: peers.into() });
            }
            peers => Some((0..peers).map(|_| Ok((r.u64()?, r.u64()?))).collect::<Result<Vec<_>, CodecError>>()?),
        };
        let len = r.u32()? as usize;
        let refused = std::str::from_utf8(r.take(len)?)
            .map_err(|_| CodecError::InvalidValue { field: "refusal", value: len as u64 })?;
        let refused = (!refused.is_empty()).then(|| refused.to_string());
        r.finish()?;
        Ok(Self { call, collective, dtype, op, count, root, transfers, refused })
    }

    /// The call in words: `allreduce of 1024 f32 with sum`, `broadcast of 8 bf16 from rank 1`,
    /// `alltoall of u8`.
    fn describe(&self) -> String {
        let mut text = match self.transfers {
            Some(_) => format!("{} of {}", self.collective, self.dtype.name()),
            None => format!("{} of {} {}", self.collective, self.count, self.dtype.name()),
        };
        if let Some(op) = self.op {
            text += &format!(" with {}", op.name());
        }
        if let Some(root) = self.root {
            text += &format!(" from rank {root}");
        }
        text
    }

    /// Everything two ranks' calls must share, the transfers aside.
    fn shape(&self) -> (Collective, DataType, Option<ReduceOp>, Option<u64>, Option<u32>, bool) {
        let count = self.transfers.is_none().then_some(self.count);
        (self.collective, self.dtype, self.op, count, self.root, self.transfers.is_some())
    }
}

/// Why the calls `all` (rank r's at index r) cannot run together, or `None` when they can. The
/// first refusal wins, then the first rank whose call differs from rank 0's, then the first
/// direction whose ends disagree on its bytes.
pub(crate) fn disagreement(all: &[CallSignature]) -> Option<String> {
    let first = all.first()?;
    if let Some((rank, sig)) = all.iter().enumerate().find(|(_, s)| s.refused.is_some()) {
        // Only the collective and type: a call the typed layer refused never got as far as a
        // count (its signature's count and operator are placeholders); the refusal says why.
        let why = sig.refused.as_deref().unwrap_or_default();
        let call = format!("{} of {}", sig.collective, sig.dtype.name());
        return Some(format!("rank {rank} refused its call {} ({call}): {why}", sig.call));
    }
    for (rank, sig) in all.iter().enumerate().skip(1) {
        if sig.call != first.call {
            return Some(format!(
                "rank {rank} is at its call {} and rank 0 at its call {}: a rank skipped or added a call",
                sig.call, first.call
            ));
        }
        if sig.shape() != first.shape() {
            return Some(format!(
                "call {}: rank 0 calls {}, rank {rank} calls {}",
                first.call,
                first.describe(),
                sig.describe()
            ));
        }
    }
    let ranks = all.len();
    let transfers: Vec<&[(u64, u64)]> = all.iter().filter_map(|s| s.transfers.as_deref()).collect();
    if let Some(rank) = transfers.iter().position(|t| t.len() != ranks) {
        return Some(format!("call {}: rank {rank} names {} peers of {ranks}", first.call, transfers[rank].len()));
    }
    for (from, sends) in transfers.iter().enumerate() {
        for (to, &(sent, _)) in sends.iter().enumerate() {
            let expected = transfers[to][from].1;
            if sent != expected {
                return Some(format!(
                    "call {} ({}): rank {from} sends {sent} bytes to rank {to}, which expects {expected} bytes from it",
                    first.call,
                    first.describe()
                ));
            }
        }
    }
    None
}

/// What the exchange of one call found.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Every rank makes the same call.
    Agreed,
    /// The calls cannot run together: why, the same text on every rank.
    Disagree(String),
}

/// Exchanges `mine` with every rank over `bootstrap` and compares the calls.
pub(crate) fn exchange(bootstrap: &dyn Bootstrap, mine: &CallSignature) -> Result<Verdict, ExchangeError> {
    let gathered = bootstrap.all_gather(&mine.encode()).map_err(ExchangeError::Bootstrap)?;
    let all = gathered
        .iter()
        .enumerate()
        .map(|(rank, bytes)| CallSignature::decode(bytes).map_err(|source| ExchangeError::Malformed { rank, source }))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(disagreement(&all).map_or(Verdict::Agreed, Verdict::Disagree))
}

/// The exchange itself failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExchangeError {
    #[error(transparent)]
    Bootstrap(weft_bootstrap::BootstrapError),
    #[error("rank {rank}'s call signature is malformed: {source}")]
    Malformed { rank: usize, source: CodecError },
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_bootstrap::InProcessBootstrap;

    fn all_reduce(count: usize, dtype: DataType) -> CallSignature {
        CallSignature::new(Collective::AllReduce, dtype, ReduceOp::Sum, count)
    }

    /// Rank r's AllToAll(v) signature from a matrix of bytes `m[from][to]`.
    fn all_to_all(m: &[Vec<u64>], rank: usize) -> CallSignature {
        let recv: Vec<u64> = m.iter().map(|row| row[rank]).collect();
        CallSignature::new(Collective::AllToAll, DataType::U8, ReduceOp::Sum, 0).transferring(&m[rank], &recv)
    }

    #[test]
    fn signatures_round_trip_and_refuse_garbage() {
        let sigs = [
            all_reduce(1024, DataType::F32),
            CallSignature::new(Collective::Broadcast, DataType::Bf16, ReduceOp::Max, 7).rooted(3),
            all_to_all(&[vec![1, 2], vec![3, 4]], 1),
            // An AllToAll(v) with no peers stays one (not a call without transfers).
            CallSignature::new(Collective::AllToAll, DataType::U8, ReduceOp::Sum, 0).transferring(&[], &[]),
            CallSignature { call: 99, refused: Some("send is null".into()), ..all_reduce(0, DataType::I8) },
        ];
        for sig in sigs {
            assert_eq!(CallSignature::decode(&sig.encode()).unwrap(), sig);
            let bytes = sig.encode();
            for cut in 0..bytes.len() {
                assert!(CallSignature::decode(&bytes[..cut]).is_err(), "{sig:?} cut at {cut}");
            }
        }
        // A broadcast carries no operator whatever the caller passed.
        assert_eq!(CallSignature::new(Collective::Broadcast, DataType::F32, ReduceOp::Max, 1).op, None);
        let mut bytes = all_reduce(1, DataType::F32).encode();
        bytes[9..18].copy_from_slice(b"allreducx");
        assert!(CallSignature::decode(&bytes).is_err());
        // A peer count far beyond the bytes is refused before anything is allocated.
        let mut huge = all_reduce(1, DataType::F32).encode();
        let at = huge.len() - 8;
        huge[at..at + 4].copy_from_slice(&(u32::MAX - 1).to_le_bytes());
        assert!(CallSignature::decode(&huge).is_err());
    }

    #[test]
    fn equal_calls_agree() {
        assert_eq!(disagreement(&vec![all_reduce(1024, DataType::F32); 4]), None);
        let m = vec![vec![0, 8, 16], vec![4, 0, 0], vec![32, 8, 8]];
        assert_eq!(disagreement(&(0..3).map(|r| all_to_all(&m, r)).collect::<Vec<_>>()), None);
        assert_eq!(disagreement(&[]), None);
    }

    #[test]
    fn every_difference_is_named() {
        let base = all_reduce(1024, DataType::F32);
        let cases = [
            (
                all_reduce(1024, DataType::I32),
                "rank 0 calls allreduce of 1024 f32 with sum, rank 2 calls allreduce of 1024 i32 with sum",
            ),
            (all_reduce(1000, DataType::F32), "rank 2 calls allreduce of 1000 f32 with sum"),
            (CallSignature::new(Collective::AllReduce, DataType::F32, ReduceOp::Max, 1024), "with max"),
            (
                CallSignature::new(Collective::AllGather, DataType::F32, ReduceOp::Sum, 1024),
                "rank 2 calls allgather of 1024 f32",
            ),
            (CallSignature { call: 5, ..base.clone() }, "rank 2 is at its call 5 and rank 0 at its call 0"),
            (
                CallSignature { refused: Some("recv is null".into()), ..base.clone() },
                "rank 2 refused its call 0 (allreduce of f32): recv is null",
            ),
        ];
        for (odd, expected) in cases {
            let all = [base.clone(), base.clone(), odd];
            let why = disagreement(&all).expect("a disagreement");
            assert!(why.contains(expected), "{why}");
        }
        // A call the typed layer refused (`Collectives::exchanged`: no count, no operator yet)
        // is not described with the placeholders its signature carries.
        let early = CallSignature {
            refused: Some("recv holds 1001 elements, 1000 expected".into()),
            ..CallSignature::new(Collective::AllReduce, DataType::F32, ReduceOp::Sum, 0)
        };
        let why = disagreement(&[base.clone(), early]).unwrap();
        assert_eq!(why, "rank 1 refused its call 0 (allreduce of f32): recv holds 1001 elements, 1000 expected");
        let root = |r| CallSignature::new(Collective::Reduce, DataType::F32, ReduceOp::Sum, 8).rooted(r);
        assert!(disagreement(&[root(0), root(1)]).unwrap().contains(
            "rank 0 calls reduce of 8 f32 with sum from rank 0, rank 1 calls reduce of 8 f32 with sum from rank 1"
        ));
    }

    #[test]
    fn transfers_must_match_end_to_end() {
        let m = vec![vec![0, 8, 16], vec![4, 0, 0], vec![32, 8, 8]];
        let mut all: Vec<_> = (0..3).map(|r| all_to_all(&m, r)).collect();
        // Rank 2 now expects 12 bytes from rank 0, which sends 16.
        all[2].transfers.as_mut().unwrap()[0].1 = 12;
        let why = disagreement(&all).unwrap();
        assert!(why.contains("rank 0 sends 16 bytes to rank 2, which expects 12 bytes from it"), "{why}");
        all[1].transfers.as_mut().unwrap().pop();
        assert!(disagreement(&all).unwrap().contains("rank 1 names 2 peers of 3"));
        // An AllToAll against an AllReduce of the same bytes is a different call.
        let why = disagreement(&[all_to_all(&m, 0), all_reduce(24, DataType::U8)]).unwrap();
        assert!(why.contains("rank 1 calls allreduce of 24 u8 with sum"), "{why}");
    }

    #[test]
    fn every_rank_reports_the_same_disagreement_over_the_bootstrap() {
        let ranks = InProcessBootstrap::group(3).unwrap();
        let verdicts: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = ranks
                .iter()
                .map(|bs| {
                    s.spawn(move || {
                        let dtype = if bs.rank() == 1 { DataType::Bf16 } else { DataType::F16 };
                        let mut outcomes = Vec::new();
                        // One agreed call, then the mismatch: the exchanges stay in step.
                        for sig in [all_reduce(64, DataType::F32), all_reduce(64, dtype)] {
                            outcomes.push(match exchange(bs, &sig).unwrap() {
                                Verdict::Agreed => "agreed".to_string(),
                                Verdict::Disagree(why) => why,
                            });
                        }
                        outcomes.join("; ")
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let expected =
            "agreed; call 0: rank 0 calls allreduce of 64 f16 with sum, rank 1 calls allreduce of 64 bf16 with sum";
        assert_eq!(verdicts, vec![expected; 3]);
    }
}
