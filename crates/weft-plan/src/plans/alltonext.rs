//! AllToNext, MSCCLang's custom collective.

use super::nodes;
use crate::dsl::{Buffer, Collective, DslError, InputChunk, Program};

/// AllToNext: rank `r` receives rank `r - 1`'s input (rank 0's output is left untouched).
///
/// Ranks are grouped in nodes of `ranks_per_node`. Within a node the whole buffer goes straight
/// to the next rank. Across a node boundary the buffer is split into `ranks_per_node` chunks,
/// chunk `j` travelling through gateway `j` of the sending node and gateway `j` of the receiving
/// node, so every rank's cross-node link carries a share (MSCCLang's pattern for using every
/// NIC).
pub fn alltonext(nranks: u32, ranks_per_node: u32, instances: u32) -> Result<Program, DslError> {
    let name = "alltonext";
    nodes(name, nranks, ranks_per_node)?;
    let g = ranks_per_node;
    let collective =
        Collective::custom(nranks, g, g, g, |rank, index| (rank > 0).then(|| vec![InputChunk::new(rank - 1, index)]))?;
    let p = Program::new(name, collective).with_instances(instances)?;
    for r in 0..nranks.saturating_sub(1) {
        let next = r + 1;
        if r / g == next / g {
            p.chunk(r, Buffer::Input, 0, g)?.copy(next, Buffer::Output, 0)?;
            continue;
        }
        let (a, b) = (r / g, next / g);
        for j in 0..g {
            let (out_gateway, in_gateway) = (a * g + j, b * g + j);
            let mut piece = p.chunk(r, Buffer::Input, j, 1)?;
            if out_gateway != r {
                piece = piece.copy(out_gateway, Buffer::Scratch, 0)?;
            }
            if in_gateway != next {
                piece = piece.copy(in_gateway, Buffer::Scratch, 1)?;
            }
            piece.copy(next, Buffer::Output, j)?;
        }
    }
    Ok(p)
}
