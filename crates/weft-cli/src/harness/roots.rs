//! The roots a checked call of a rooted collective (broadcast, reduce) can take: every rank of
//! the communicator for a native algorithm, the ranks a plan builds at for a plan (a user plan
//! may be written for one root).

use weft_coll::{Algorithm, Nodes};

use super::NcclTests;

/// The roots `algorithm` runs its collective at on `ranks` ranks laid out as `nodes`, in rank
/// order: `[0]` for a collective without a root.
pub(crate) fn roots(algorithm: Algorithm, ranks: usize, nodes: &Nodes) -> Vec<u32> {
    let collective = algorithm.collective();
    collective
        .roots(ranks as u32)
        .filter(|&root| match algorithm {
            Algorithm::Plan(id) if collective.rooted() => id.plan_at(nodes, root as usize).is_ok(),
            _ => true,
        })
        .collect()
}

/// The root of call `k` of a sequence that cycles through `roots` (not empty), so that
/// consecutive calls change root and every root comes round.
pub(crate) fn cycled(roots: &[u32], k: usize) -> u32 {
    roots[k % roots.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Collective;
    use weft_coll::CollectiveAlgorithms;

    #[test]
    fn rooted_algorithms_run_at_every_rank_and_the_others_at_rank_0() {
        for ranks in 1..=8usize {
            let nodes = Nodes::one(ranks);
            for c in Collective::ALL {
                for a in c.algorithms().filter(|a| a.available(ranks)) {
                    let want: Vec<u32> = if c.rooted() { (0..ranks as u32).collect() } else { vec![0] };
                    assert_eq!(roots(a, ranks, &nodes), want, "{a} on {ranks} ranks");
                }
            }
        }
    }

    #[test]
    fn cycled_roots_change_between_calls_and_come_round() {
        let roots = [0, 1, 2];
        let seq: Vec<u32> = (0..7).map(|k| cycled(&roots, k)).collect();
        assert_eq!(seq, [0, 1, 2, 0, 1, 2, 0]);
    }
}
