//! # weft-model — what the multi-node AllReduce algorithms cost, and that they are correct
//!
//! **Owns:** the multi-node AllReduce algorithms as data and their costs, for node counts weft
//! cannot run:
//!
//! - [`schedule`]: each algorithm ([`Algorithm`]) as a [`Schedule`] — steps of transfers
//!   (rank to rank, a range of the vector, reduce or copy) on a [`Shape`] of nodes × GPUs;
//! - [`reference`]: executes a schedule on host vectors (one per rank, `i64` or `f64`) and
//!   checks every rank ends with the exact sum, so the recursive-doubling fix-up of NVRAR and
//!   the phases of 2PH are proven on the CPU before any kernel exists;
//! - [`closed_form`]: the α-β time of every algorithm, with the formula and its source;
//! - [`sim`]: a discrete-event simulator of the same schedules: links shared by concurrent
//!   transfers split their bandwidth, and one proxy thread per GPU posts network messages one
//!   after another, each costing CPU time;
//! - [`rounds`]: weft's PortChannel AllReduces as their kernels run them over one network link,
//!   round by round (what `weft bench` prints next to its measurements across virtual nodes);
//! - [`params`]: the NVLink and network α-β links ([`weft_core::LinkModel`]) and the proxy cost,
//!   saved as JSON; [`calibrate`] derives them from the JSON weft's benchmarks write.
//!
//! **Must not:** touch a GPU, read the environment, open sockets, or use `unsafe`
//! (`#![forbid(unsafe_code)]`). The `weft model` command (weft-cli) prints and plots; this crate
//! only computes.
//!
//! **Depends on:** `weft-core` (for [`weft_core::LinkModel`] only), `weft-plan` (for the
//! recursive-doubling pairing NVRAR's plan runs, so the model and the plan cannot drift
//! apart), `serde`, `serde_json`, `thiserror`.

#![forbid(unsafe_code)]

pub mod algorithm;
pub mod calibrate;
pub mod closed_form;
pub mod params;
pub mod reference;
pub mod rounds;
pub mod schedule;
pub mod shape;
pub mod sim;

pub use algorithm::Algorithm;
pub use params::Params;
pub use schedule::{Op, Schedule, Step, Transfer};
pub use shape::Shape;

/// What the model refuses.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A shape with no node or no GPU per node.
    #[error("a shape needs at least one node and one GPU per node, not {nodes} x {gpus_per_node}")]
    EmptyShape {
        /// Nodes asked for.
        nodes: usize,
        /// GPUs per node asked for.
        gpus_per_node: usize,
    },
    /// An algorithm name nobody knows.
    #[error("unknown algorithm `{0}` (known: {known})", known = Algorithm::names().join(", "))]
    UnknownAlgorithm(String),
    /// A parameter is out of range.
    #[error("{0}")]
    BadParameter(String),
    /// A measurement file could not be read or has not the expected fields.
    #[error("{path}: {detail}")]
    Measurement {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
}
