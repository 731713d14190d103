//! User plans: every `*.json` execution plan in a folder (`WEFT_PLAN_DIR`), each validated
//! (weft-plan's loader), verified to compute the collective it names, lowered for the executor
//! and checked against the executor's limits for every rank when loaded, so a bad file is an
//! error naming it before anything runs (not a wrong result, or a failure on the first call).

use std::path::Path;

use weft_plan::plan::CollectiveKind;
use weft_plan::{Collective, ExecutionPlan};

use crate::error::ExecError;
use crate::lower::lower;
use crate::tables::rank_tables;

/// The plans of `dir` in file-name order. Files not ending in `.json` are ignored.
pub fn load_plan_dir(dir: &Path) -> Result<Vec<ExecutionPlan>, ExecError> {
    let file_error = |path: &Path, reason: String| ExecError::PlanFile { path: path.to_path_buf(), reason };
    let entries = std::fs::read_dir(dir).map_err(|e| file_error(dir, format!("cannot list the plan folder: {e}")))?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| file_error(dir, format!("cannot list the plan folder: {e}")))?.path();
        if path.extension().is_some_and(|e| e == "json") {
            paths.push(path);
        }
    }
    paths.sort();
    let mut plans: Vec<ExecutionPlan> = Vec::with_capacity(paths.len());
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|e| file_error(&path, e.to_string()))?;
        let plan = ExecutionPlan::load(&text).map_err(|e| file_error(&path, e.to_string()))?;
        check(&plan).map_err(|reason| file_error(&path, reason))?;
        if let Some(twin) = plans.iter().find(|p| p.name == plan.name) {
            return Err(file_error(&path, format!("a second plan named {:?} (plan names must be unique)", twin.name)));
        }
        plans.push(plan);
    }
    Ok(plans)
}

/// What loading a plan proves beyond the format: it computes its collective (a custom one's
/// postcondition is not in the file, so it cannot be verified here), it lowers, and every
/// rank's tables fit the executor.
fn check(plan: &ExecutionPlan) -> Result<(), String> {
    if plan.collective != CollectiveKind::Custom {
        let collective = Collective::from_plan(plan).map_err(|e| e.to_string())?;
        weft_plan::passes::verify(plan, &collective).map_err(|e| e.to_string())?;
    }
    let lowered = lower(plan).map_err(|e| e.to_string())?;
    for rank in 0..lowered.ranks.len() {
        rank_tables(&lowered, rank).map_err(|e| format!("rank {rank}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("weft-plan-dir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_folder_of_plans_loads_in_name_order_ignoring_other_files() {
        let dir = folder("good");
        let ring = weft_plan::plans::ring_allreduce(2, 1).unwrap().compile().unwrap();
        let mut gather = weft_plan::plans::ring_allgather(2, 1).unwrap().compile().unwrap();
        gather.name = "my_gather".into();
        std::fs::write(dir.join("b.json"), ring.to_json().unwrap()).unwrap();
        std::fs::write(dir.join("a.json"), gather.to_json().unwrap()).unwrap();
        std::fs::write(dir.join("notes.txt"), "not a plan").unwrap();
        let plans = load_plan_dir(&dir).unwrap();
        assert_eq!(plans, vec![gather, ring]);
    }

    #[test]
    fn a_bad_file_is_an_error_naming_it() {
        let dir = folder("bad");
        let ring = weft_plan::plans::ring_allreduce(2, 1).unwrap().compile().unwrap();
        std::fs::write(dir.join("good.json"), ring.to_json().unwrap()).unwrap();
        std::fs::write(dir.join("broken.json"), "{\"version\": 1, \"name\": ").unwrap();
        let err = load_plan_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("broken.json"), "{err}");

        let dir = folder("twin");
        std::fs::write(dir.join("one.json"), ring.to_json().unwrap()).unwrap();
        std::fs::write(dir.join("two.json"), ring.to_json().unwrap()).unwrap();
        let err = load_plan_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("two.json") && err.contains("unique"), "{err}");

        // A plan that is well formed but computes something else than it says.
        let dir = folder("wrong");
        // Rank 1 forwards what it received without folding its own input in.
        use weft_plan::plan::Op;
        let mut wrong = ring.clone();
        let ops = &mut wrong.ranks[1].threadblocks[0].ops;
        let at = ops.iter().position(|op| matches!(op, Op::Rrcs { .. })).unwrap();
        if let Op::Rrcs { from, staged, dst, to, remote, .. } = ops[at].clone() {
            ops[at] = Op::Rcs { from, src: staged, dst: Some(dst), to, remote };
        }
        wrong.validate().unwrap();
        std::fs::write(dir.join("wrong.json"), wrong.to_json().unwrap()).unwrap();
        let err = load_plan_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("wrong.json") && err.contains("violates the postcondition"), "{err}");

        // A plan beyond the executor's limits: more ranks than it takes.
        let dir = folder("wide");
        let wide = weft_plan::plans::ring_allgather(crate::tables::MAX_PLAN_RANKS as u32 + 1, 1).unwrap();
        std::fs::write(dir.join("wide.json"), wide.compile().unwrap().to_json().unwrap()).unwrap();
        let err = load_plan_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("wide.json") && err.contains("at most"), "{err}");

        let missing = std::env::temp_dir().join(format!("weft-no-such-plan-dir-{}", std::process::id()));
        assert!(load_plan_dir(&missing).unwrap_err().to_string().contains("cannot list"));
    }
}
