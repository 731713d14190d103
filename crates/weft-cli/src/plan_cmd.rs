//! `weft plan compile | verify | show`: the algorithm DSL's shipped plans from the command line.

use std::path::Path;
use std::time::Instant;

use weft_plan::{AnyProgram, Collective, ExecutionPlan, plans};

type BoxError = Box<dyn std::error::Error>;

/// How a shipped algorithm is traced: the shape options of `weft plan compile`.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Ranks.
    pub ranks: u32,
    /// Ranks per node (hierarchical algorithms).
    pub ranks_per_node: u32,
    /// Instances (parallel copies of every chunk's path).
    pub instances: u32,
    /// Root (broadcast).
    pub root: u32,
}

type Trace = fn(Shape) -> Result<AnyProgram, BoxError>;

/// Every algorithm `weft plan compile` accepts, with how it is traced: the one table the
/// parser, `--help` and the error for an unknown name are made from.
pub const ALGORITHMS: &[(&str, Trace)] = &[
    ("ring-allreduce", |s| Ok(plans::ring_allreduce(s.ranks, s.instances)?.into())),
    ("allpairs-allreduce", |s| Ok(plans::allpairs_allreduce(s.ranks, s.instances)?.into())),
    ("ring-allreduce-ll", |s| Ok(plans::ring_allreduce_ll(s.ranks, s.instances)?.into())),
    ("allpairs-allreduce-ll", |s| Ok(plans::allpairs_allreduce_ll(s.ranks, s.instances)?.into())),
    ("reduce-broadcast-allreduce", |s| Ok(plans::reduce_broadcast_allreduce(s.ranks, s.instances)?.into())),
    ("hierarchical-allreduce", |s| Ok(plans::hierarchical_allreduce(s.ranks, s.ranks_per_node, s.instances)?.into())),
    ("ring-allgather", |s| Ok(plans::ring_allgather(s.ranks, s.instances)?.into())),
    ("ring-reduce-scatter", |s| Ok(plans::ring_reduce_scatter(s.ranks, s.instances)?.into())),
    ("allpairs-reduce-scatter", |s| Ok(plans::allpairs_reduce_scatter(s.ranks, s.instances)?.into())),
    ("two-step-alltoall", |s| Ok(plans::two_step_alltoall(s.ranks, s.ranks_per_node, s.instances)?.into())),
    ("alltonext", |s| Ok(plans::alltonext(s.ranks, s.ranks_per_node, s.instances)?.into())),
    ("direct-broadcast", |s| Ok(plans::direct_broadcast(s.ranks, s.root, s.instances)?.into())),
    ("port-allpairs-allreduce", |s| Ok(plans::port_allpairs_allreduce(s.ranks)?.into())),
    ("nvrar-allreduce", |s| Ok(plans::nvrar_allreduce(nodes(s)?, s.ranks_per_node)?.into())),
    ("hier2ph-allreduce", |s| Ok(plans::hier2ph_allreduce(nodes(s)?, s.ranks_per_node)?.into())),
];

/// Nodes of `ranks_per_node` ranks, for the algorithms built per node.
fn nodes(s: Shape) -> Result<u32, BoxError> {
    if s.ranks_per_node == 0 || !s.ranks.is_multiple_of(s.ranks_per_node) {
        return Err(format!("{} ranks per node does not divide {} ranks", s.ranks_per_node, s.ranks).into());
    }
    Ok(s.ranks / s.ranks_per_node)
}

/// The names of [`ALGORITHMS`], in order.
pub fn algorithm_names() -> impl Iterator<Item = &'static str> {
    ALGORITHMS.iter().map(|(name, _)| *name)
}

/// Traces shipped algorithm `name` with `shape`.
pub fn program(name: &str, shape: Shape) -> Result<AnyProgram, BoxError> {
    let (_, trace) = ALGORITHMS.iter().find(|(n, _)| *n == name).ok_or_else(|| {
        format!("unknown algorithm {name:?}; one of {}", algorithm_names().collect::<Vec<_>>().join(", "))
    })?;
    trace(shape)
}

/// Reads and loads a plan file (every limit validated); errors name the file.
pub fn load(path: &Path) -> Result<ExecutionPlan, BoxError> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(ExecutionPlan::load(&text).map_err(|e| format!("{}: {e}", path.display()))?)
}

/// Compiles a shipped algorithm; prints the JSON plan or writes it to `out`.
pub fn compile(program: &AnyProgram, out: Option<&Path>) -> Result<(), BoxError> {
    let started = Instant::now();
    let plan = program.compile()?;
    let elapsed = started.elapsed();
    let json = plan.to_json()?;
    match out {
        Some(path) => {
            std::fs::write(path, json).map_err(|e| format!("{}: {e}", path.display()))?;
            eprintln!(
                "compiled {} ({} ops) in {:.2} ms -> {}",
                plan.name,
                plan.op_count(),
                elapsed.as_secs_f64() * 1e3,
                path.display()
            );
        }
        None => println!("{json}"),
    }
    Ok(())
}

/// Loads a plan (every limit validated), verifies it computes the collective it names and says
/// whether it is also verified in place.
pub fn verify(path: &Path) -> Result<(), BoxError> {
    let plan = load(path)?;
    let collective = Collective::from_plan(&plan).map_err(|e| format!("{}: {e}", path.display()))?;
    weft_plan::passes::verify(&plan, &collective).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("{}: {} on {} ranks, {} ops: verified", path.display(), plan.name, plan.nranks, plan.op_count());
    // In place is a property, not a requirement: the executor stages calls of plans without it.
    match weft_plan::passes::verify_in_place(&plan, &collective) {
        Ok(()) => println!("  in place: verified (peers may write the user buffers directly)"),
        Err(e) => println!("  in place: not verified, such calls stage their output: {e}"),
    }
    Ok(())
}

/// Prints a plan's per-rank, per-thread-block listing; writes its operation DAG as DOT and/or
/// SVG, and warns of operations that never run (a cycle of waits).
pub fn show(path: &Path, dot: Option<&Path>, svg: Option<&Path>) -> Result<(), BoxError> {
    let plan = load(path)?;
    print!("{}", plan.listing());
    if dot.is_none() && svg.is_none() {
        return Ok(());
    }
    let graph = plan.graph();
    for (out, text) in [(dot, graph.to_dot()), (svg, graph.to_svg())] {
        if let Some(out) = out {
            std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()))?;
            eprintln!("drew {} operations, {} edges -> {}", graph.nodes.len(), graph.edges.len(), out.display());
        }
    }
    let stuck: Vec<String> =
        graph.deadlocked().map(|n| format!("rank {} tb {} op {} ({})", n.rank, n.tb, n.step, n.name)).collect();
    if !stuck.is_empty() {
        eprintln!("warning: {} operations never run (a cycle of waits): {}", stuck.len(), stuck.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_algorithm_compiles_verifies_and_lists() {
        let dir = std::env::temp_dir().join(format!("weft-plan-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let shape = Shape { ranks: 4, ranks_per_node: 2, instances: 1, root: 1 };
        for name in algorithm_names() {
            let path = dir.join(format!("{name}.json"));
            compile(&program(name, shape).unwrap(), Some(&path)).unwrap();
            let (dot, svg) = (dir.join(format!("{name}.dot")), dir.join(format!("{name}.svg")));
            show(&path, Some(&dot), Some(&svg)).unwrap();
            assert!(std::fs::read_to_string(&dot).unwrap().starts_with("digraph plan {"));
            assert!(std::fs::read_to_string(&svg).unwrap().trim_end().ends_with("</svg>"));
            if name == "alltonext" {
                // A custom collective: its postcondition lives with the program, not the file.
                assert!(verify(&path).unwrap_err().to_string().contains("custom"));
            } else {
                verify(&path).unwrap();
            }
        }
        let unknown = program("ring", shape).unwrap_err().to_string();
        assert!(unknown.contains("\"ring\"") && algorithm_names().all(|n| unknown.contains(n)), "{unknown}");
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"version\": 99}").unwrap();
        let message = verify(&bad).unwrap_err().to_string();
        assert!(message.contains("version") && message.contains(&bad.display().to_string()), "{message}");
        std::fs::write(&bad, "{ not json").unwrap();
        assert!(show(&bad, None, None).unwrap_err().to_string().contains(&bad.display().to_string()));
        let missing = dir.join("missing.json");
        for message in [verify(&missing).unwrap_err().to_string(), show(&missing, None, None).unwrap_err().to_string()]
        {
            assert!(message.contains(&missing.display().to_string()), "{message}");
        }
        let unwritable = dir.join("no/such/dir/plan.json");
        let message = compile(&program("ring-allreduce", shape).unwrap(), Some(&unwritable)).unwrap_err().to_string();
        assert!(message.contains(&unwritable.display().to_string()), "{message}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
