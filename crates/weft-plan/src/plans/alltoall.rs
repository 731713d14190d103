//! AllToAll algorithms.

use super::nodes;
use crate::dsl::{Buffer, Collective, DslError, Program};

/// Two-step AllToAll (MSCCLang) over nodes of `ranks_per_node` ranks.
///
/// Within a node, chunks go straight to their destination. A chunk for rank `(b, l)` on another
/// node `b` first goes to the gateway `(a, l)` of the sender's node `a` (the rank with the
/// destination's local index), which collects the `ranks_per_node` chunks of its node for that
/// destination contiguously in scratch and sends them across nodes in one transfer.
pub fn two_step_alltoall(nranks: u32, ranks_per_node: u32, instances: u32) -> Result<Program, DslError> {
    let name = "two_step_alltoall";
    let nn = nodes(name, nranks, ranks_per_node)?;
    let g = ranks_per_node;
    let p = Program::new(name, Collective::all_to_all(nranks, 1)?).with_instances(instances)?;
    // Step 1: same-node chunks to their destination, other chunks to the gateway.
    for src in 0..nranks {
        let (a, ls) = (src / g, src % g);
        for dst in 0..nranks {
            let (b, ld) = (dst / g, dst % g);
            let chunk = p.chunk(src, Buffer::Input, dst, 1)?;
            if a == b {
                chunk.copy(dst, Buffer::Output, src)?;
            } else {
                chunk.copy(a * g + ld, Buffer::Scratch, b * g + ls)?;
            }
        }
    }
    // Step 2: each gateway forwards, per remote node, the chunks of its whole node at once.
    for a in 0..nn {
        for l in 0..g {
            let gateway = a * g + l;
            for b in (0..nn).filter(|&b| b != a) {
                p.chunk(gateway, Buffer::Scratch, b * g, g)?.copy(b * g + l, Buffer::Output, a * g)?;
            }
        }
    }
    Ok(p)
}
