//! Broadcast algorithms.

use crate::dsl::{Buffer, Collective, DslError, Program};

/// Direct Broadcast: the root copies its input to its own output and puts it into every other
/// rank's output.
pub fn direct_broadcast(nranks: u32, root: u32, instances: u32) -> Result<Program, DslError> {
    let p = Program::new("direct_broadcast", Collective::broadcast(nranks, root, 1)?).with_instances(instances)?;
    let data = p.chunk(root, Buffer::Input, 0, 1)?;
    for r in 0..nranks {
        data.copy(r, Buffer::Output, 0)?;
    }
    Ok(p)
}
