//! The multi-node AllReduce algorithms the model knows, by name.

use crate::ModelError;

/// A multi-node AllReduce algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// weft's `port_ring` (MSCCL++ "2PR"): one ring over all p ranks in rank order, every edge
    /// a PortChannel (so every hop, within a node too, is posted by a proxy); reduce-scatter
    /// then all-gather, 2(p − 1) steps of n/p.
    Ring,
    /// weft's `port_allpairs`: every rank puts its whole input to every other rank and sums
    /// what it receives; one step.
    AllPairs,
    /// MSCCL++'s hierarchical two-phase AllReduce ("2PH"), internode all-pairs: reduce-scatter
    /// within each node (ring over NVLink), then the G ranks of each local index exchange their
    /// n/G shard all-pairs across the nodes, then all-gather within each node.
    TwoPhase,
    /// 2PH with a ring across the nodes instead of all-pairs (reduce-scatter then all-gather of
    /// the shard over the N ranks of a local index).
    TwoPhaseRing,
    /// NVRAR: reduce-scatter within each node, recursive doubling across nodes among the ranks
    /// of a local index with LL-style fused data and flag (payload η times the data), all-gather
    /// within each node. Any node count: the standard fix-up folds the nodes beyond the largest
    /// power of two in before and hands them the result after (two extra steps).
    Nvrar,
    /// NCCL's ring: the same flat ring as [`Algorithm::Ring`], but NVLink hops are SM copies and
    /// only network hops go through NCCL's proxy.
    NcclRing,
    /// NCCL's tree: a double binary tree across nodes (each tree carries half the vector, up
    /// reducing and back down, pipelined in pieces) with a chain within each node.
    NcclTree,
}

impl Algorithm {
    /// Every algorithm, in the order tables show them.
    pub const ALL: [Algorithm; 7] = [
        Algorithm::Ring,
        Algorithm::AllPairs,
        Algorithm::TwoPhase,
        Algorithm::TwoPhaseRing,
        Algorithm::Nvrar,
        Algorithm::NcclRing,
        Algorithm::NcclTree,
    ];

    /// The name on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::AllPairs => "allpairs",
            Algorithm::TwoPhase => "2ph",
            Algorithm::TwoPhaseRing => "2ph-ring",
            Algorithm::Nvrar => "nvrar",
            Algorithm::NcclRing => "nccl-ring",
            Algorithm::NcclTree => "nccl-tree",
        }
    }

    /// Every name, in [`Algorithm::ALL`]'s order.
    pub fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|a| a.name()).collect()
    }

    /// The algorithm called `name`.
    pub fn parse(name: &str) -> Result<Self, ModelError> {
        Self::ALL.into_iter().find(|a| a.name() == name).ok_or_else(|| ModelError::UnknownAlgorithm(name.to_string()))
    }

    /// A comma-separated list of names, or `all`.
    pub fn parse_list(list: &str) -> Result<Vec<Self>, ModelError> {
        if list.trim() == "all" {
            return Ok(Self::ALL.to_vec());
        }
        list.split(',').map(|name| Self::parse(name.trim())).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_and_lists_accept_all() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::parse(a.name()).unwrap(), a);
        }
        assert_eq!(Algorithm::parse_list("all").unwrap(), Algorithm::ALL.to_vec());
        assert_eq!(Algorithm::parse_list("nvrar, ring").unwrap(), vec![Algorithm::Nvrar, Algorithm::Ring]);
        let unknown = Algorithm::parse_list("ring,tree").unwrap_err().to_string();
        assert!(unknown.contains("`tree`") && unknown.contains("nccl-tree"), "{unknown}");
    }
}
