//! What `weft bench`, `weft tune`, `weft selftest` and `weft soak` share, so that none of them
//! imports another: the collectives as nccl-tests sizes and lays them out ([`Collective`],
//! [`Shape`]), the host test pattern and the float64 / exact-integer references every output
//! element is checked against (`data`, [`pattern`]), the CPU reference backend (`cpu_plan`),
//! the operator of a checked call (`op_case`), the roots a rooted call can take (`roots`), one rank's buffers, timing and checked call
//! (`rank`), the order and statistics of interleaved timing trials ([`trials`]), the parsing of
//! a sweep ([`sweep`]), the figures of `--plot` (`plot`), the start line on the GPUs that timed brackets open behind
//! (`start_line`), a launch timed by the GPU (`timed`), how the ranks of a GIN run reach each
//! other ([`gin_backend`]), and the running of ranks as processes or threads ([`launch`],
//! `workers`, `progress`).

mod collective;
pub(crate) mod cpu_plan;
pub(crate) mod data;
pub(crate) mod ep;
pub(crate) mod ep_ll;
pub mod gin_backend;
pub mod launch;
pub(crate) mod op_case;
pub mod pattern;
pub(crate) mod plot;
pub(crate) mod progress;
pub(crate) mod rank;
pub(crate) mod roots;
pub(crate) mod start_line;
pub mod sweep;
pub(crate) mod timed;
pub mod trials;
pub(crate) mod workers;

pub use collective::{Collective, NcclTests, Shape, Source};
