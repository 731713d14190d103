//! Execution plans as algorithms of the registry, named `plan:<name>`: weft's shipped plans
//! (written in weft-plan's DSL, compiled for the communicator's rank count on first use) and
//! the user plans of `WEFT_PLAN_DIR` (every `*.json` execution plan there, validated when the
//! configuration is read). weft-exec's interpreter kernel runs them all.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use weft_plan::plan::CollectiveKind;
use weft_plan::{ExecutionPlan, plans};

use crate::algorithm::Collective;

/// Copies of every chunk's path a shipped plan runs in parallel (each a thread block and a
/// channel per link).
pub const SHIPPED_INSTANCES: u32 = 4;

type Build = fn(u32, u32) -> Result<weft_plan::AnyProgram, weft_plan::DslError>;

/// A shipped plan: registry name, collective, and its DSL program for (ranks, root).
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

const SHIPPED: [Shipped; 11] = [
    Shipped {
        name: "plan:ring_allreduce",
        collective: Collective::AllReduce,
        build: |n, _| plans::ring_allreduce(n, SHIPPED_INSTANCES).map(Into::into),
    },
    Shipped {
        name: "plan:allpairs_allreduce",
        collective: Collective::AllReduce,
        build: |n, _| plans::allpairs_allreduce(n, SHIPPED_INSTANCES).map(Into::into),
    },
    Shipped {
        name: "plan:ring_allreduce_ll",
        collective: Collective::AllReduce,
        build: |n, _| plans::ring_allreduce_ll(n, SHIPPED_LL_INSTANCES).map(Into::into),
    },
    Shipped {
        name: "plan:allpairs_allreduce_ll",
        collective: Collective::AllReduce,
        build: |n, _| plans::allpairs_allreduce_ll(n, SHIPPED_LL_INSTANCES).map(Into::into),
    },
    Shipped {
        name: "plan:port_allpairs_allreduce",
        collective: Collective::AllReduce,
        build: |n, _| plans::port_allpairs_allreduce(n).map(Into::into),
    },
    Shipped {
        name: "plan:hierarchical_allreduce",
        collective: Collective::AllReduce,
        build: |n, _| plans::hierarchical_allreduce(n, half(n), SHIPPED_INSTANCES).map(Into::into),
    },
    Shipped {
        name: "plan:ring_allgather",
        collective: Collective::AllGather,
        build: |n, _| plans::ring_allgather(n, SHIPPED_INSTANCES).map(Into::into),
    },
    Shipped {
        name: "plan:ring_reduce_scatter",
        collective: Collective::ReduceScatter,
        build: |n, _| plans::ring_reduce_scatter(n, SHIPPED_INSTANCES).map(Into::into),
    },
    Shipped {
        name: "plan:allpairs_reduce_scatter",
        collective: Collective::ReduceScatter,
        build: |n, _| plans::allpairs_reduce_scatter(n, SHIPPED_INSTANCES).map(Into::into),
    },
    Shipped {
        name: "plan:two_step_alltoall",
        collective: Collective::AllToAll,
        build: |n, _| plans::two_step_alltoall(n, half(n), SHIPPED_INSTANCES).map(Into::into),
    },
    Shipped {
        name: "plan:direct_broadcast",
        collective: Collective::Broadcast,
        build: |n, root| plans::direct_broadcast(n, root, SHIPPED_INSTANCES).map(Into::into),
    },
];

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

    /// The plan for `ranks` ranks and, for a broadcast, `root`; an error says why there is
    /// none (a shipped plan's constraint, a user plan for another rank count or root).
    pub fn plan(self, ranks: usize, root: usize) -> Result<Arc<ExecutionPlan>, String> {
        let (n, r) =
            (u32::try_from(ranks).map_err(|e| e.to_string())?, u32::try_from(root).map_err(|e| e.to_string())?);
        if let Some(s) = SHIPPED.get(usize::from(self.0)) {
            let program = (s.build)(n, r).map_err(|e| format!("{}: {e}", s.name))?;
            return program.compile().map(Arc::new).map_err(|e| format!("{}: {e}", s.name));
        }
        let user = self.user().ok_or_else(|| format!("no plan {}", self.0))?;
        if user.plan.nranks != n {
            return Err(format!("{} is a {}-rank plan, the communicator has {ranks}", user.name, user.plan.nranks));
        }
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
            // LL packets and port puts land in scratch only.
            let scratch_only = id.name().ends_with("_ll") || id.name().starts_with("plan:port_");
            let private = id.collective() == Collective::ReduceScatter || scratch_only;
            for ranks in [2, 4] {
                assert_eq!(id.peers_share_outputs(ranks), !private, "{} at {ranks} ranks", id.name());
            }
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
