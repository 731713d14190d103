//! Pass 1: the traced program computes its collective.

use super::CompileError;
use crate::dsl::trace::Trace;
use crate::dsl::{Buffer, Collective, InputChunk};

/// Compares every constrained output chunk of every rank with the collective's postcondition and
/// reports the first mismatch (ranks, then indices, in increasing order).
pub(super) fn check(trace: &Trace, collective: &Collective) -> Result<(), CompileError> {
    for rank in 0..trace.nranks {
        for index in 0..trace.output_chunks {
            let Some(expected) = collective.postcondition(rank, index) else {
                continue;
            };
            let found = trace.slot(rank, Buffer::Output, index).and_then(|s| s.value.clone());
            if found.as_deref() != Some(&expected) {
                return Err(CompileError::Postcondition {
                    rank,
                    buffer: Buffer::Output,
                    index,
                    expected: describe(&expected),
                    found: found.map_or_else(|| "nothing (never written)".into(), |v| describe(&v)),
                });
            }
        }
    }
    Ok(())
}

/// `in0@r0 + in0@r1`, or `in3@r2` for a plain copy.
pub(crate) fn describe(value: &[InputChunk]) -> String {
    value.iter().map(InputChunk::to_string).collect::<Vec<_>>().join(" + ")
}
