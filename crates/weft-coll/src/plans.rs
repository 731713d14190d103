//! Execution plans as algorithms of the registry, named `plan:<name>`: weft's shipped plans
//! (written in weft-plan's DSL, compiled for the communicator's ranks and nodes on first use)
//! and the user plans of `WEFT_PLAN_DIR` (every `*.json` execution plan there, validated when
//! the configuration is read). weft-exec's interpreter kernel runs them all.
//!
//! A plan runs on a communicator whose ranks span nodes only if its memory channels join ranks
//! of one node ([`Nodes::check`], the executor's own set-up rule): port channels, through the
//! proxy, are all that crosses nodes. The multi-node plans (`plan:nvrar_allreduce`, `plan:hier2ph_allreduce`) are built
//! for the communicator's nodes, which must be of equal size with ranks numbered node after
//! node.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use weft_plan::plan::CollectiveKind;
use weft_plan::{AnyProgram, DslError, ExecutionPlan, plans};

use crate::algorithm::Collective;

/// Copies of every chunk's path a shipped plan runs in parallel (each a thread block and a
/// channel per link).
pub const SHIPPED_INSTANCES: u32 = 4;

type Build = fn(&Nodes, u32) -> Result<AnyProgram, String>;

/// A shipped plan: registry name, collective, and its DSL program for (nodes, root).
struct Shipped {
    name: &'static str,
    collective: Collective,
    build: Build,
}

/// Ranks per node of the two-level shipped plans: two nodes.
fn half(ranks: u32) -> u32 {
    (ranks / 2).max(1)
}

/// Instances of the shipped LL plans: they serve small messages, where splitting chunks
/// further only adds operations; the executor's replicas still spread a chunk over blocks.
pub const SHIPPED_LL_INSTANCES: u32 = 1;

const SHIPPED: [Shipped; 13] = [
    Shipped {
        name: "plan:ring_allreduce",
        collective: Collective::AllReduce,
        build: |at, _| dsl(plans::ring_allreduce(at.ranks(), SHIPPED_INSTANCES)),
    },
    Shipped {
        name: "plan:allpairs_allreduce",
        collective: Collective::AllReduce,
        build: |at, _| dsl(plans::allpairs_allreduce(at.ranks(), SHIPPED_INSTANCES)),
    },
    Shipped {
        name: "plan:ring_allreduce_ll",
        collective: Collective::AllReduce,
        build: |at, _| dsl(plans::ring_allreduce_ll(at.ranks(), SHIPPED_LL_INSTANCES)),
    },
    Shipped {
        name: "plan:allpairs_allreduce_ll",
        collective: Collective::AllReduce,
        build: |at, _| dsl(plans::allpairs_allreduce_ll(at.ranks(), SHIPPED_LL_INSTANCES)),
    },
    Shipped {
        name: "plan:port_allpairs_allreduce",
        collective: Collective::AllReduce,
        build: |at, _| dsl(plans::port_allpairs_allreduce(at.ranks())),
    },
    Shipped {
        name: "plan:nvrar_allreduce",
        collective: Collective::AllReduce,
        build: |at, _| at.uniform().and_then(|(nodes, gpus)| dsl(plans::nvrar_allreduce(nodes, gpus))),
    },
    Shipped {
        name: "plan:hier2ph_allreduce",
        collective: Collective::AllReduce,
        build: |at, _| at.uniform().and_then(|(nodes, gpus)| dsl(plans::hier2ph_allreduce(nodes, gpus))),
    },
    Shipped {
        name: "plan:hierarchical_allreduce",
        collective: Collective::AllReduce,
        build: |at, _| dsl(plans::hierarchical_allreduce(at.ranks(), half(at.ranks()), SHIPPED_INSTANCES)),
    },
    Shipped {
        name: "plan:ring_allgather",
        collective: Collective::AllGather,
        build: |at, _| dsl(plans::ring_allgather(at.ranks(), SHIPPED_INSTANCES)),
    },
    Shipped {
        name: "plan:ring_reduce_scatter",
        collective: Collective::ReduceScatter,
        build: |at, _| dsl(plans::ring_reduce_scatter(at.ranks(), SHIPPED_INSTANCES)),
    },
    Shipped {
        name: "plan:allpairs_reduce_scatter",
        collective: Collective::ReduceScatter,
        build: |at, _| dsl(plans::allpairs_reduce_scatter(at.ranks(), SHIPPED_INSTANCES)),
    },
    Shipped {
        name: "plan:two_step_alltoall",
        collective: Collective::AllToAll,
        build: |at, _| dsl(plans::two_step_alltoall(at.ranks(), half(at.ranks()), SHIPPED_INSTANCES)),
    },
    Shipped {
        name: "plan:direct_broadcast",
        collective: Collective::Broadcast,
        build: |at, root| dsl(plans::direct_broadcast(at.ranks(), root, SHIPPED_INSTANCES)),
    },
];

fn dsl(program: Result<impl Into<AnyProgram>, DslError>) -> Result<AnyProgram, String> {
    program.map(Into::into).map_err(|e| e.to_string())
}

/// Where a communicator's ranks are: the node (host, or virtual node) of every rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nodes {
    node_of: Vec<usize>,
}

impl Nodes {
    /// `ranks` ranks in one node.
    pub fn one(ranks: usize) -> Self {
        Self { node_of: vec![0; ranks] }
    }

    /// Rank `r` in node `node_of[r]` (nodes numbered from 0 in order of first appearance, as
    /// `weft_core::Topology::node` numbers them).
    pub fn new(node_of: Vec<usize>) -> Self {
        Self { node_of }
    }

    /// `ranks` ranks in virtual nodes of `per_node` ranks each, numbered node after node (as
    /// `WEFT_RANKS_PER_NODE` lays them out; the last node may be smaller). One node when
    /// `per_node` is 0 or at least `ranks`.
    pub fn virtual_nodes(ranks: usize, per_node: usize) -> Self {
        let per_node = if per_node == 0 { ranks.max(1) } else { per_node };
        Self { node_of: (0..ranks).map(|r| r / per_node).collect() }
    }

    /// How many nodes the ranks are in.
    pub fn count(&self) -> usize {
        self.node_of.iter().max().map_or(0, |&n| n + 1)
    }

    /// Ranks (clamped to `u32`, far above any plan's limit).
    pub fn ranks(&self) -> u32 {
        u32::try_from(self.node_of.len()).unwrap_or(u32::MAX)
    }

    /// `(nodes, ranks per node)` when every node has as many ranks and ranks are numbered node
    /// after node (rank `node * per_node + local`), the layout the multi-node plans assume.
    pub fn uniform(&self) -> Result<(u32, u32), String> {
        let nodes = self.node_of.iter().max().map_or(0, |&n| n + 1);
        let per_node = self.node_of.len() / nodes.max(1);
        let laid_out = per_node > 0 && self.node_of.iter().enumerate().all(|(r, &n)| n == r / per_node);
        if !laid_out || per_node * nodes != self.node_of.len() {
            return Err(format!(
                "needs nodes of equal size with ranks numbered node after node; the communicator's ranks are in nodes {:?}",
                self.node_of
            ));
        }
        Ok((nodes as u32, per_node as u32))
    }

    /// Whether `plan` can run here: what the executor's set-up will say
    /// ([`weft_exec::check_routes`]): every memory channel, and every access to a peer's memory
    /// that is not a port put, joins ranks of one node; an error names the plan, rank and peer
    /// of the first that does not.
    pub fn check(&self, plan: &ExecutionPlan) -> Result<(), String> {
        if plan.nranks != self.ranks() {
            return Err(format!("a {}-rank plan, the communicator has {}", plan.nranks, self.ranks()));
        }
        // One node: every peer is mapped, as within any node (the executor checks its limits).
        if self.count() <= 1 {
            return Ok(());
        }
        let lowered = weft_exec::lower(plan).map_err(|e| e.to_string())?;
        let node = |r: usize| self.node_of.get(r).copied();
        weft_exec::check_routes(&lowered, |a, b| node(a) == node(b)).map_err(|e| e.to_string())
    }
}

/// A user plan of `WEFT_PLAN_DIR`.
struct UserPlan {
    name: &'static str,
    collective: Collective,
    plan: Arc<ExecutionPlan>,
}

/// The user plans of this process, loaded once from the first `WEFT_PLAN_DIR` seen.
static USER: OnceLock<(PathBuf, Result<Vec<UserPlan>, String>)> = OnceLock::new();

fn user_plans() -> &'static [UserPlan] {
    USER.get().and_then(|(_, r)| r.as_ref().ok()).map(Vec::as_slice).unwrap_or_default()
}

/// Loads the user plans of `dir` (once per process: a later call must name the same folder).
/// Every `*.json` file must be a valid plan of a collective; the error names the bad file.
pub fn load_user_plans(dir: &Path) -> Result<(), String> {
    let (loaded_from, result) = USER.get_or_init(|| (dir.to_path_buf(), read_user_plans(dir)));
    if loaded_from != dir {
        return Err(format!(
            "WEFT_PLAN_DIR={}: this process already loaded its plans from {}",
            dir.display(),
            loaded_from.display()
        ));
    }
    result.as_ref().map(|_| ()).map_err(|e| format!("WEFT_PLAN_DIR={}: {e}", dir.display()))
}

fn read_user_plans(dir: &Path) -> Result<Vec<UserPlan>, String> {
    let mut out: Vec<UserPlan> = Vec::new();
    for plan in weft_exec::load_plan_dir(dir).map_err(|e| e.to_string())? {
        let collective = plan.collective.collective().ok_or_else(|| {
            format!("plan {:?} computes a custom collective, which no collective call runs", plan.name)
        })?;
        let name = format!("plan:{}", plan.name);
        if SHIPPED.iter().any(|s| s.name == name) {
            return Err(format!("plan {:?} has the name of a shipped plan", plan.name));
        }
        // Leaked once per user plan per process: registry names are 'static like the natives'.
        let name: &'static str = Box::leak(name.into_boxed_str());
        out.push(UserPlan { name, collective, plan: Arc::new(plan) });
    }
    Ok(out)
}

/// One plan of the registry: an index into the shipped plans, then the user plans.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PlanId(u16);

impl PlanId {
    /// Every plan of the registry: the shipped ones, then the user plans loaded so far.
    pub fn all() -> impl Iterator<Item = PlanId> {
        (0..SHIPPED.len() + user_plans().len()).map(|i| PlanId(i as u16))
    }

    fn user(self) -> Option<&'static UserPlan> {
        user_plans().get(usize::from(self.0).checked_sub(SHIPPED.len())?)
    }

    /// Registry name, `plan:<plan name>`.
    pub fn name(self) -> &'static str {
        SHIPPED.get(usize::from(self.0)).map(|s| s.name).or_else(|| self.user().map(|u| u.name)).unwrap_or("plan:?")
    }

    /// The collective it computes.
    pub fn collective(self) -> Collective {
        SHIPPED
            .get(usize::from(self.0))
            .map(|s| s.collective)
            .or_else(|| self.user().map(|u| u.collective))
            .unwrap_or(Collective::AllReduce)
    }

    /// The plan for `ranks` ranks of one node and, for a broadcast, `root` (see
    /// [`Self::plan_at`]).
    pub fn plan(self, ranks: usize, root: usize) -> Result<Arc<ExecutionPlan>, String> {
        self.plan_at(&Nodes::one(ranks), root)
    }

    /// The plan for the ranks of `nodes` and, for a broadcast, `root`; an error says why
    /// there is none (a shipped plan's constraint, a user plan for another rank count or root,
    /// a memory channel between nodes: [`Nodes::check`]).
    pub fn plan_at(self, nodes: &Nodes, root: usize) -> Result<Arc<ExecutionPlan>, String> {
        let plan = self.build(nodes, root)?;
        nodes.check(&plan).map_err(|e| format!("{}: {e}", self.name()))?;
        Ok(plan)
    }

    fn build(self, nodes: &Nodes, root: usize) -> Result<Arc<ExecutionPlan>, String> {
        let r = u32::try_from(root).map_err(|e| e.to_string())?;
        if let Some(s) = SHIPPED.get(usize::from(self.0)) {
            let program = (s.build)(nodes, r).map_err(|e| format!("{}: {e}", s.name))?;
            return program.compile().map(Arc::new).map_err(|e| format!("{}: {e}", s.name));
        }
        let user = self.user().ok_or_else(|| format!("no plan {}", self.0))?;
        if let CollectiveKind::Rooted { root: planned, .. } = user.plan.collective
            && planned != r
        {
            return Err(format!("{} broadcasts from rank {planned}, the call from rank {root}", user.name));
        }
        Ok(Arc::clone(&user.plan))
    }

    /// Whether peers read or write some rank's output in the plan for `ranks` ranks (root 0):
    /// only then do captured launches run into the ranks' registered outputs.
    pub fn peers_share_outputs(self, ranks: usize) -> bool {
        let lowered = self.plan(ranks, 0).ok().and_then(|p| weft_exec::lower(&p).ok());
        lowered.is_some_and(|l| weft_exec::peers_touch_outputs(&l))
    }

    /// Whether every rank of the plan for `ranks` ranks (root 0) runs a specialized kernel when
    /// [`crate::CollConfig::plan_specialize`] asks for one (`weft_exec::specializable`).
    pub fn specializes_on_every_rank(self, ranks: usize) -> bool {
        let lowered = self.plan(ranks, 0).ok().and_then(|p| weft_exec::lower(&p).ok());
        lowered.is_some_and(|l| (0..ranks).all(|r| weft_exec::specializable(&l, r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_plan_compiles_at_two_and_four_ranks_for_its_collective() {
        for id in PlanId::all().take(SHIPPED.len()) {
            assert!(id.name().starts_with("plan:"));
            for ranks in [2, 4] {
                let plan = id.plan(ranks, ranks - 1).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(plan.collective.collective(), Some(id.collective()), "{}", id.name());
                assert_eq!(plan.nranks as usize, ranks);
                weft_exec::lower(&plan).unwrap();
            }
        }
    }

    #[test]
    fn peers_share_the_outputs_of_every_shipped_plan_but_reduce_scatter_and_the_ll_plans() {
        for id in PlanId::all().take(SHIPPED.len()) {
            // LL packets land in scratch only, and so does everything of a plan with port
            // channels (the multi-node ones even on one node).
            let multi_node = ["plan:nvrar_allreduce", "plan:hier2ph_allreduce"].contains(&id.name());
            let scratch_only = id.name().ends_with("_ll") || id.name().starts_with("plan:port_") || multi_node;
            let private = id.collective() == Collective::ReduceScatter || scratch_only;
            for ranks in [2, 4] {
                assert_eq!(id.peers_share_outputs(ranks), !private, "{} at {ranks} ranks", id.name());
            }
        }
    }

    fn shipped(name: &str) -> PlanId {
        PlanId::all().find(|id| id.name() == name).unwrap()
    }

    #[test]
    fn nodes_of_equal_size_numbered_node_after_node_are_what_multi_node_plans_take() {
        assert_eq!(Nodes::one(4).uniform(), Ok((1, 4)));
        assert_eq!(Nodes::virtual_nodes(4, 2), Nodes::new(vec![0, 0, 1, 1]));
        assert_eq!(Nodes::virtual_nodes(3, 2), Nodes::new(vec![0, 0, 1]));
        assert_eq!(Nodes::virtual_nodes(4, 4), Nodes::one(4));
        assert_eq!(Nodes::virtual_nodes(4, 0), Nodes::one(4));
        assert_eq!((Nodes::virtual_nodes(4, 1).count(), Nodes::one(4).count()), (4, 1));
        assert_eq!(Nodes::new(vec![0, 0, 1, 1, 2, 2]).uniform(), Ok((3, 2)));
        assert_eq!(Nodes::new(vec![0, 1, 2]).uniform(), Ok((3, 1)));
        for uneven in [vec![0, 0, 0, 1], vec![0, 1, 0, 1], vec![0, 0, 1, 1, 1, 1]] {
            let e = Nodes::new(uneven.clone()).uniform().unwrap_err();
            assert!(e.contains("equal size"), "{uneven:?}: {e}");
        }
    }

    #[test]
    fn the_multi_node_plans_run_across_nodes_and_single_node_plans_are_refused_there() {
        let nodes = Nodes::new(vec![0, 0, 1, 1, 2, 2, 3, 3]);
        for name in ["plan:nvrar_allreduce", "plan:hier2ph_allreduce"] {
            let plan = shipped(name).plan_at(&nodes, 0).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(plan.nranks, 8);
            let lowered = weft_exec::lower(&plan).unwrap();
            assert!(lowered.ranks.iter().all(|r| !r.ports.is_empty()), "{name}: every rank crosses nodes");
            // Also on one node (no port channel at all), and at one GPU per node.
            shipped(name).plan(4, 0).unwrap();
            shipped(name).plan_at(&Nodes::new(vec![0, 1, 2]), 0).unwrap();
            let e = shipped(name).plan_at(&Nodes::new(vec![0, 0, 0, 1]), 0).unwrap_err();
            assert!(e.starts_with(name) && e.contains("equal size"), "{e}");
        }
        // Port channels only: fine across nodes.
        shipped("plan:port_allpairs_allreduce").plan_at(&nodes, 0).unwrap();
        for name in ["plan:ring_allreduce", "plan:hierarchical_allreduce", "plan:allpairs_allreduce_ll"] {
            let e = shipped(name).plan_at(&nodes, 0).unwrap_err();
            assert!(e.starts_with(name) && e.contains("are in different nodes, but the plan reads or writes"), "{e}");
        }
    }

    #[test]
    fn user_plans_load_once_and_a_bad_folder_names_the_file() {
        let dir = std::env::temp_dir().join(format!("weft-coll-bad-plans-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("oops.json"), "{}").unwrap();
        let err = read_user_plans(&dir).err().unwrap();
        assert!(err.contains("oops.json"), "{err}");
        let custom = plans::alltonext(2, 1, 1).unwrap().compile().unwrap();
        std::fs::write(dir.join("oops.json"), custom.to_json().unwrap()).unwrap();
        assert!(read_user_plans(&dir).err().unwrap().contains("custom"));
        let mut shadow = plans::ring_allgather(2, 1).unwrap().compile().unwrap();
        shadow.name = "ring_allreduce".into();
        std::fs::write(dir.join("oops.json"), shadow.to_json().unwrap()).unwrap();
        assert!(read_user_plans(&dir).err().unwrap().contains("shipped"));
        shadow.name = "my_gather".into();
        std::fs::write(dir.join("oops.json"), shadow.to_json().unwrap()).unwrap();
        let plans = read_user_plans(&dir).unwrap();
        assert_eq!((plans[0].name, plans[0].collective), ("plan:my_gather", Collective::AllGather));
    }
}
