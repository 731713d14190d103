//! Pass 2: instance replication.

use super::CompileError;
use crate::dsl::trace::{ChunkRange, Trace};
use crate::dsl::{Collective, Hints};

/// Replays `trace` with every chunk split into `instances` sub-chunks.
///
/// Operation `op` on chunks `[i, i + c)` becomes, for each instance `s`, the same operation on
/// sub-chunks `[i * n + s * c, i * n + (s + 1) * c)` (n = `instances`): each instance moves a
/// contiguous `1/n` of the data. Instance `s` of channel `ch` uses channel `ch * n + s`, and
/// thread block hints are mapped the same way, so instances never share a connection. The replay
/// re-runs the symbolic execution, so dependencies and values are recomputed exactly.
pub(super) fn replay(trace: &Trace, collective: &Collective, instances: u32) -> Result<Trace, CompileError> {
    let n = instances;
    let mut out = Trace::new(collective);
    for op in &trace.ops {
        for s in 0..n {
            let map = |r: ChunkRange| ChunkRange { index: r.index * n + s * r.count, ..r };
            let hints = Hints {
                channel: Some(op.hints.channel.unwrap_or(0) * n + s),
                src_tb: op.hints.src_tb.map(|t| t * n + s),
                dst_tb: op.hints.dst_tb.map(|t| t * n + s),
            };
            out.apply(op.kind, map(op.src), op.local.map(map), map(op.dst), hints).map_err(CompileError::Replay)?;
        }
    }
    out.finish();
    Ok(out)
}
