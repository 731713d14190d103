//! What `weft bench` needs to know about each collective, in nccl-tests' conventions: how a
//! size becomes buffer lengths and the call's count, the bus-bandwidth factor, where the
//! in-place variant puts input and output, and which input element every output element must
//! equal (the one definition the host check uses).

pub use weft_coll::Collective;

/// Buffer lengths and call arguments of one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Elements of each rank's input.
    pub send_count: usize,
    /// Elements of each rank's output.
    pub recv_count: usize,
    /// The count passed to the call (nccl-tests' count column): per rank for allgather and
    /// reducescatter, per peer for alltoall, the whole buffer otherwise.
    pub count: usize,
    /// Bytes of the larger buffer (nccl-tests' size column; algbw = bytes / time).
    pub bytes: usize,
    /// The rank a rooted collective (broadcast, reduce) starts from or ends at; 0 for the
    /// others.
    pub root: u32,
}

/// Where one output element's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Bitwise element `index` of rank `rank`'s input.
    Copy {
        /// The rank whose input holds it.
        rank: u32,
        /// Its index in that input.
        index: u64,
    },
    /// The reduction of element `index` of every rank's input.
    Reduced {
        /// Index in every input.
        index: u64,
    },
}

/// nccl-tests' conventions for each collective, as `weft bench` and `weft tune` size, time
/// and check it.
pub trait NcclTests: Copy {
    /// nccl-tests' bus-bandwidth factor for `ranks` ranks (busbw = algbw × factor).
    fn bus_factor(self, ranks: usize) -> f64;
    /// Whether the call has a root (broadcast, reduce).
    fn rooted(self) -> bool;
    /// The roots a call on `ranks` ranks can take: every rank for a rooted collective, 0 for
    /// the others.
    fn roots(self, ranks: u32) -> std::ops::Range<u32> {
        0..if self.rooted() { ranks.max(1) } else { 1 }
    }
    /// A call's root in words, for descriptions and titles: ` root r` for a rooted collective,
    /// nothing for the others.
    fn at_root(self, root: u32) -> String {
        if self.rooted() { format!(" root {root}") } else { String::new() }
    }
    /// The shape of a row of `bytes` requested bytes, as nccl-tests rounds it, rooted at `root`
    /// where the collective has a root (the others get 0); `None` when it holds no element (per
    /// rank or per peer).
    fn shape(self, bytes: usize, elt: usize, ranks: usize, root: u32) -> Option<Shape>;
    /// In place, the byte offsets of the input and of the output inside the one buffer
    /// (nccl-tests: allgather's input is the rank's block of the output, reducescatter's
    /// output the rank's block of the input).
    fn in_place_offsets(self, shape: &Shape, elt: usize, rank: u32) -> (usize, usize);
    /// Whether `rank`'s output of a call of `shape` is defined (reduce: only the root's).
    fn has_output(self, shape: &Shape, rank: u32) -> bool;
    /// Whether every rank's output must be bitwise the same.
    fn same_output_everywhere(self) -> bool;
    /// Where element `index` of `rank`'s output comes from.
    fn source(self, shape: &Shape, rank: u32, ranks: u32, index: u64) -> Source;
}

impl NcclTests for Collective {
    fn bus_factor(self, ranks: usize) -> f64 {
        let n = ranks.max(1) as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => (n - 1.0) / n,
            Collective::Broadcast | Collective::Reduce | Collective::SendRecv => 1.0,
        }
    }

    fn rooted(self) -> bool {
        matches!(self, Collective::Broadcast | Collective::Reduce)
    }

    fn shape(self, bytes: usize, elt: usize, ranks: usize, root: u32) -> Option<Shape> {
        let total = bytes / elt.max(1);
        let n = ranks.max(1);
        let (send_count, recv_count, count) = match self {
            Collective::AllGather => (total / n, total / n * n, total / n),
            Collective::ReduceScatter => (total / n * n, total / n, total / n),
            Collective::AllToAll => (total / n * n, total / n * n, total / n),
            _ => (total, total, total),
        };
        let root = if self.rooted() { root } else { 0 };
        (count > 0).then_some(Shape { send_count, recv_count, count, bytes: send_count.max(recv_count) * elt, root })
    }

    fn in_place_offsets(self, shape: &Shape, elt: usize, rank: u32) -> (usize, usize) {
        let r = rank as usize;
        match self {
            Collective::AllGather => (r * shape.send_count * elt, 0),
            Collective::ReduceScatter => (0, r * shape.recv_count * elt),
            _ => (0, 0),
        }
    }

    fn has_output(self, shape: &Shape, rank: u32) -> bool {
        self != Collective::Reduce || rank == shape.root
    }

    fn same_output_everywhere(self) -> bool {
        matches!(self, Collective::AllReduce | Collective::AllGather | Collective::Broadcast)
    }

    fn source(self, shape: &Shape, rank: u32, ranks: u32, index: u64) -> Source {
        let block = shape.count as u64;
        match self {
            Collective::AllReduce | Collective::Reduce => Source::Reduced { index },
            Collective::AllGather => Source::Copy { rank: (index / block) as u32, index: index % block },
            Collective::ReduceScatter => Source::Reduced { index: u64::from(rank) * block + index },
            Collective::AllToAll => {
                Source::Copy { rank: (index / block) as u32, index: u64::from(rank) * block + index % block }
            }
            Collective::Broadcast => Source::Copy { rank: shape.root, index },
            Collective::SendRecv => Source::Copy { rank: (rank + ranks - 1) % ranks, index },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_aliases_parse() {
        for c in Collective::ALL {
            assert_eq!(Collective::parse(c.name()).unwrap(), c);
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{}\"", c.name()));
        }
        assert_eq!(Collective::parse("all_gather").unwrap(), Collective::AllGather);
        assert_eq!(Collective::parse("Reduce-Scatter").unwrap(), Collective::ReduceScatter);
        assert!(Collective::parse("gather").is_err());
    }

    #[test]
    fn shapes_follow_nccl_tests() {
        // 1000 bytes of f32 on 3 ranks: 250 elements, 83 per rank.
        let s = |c: Collective| c.shape(1000, 4, 3, 0).unwrap();
        let shape = |send_count, recv_count, count, bytes| Shape { send_count, recv_count, count, bytes, root: 0 };
        assert_eq!(s(Collective::AllReduce), shape(250, 250, 250, 1000));
        assert_eq!(s(Collective::AllGather), shape(83, 249, 83, 996));
        assert_eq!(s(Collective::ReduceScatter), shape(249, 83, 83, 996));
        assert_eq!(s(Collective::AllToAll), shape(249, 249, 83, 996));
        assert_eq!(s(Collective::SendRecv).count, 250);
        assert_eq!(Collective::AllGather.shape(8, 4, 4, 0), None);
        assert_eq!(Collective::Broadcast.shape(3, 4, 4, 0), None);
        assert_eq!(Collective::AllGather.in_place_offsets(&s(Collective::AllGather), 4, 2), (2 * 83 * 4, 0));
        assert_eq!(Collective::ReduceScatter.in_place_offsets(&s(Collective::ReduceScatter), 4, 2), (0, 2 * 83 * 4));
    }

    #[test]
    fn only_rooted_collectives_keep_their_root() {
        for c in Collective::ALL {
            let root = c.shape(64, 4, 4, 3).unwrap().root;
            assert_eq!(root, if c.rooted() { 3 } else { 0 }, "{c}");
        }
        assert!(Collective::Broadcast.rooted() && Collective::Reduce.rooted() && !Collective::AllReduce.rooted());
    }

    #[test]
    fn bus_factors_follow_nccl_tests() {
        assert_eq!(Collective::AllReduce.bus_factor(4), 1.5);
        assert_eq!(Collective::AllGather.bus_factor(4), 0.75);
        assert_eq!(Collective::ReduceScatter.bus_factor(4), 0.75);
        assert_eq!(Collective::AllToAll.bus_factor(4), 0.75);
        assert_eq!(Collective::Broadcast.bus_factor(4), 1.0);
        assert_eq!(Collective::Reduce.bus_factor(4), 1.0);
        assert_eq!(Collective::SendRecv.bus_factor(4), 1.0);
    }
}
