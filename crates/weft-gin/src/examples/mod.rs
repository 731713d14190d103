//! The example kernels (AllToAll, ring AllGather, halo exchange) as safe calls on typed
//! device buffers ([`GinExamples`]), eager inside a `LaunchScope` or captured in a
//! [`GinGraph`], their argument checks (without a GPU) and their host references ([`reference`]);
//! the benchmark's probes (put + signal ping-pong and put stream, [`GinProbes`]).

mod calls;
mod plan;
mod probes;
#[cfg(test)]
mod protocol_model;
pub mod reference;
mod target;

pub use calls::GinExamples;
pub use plan::{AllToAllWindows, COOP_BLOCK, CallSlots};
pub use probes::{GinProbes, STREAM_BLOCK, STREAM_LSA_BLOCKS};
pub use target::{CallTarget, Capture, GinGraph};
