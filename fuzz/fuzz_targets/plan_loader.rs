//! Fuzzes the execution-plan loader: any bytes must load or be rejected with an error, and a
//! plan that loads must yield a chunk geometry or an error for any element count, and list and
//! draw its operation DAG.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_plan::plan::{ExecutionPlan, Geometry};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(plan) = ExecutionPlan::load(text) {
        for count in [1usize, 3, 1000] {
            let _ = Geometry::new(&plan, count);
        }
        let _ = plan.listing();
        let graph = plan.graph();
        let _ = (graph.to_dot(), graph.to_svg());
    }
});
