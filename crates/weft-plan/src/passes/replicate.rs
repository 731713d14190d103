//! Pass 2: instance replication.

use super::CompileError;
use crate::dsl::trace::{ChunkRange, Trace};
use crate::dsl::{Collective, Hints};

/// Replays `trace` with every chunk split into `instances * tiles` sub-chunks.
///
/// Operation `op` on chunks `[i, i + c)` becomes, for each instance `s` and tile `k`, the same
/// operation on sub-chunks `[i * m + (s * t + k) * c, ... + c)` (m = `instances * tiles`, t =
/// `tiles`): each instance moves a contiguous `1/n` of the data, in `t` consecutive tiles.
/// Instance `s` of channel `ch` uses channel `ch * n + s`, and thread block hints are mapped the
/// same way, so instances never share a connection; the tiles of one instance share its
/// channels and thread blocks, so a thread block works through them in the scheduler's order
/// (depth first), and a tile's next hop overlaps the next tile's transfer: a pipelined loop.
/// The replay re-runs the symbolic execution, so dependencies and values are recomputed
/// exactly.
pub(super) fn replay(
    trace: &Trace,
    collective: &Collective,
    instances: u32,
    tiles: u32,
) -> Result<Trace, CompileError> {
    let (n, t) = (instances, tiles);
    let mut out = Trace::new(collective);
    for op in &trace.ops {
        for s in 0..n {
            let hints = Hints {
                channel: Some(op.hints.channel.unwrap_or(0) * n + s),
                src_tb: op.hints.src_tb.map(|tb| tb * n + s),
                dst_tb: op.hints.dst_tb.map(|tb| tb * n + s),
            };
            for k in 0..t {
                let map = |r: ChunkRange| ChunkRange { index: r.index * n * t + (s * t + k) * r.count, ..r };
                out.apply(op.kind, map(op.src), op.local.map(map), map(op.dst), hints).map_err(CompileError::Replay)?;
            }
        }
    }
    out.finish();
    Ok(out)
}
