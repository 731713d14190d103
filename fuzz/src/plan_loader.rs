//! The execution-plan loader: plan files are JSON a user may write or edit by hand
//! (`WEFT_PLAN_DIR`, `weft plan`).

use weft_plan::AnyProgram;
use weft_plan::plan::{ExecutionPlan, Geometry};
use weft_plan::plans;

/// A plan that loads yields a chunk geometry or an error for any element count, lists and draws
/// its operation DAG, and survives its own serialisation unchanged. Returns whether it loaded.
pub fn check(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let Ok(plan) = ExecutionPlan::load(text) else { return false };
    for count in [1usize, 3, 1000] {
        let _ = Geometry::new(&plan, count);
    }
    let _ = plan.listing();
    let graph = plan.graph();
    let _ = (graph.to_dot(), graph.to_svg());
    // A loaded plan is plain data: serialising it cannot fail, and the result loads back.
    #[allow(clippy::expect_used)]
    let json = plan.to_json().expect("a loaded plan serialises");
    match ExecutionPlan::load(&json) {
        Ok(again) => assert_eq!(again, plan, "a plan changed through its JSON"),
        Err(e) => panic!("a loaded plan's own JSON does not load: {e}"),
    }
    true
}

/// Shipped plans of both protocols, port links, pipelining and instances.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    // The shipped builders accept these shapes (their own tests build them).
    #[allow(clippy::expect_used)]
    let programs: [(&'static str, AnyProgram); 5] = [
        ("ring_allreduce", plans::ring_allreduce(3, 1).expect("shipped plan").into()),
        ("ring_allreduce_ll", plans::ring_allreduce_ll(2, 1).expect("shipped plan").into()),
        ("two_step_alltoall", plans::two_step_alltoall(4, 2, 1).expect("shipped plan").into()),
        ("direct_broadcast", plans::direct_broadcast(3, 1, 1).expect("shipped plan").into()),
        ("port_allpairs_allreduce", plans::port_allpairs_allreduce(2).expect("shipped plan").into()),
    ];
    #[allow(clippy::expect_used)]
    let seeds = programs
        .into_iter()
        .map(|(name, p)| {
            (name, p.compile().expect("shipped plans compile").to_json().expect("serialises").into_bytes())
        })
        .collect();
    seeds
}
