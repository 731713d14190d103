//! `weft selftest --only multinode`: the AllReduces that cross nodes (`nvrar`, `plan:nvrar_allreduce`,
//! `plan:hier2ph_allreduce`, `port_ring`, `port_allpairs`) at every [`LAYOUTS`] entry whose
//! ranks the run has, each on virtual nodes of one host (`WEFT_RANKS_PER_NODE`) joined by the
//! emulated NIC delivering out of order (the chaos seed: `WEFT_EMU_NET_CHAOS` when set, else
//! [`CHAOS_SEED`]). The collective matrix checks them (every type and operator an algorithm
//! has, odd counts, out of place, in place, two CUDA-graph replays of each, every element
//! against the float64 reference, on every rank). The launcher runs the step once per rank
//! count of the layouts; a layout or algorithm that cannot be set up is a skip with its reason.

use std::sync::Arc;

use weft_core::env::vars::WEFT_EMU_NET_CHAOS;
use weft_core::{Communicator, Env};

use super::collectives::{self, Family};
use super::report::RankReport;
use crate::harness::gin_backend::{CHAOS_SEED, GinBackend};

/// Virtual nodes of a host: `nodes` of `per_node` ranks each, ranks numbered node after node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) nodes: usize,
    pub(super) per_node: usize,
}

impl Layout {
    pub(super) fn ranks(self) -> usize {
        self.nodes * self.per_node
    }

    pub(super) fn name(self) -> String {
        format!("{} nodes x {} rank{}", self.nodes, self.per_node, if self.per_node == 1 { "" } else { "s" })
    }
}

/// The layouts of the step: 2 and 4 nodes, one rank per node and 2 nodes of two; and 2 nodes
/// of eight (16 ranks: the shape of two 8-GPU servers, beyond the 8 ranks of one node), which
/// runs only when named (`--ranks 16`): its ranks share the GPUs as threads, a long run.
pub(super) const LAYOUTS: [Layout; 4] = [
    Layout { nodes: 2, per_node: 1 },
    Layout { nodes: 2, per_node: 2 },
    Layout { nodes: 4, per_node: 1 },
    Layout { nodes: 2, per_node: 8 },
];

/// The most ranks of a layout the step runs unless `--ranks` names a larger one.
const DEFAULT_MAX_RANKS: usize = 4;

/// The rank counts the launcher runs the step at: every layout's up to [`DEFAULT_MAX_RANKS`],
/// or `only` (`--ranks`).
pub(super) fn rank_counts(only: Option<usize>) -> Vec<usize> {
    let wanted = |r: usize| only.map_or(r <= DEFAULT_MAX_RANKS, |o| o == r);
    let mut counts: Vec<usize> = LAYOUTS.iter().map(|l| l.ranks()).filter(|&r| wanted(r)).collect();
    counts.dedup();
    counts
}

/// The layouts a run of `only` ranks (`--ranks`) leaves out, each with the reason.
pub(super) fn left_out(only: Option<usize>) -> Vec<String> {
    LAYOUTS
        .iter()
        .filter_map(|l| match only {
            Some(ranks) if l.ranks() != ranks => {
                Some(format!("multinode {}: needs {} ranks, the run has {ranks} (--ranks)", l.name(), l.ranks()))
            }
            None if l.ranks() > DEFAULT_MAX_RANKS => {
                Some(format!("multinode {}: runs only when named (--ranks {})", l.name(), l.ranks()))
            }
            _ => None,
        })
        .collect()
}

/// The environment of a layout's communicator: `base` with the layout's virtual nodes and the
/// emulated NIC delivering out of order.
fn layout_env(base: &Env, layout: Layout) -> (Env, String) {
    let seed = base.var(&WEFT_EMU_NET_CHAOS).map_or_else(|| CHAOS_SEED.to_string(), str::to_owned);
    let mut env = GinBackend::Chaos.env(base);
    env.set_var(&WEFT_EMU_NET_CHAOS, seed.clone());
    env.ranks_per_node = Some(layout.per_node);
    (env, seed)
}

/// Runs every layout of this rank count on `comm`'s bootstrap and device (collective).
pub(super) fn run(comm: &Communicator, base: &Env, label: &str, report: &mut RankReport) {
    for layout in LAYOUTS.into_iter().filter(|l| l.ranks() == comm.world_size()) {
        let (env, seed) = layout_env(base, layout);
        let label = format!("{label}multinode {} (emulated NIC, chaos seed {seed}): ", layout.name());
        match Communicator::new(Arc::clone(comm.bootstrap()), comm.device().clone(), env.clone()) {
            Ok(sub) => collectives::run(&sub, &env, &label, Family::MultiNode, report),
            Err(e) => report.record(format!("{label}communicator set-up"), Err(e)),
        }
        if let Err(e) = comm.barrier() {
            report.record(format!("{label}barrier after the layout"), Err(e));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layouts_span_two_and_four_nodes_and_runs_cover_each_once() {
        assert!(LAYOUTS.iter().any(|l| l.nodes == 2) && LAYOUTS.iter().any(|l| l.nodes == 4));
        assert_eq!(rank_counts(None), vec![2, 4]);
        assert_eq!(rank_counts(Some(4)), vec![4]);
        assert_eq!(rank_counts(Some(16)), vec![16]);
        assert!(rank_counts(Some(3)).is_empty());
        let by_default = left_out(None);
        assert_eq!(by_default.len(), 1);
        assert!(by_default[0].contains("2 nodes x 8 ranks: runs only when named (--ranks 16)"), "{by_default:?}");
        let skipped = left_out(Some(4));
        assert_eq!(skipped.len(), 2);
        assert!(skipped[0].contains("2 nodes x 1 rank: needs 2 ranks"), "{skipped:?}");
        assert_eq!(left_out(Some(3)).len(), LAYOUTS.len());
    }

    #[test]
    fn every_layout_sets_up_every_algorithm_and_a_ragged_one_says_why_not() {
        use weft_coll::{Algorithm, Collective, CollectiveAlgorithms, Nodes};
        let crossing: Vec<Algorithm> =
            Collective::AllReduce.algorithms().filter(|&a| Family::MultiNode.includes(a, true)).collect();
        assert_eq!(crossing.len(), 6);
        for layout in LAYOUTS {
            let nodes = Nodes::virtual_nodes(layout.ranks(), layout.per_node);
            for &a in &crossing {
                let runs = collectives::runs_on(a, &nodes);
                // All pairs keeps a slot per rank in arrays of 8: beyond, a skip with the reason.
                if a == Algorithm::AllReducePortAllPairs && layout.ranks() > 8 {
                    assert!(runs.unwrap_err().contains("at most 8 ranks"), "{}", layout.name());
                    continue;
                }
                runs.unwrap_or_else(|e| panic!("{} on {}: {e}", a.name(), layout.name()));
            }
        }
        // A plan with memory channels across the nodes: the executor's set-up rule says why not.
        let ring = Algorithm::from_name(Collective::AllReduce, "plan:ring_allreduce").unwrap();
        for layout in LAYOUTS {
            let nodes = Nodes::virtual_nodes(layout.ranks(), layout.per_node);
            let why = collectives::runs_on(ring, &nodes).unwrap_err();
            assert!(why.contains("are in different nodes, but the plan reads or writes"), "{}: {why}", layout.name());
        }
        let ragged = Nodes::new(vec![0, 0, 1]);
        let plans = crossing.iter().filter(|a| matches!(a, Algorithm::Plan(_)));
        for &a in plans {
            assert!(collectives::runs_on(a, &ragged).unwrap_err().contains("equal size"), "{}", a.name());
        }
    }

    #[test]
    fn a_layout_runs_on_virtual_nodes_over_the_emulated_nic_in_chaos_mode() {
        let base = Env::default();
        let (env, seed) = layout_env(&base, LAYOUTS[1]);
        assert_eq!(env.ranks_per_node, Some(2));
        assert!(env.emulated_net.is_some());
        assert_eq!(seed, CHAOS_SEED.to_string());
        assert_eq!(env.var(&WEFT_EMU_NET_CHAOS), Some(seed.as_str()));
        let mut chosen = Env::default();
        chosen.set_var(&WEFT_EMU_NET_CHAOS, "17");
        assert_eq!(layout_env(&chosen, LAYOUTS[0]).1, "17");
    }
}
