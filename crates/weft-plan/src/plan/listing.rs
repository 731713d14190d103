//! Human-readable plan listing.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::ExecutionPlan;

/// Renders `plan` one operation per line:
///
/// ```text
/// plan ring_allreduce: allreduce, 4 ranks, 4 size classes, input 4 chunks, output 4 chunks
/// rank 0: scratch [1, 2]
///   tb 0 (waits r3/ch0; signals r1/ch0)
///      0 send    input[1] -> r1/ch0 scratch[0]
/// ```
pub(super) fn render(plan: &ExecutionPlan) -> String {
    let mut out = String::new();
    let collective = collective_label(plan.collective);
    // Writing to a String cannot fail; the results are ignored deliberately.
    let _ = writeln!(
        out,
        "plan {}: {}, {} ranks, {} size classes, input {} chunks, output {} chunks{}",
        plan.name,
        collective,
        plan.nranks,
        plan.size_classes,
        plan.input_chunks,
        plan.output_chunks,
        if plan.protocol.is_simple() { String::new() } else { format!(", {} protocol", plan.protocol.name()) }
    );
    for rank in &plan.ranks {
        let _ = writeln!(out, "rank {}: scratch {:?}", rank.rank, rank.scratch);
        for tb in &rank.threadblocks {
            let mut waits = BTreeSet::new();
            let mut signals = BTreeSet::new();
            for op in &tb.ops {
                let e = op.effects();
                waits.extend(e.wait.map(|l| l.to_string()));
                signals.extend(e.signal.map(|l| l.to_string()));
            }
            let join = |s: &BTreeSet<String>| {
                if s.is_empty() { "-".to_string() } else { s.iter().cloned().collect::<Vec<_>>().join(" ") }
            };
            let _ = writeln!(out, "  tb {} (waits {}; signals {})", tb.id, join(&waits), join(&signals));
            for (i, op) in tb.ops.iter().enumerate() {
                let _ = writeln!(out, "    {i:>2} {op}");
            }
        }
    }
    out
}

/// The collective as listings and drawings name it (a broadcast with its root).
pub(super) fn collective_label(collective: super::CollectiveKind) -> String {
    match collective.root() {
        Some(root) => format!("{} (root {root})", collective.name()),
        None => collective.name().to_string(),
    }
}
