//! # weft-coll — collectives over NVLink
//!
//! **Owns:** the collective API (`Collectives`: all-reduce, all-gather, reduce-scatter,
//! broadcast, reduce, all-to-all(v), grouped send/receive, windows), safe on typed device
//! views (`typed.rs`) over a raw-pointer layer ([`RawCollectives`]) for weft-nccl and other
//! languages' bindings, the collective algorithms (native kernels in `device/kernels/coll/`,
//! embedded by [`device_code`], their parameter lists declared in `params`), their
//! per-(type, operator) compilation and loading, the communication state they need (registered
//! scratch, packet buffers, channel and semaphore tables on the device), the registration of
//! user buffers and the agreement on zero-copy calls, input validation, and the size-based
//! choice between algorithms.
//!
//! **Must not:** do host synchronisation or allocation on a call once set up (calls are CUDA
//! graph capturable), or call `cuMulticast*`.
//!
//! Execution plans are algorithms too (`plan:<name>`, [`PlanId`]): weft's shipped plans and the
//! user plans of `WEFT_PLAN_DIR`, run by weft-exec's interpreter kernel.
//!
//! **Depends on:** `weft-types`, `weft-gpu`, `weft-core`, `weft-bootstrap` (the codec of the
//! user-buffer agreement), `weft-plan`, `weft-exec`, `weft-model` (the α-β time of the
//! PortChannel algorithms, printed beside measurements).
//!
//! Unlike ARCHITECTURE §1's list, this crate contains `unsafe`: launching a kernel on pointers a
//! caller hands us is inherently unsafe, and keeping those launches next to the algorithm that
//! knows each kernel's parameters (rather than in weft-core) keeps every `SAFETY` argument local.
//! The typed API discharges the raw layer's contract (`typed.rs` says how), so Rust callers
//! need no `unsafe`.

mod agreement;
mod algorithm;
mod args;
mod call_check;
mod choice;
mod collectives;
mod config;
pub mod device_code;
mod error;
mod gin_allreduce;
mod kernels;
mod lengths;
pub mod nccl;
mod nccl_typed;
mod params;
mod plans;
mod port_allpairs;
mod port_ring;
mod port_setup;
mod raw;
mod reduction;
mod registry;
mod resources;
mod transfers;
mod typed;
mod window;

pub use algorithm::{Algorithm, Collective, CollectiveAlgorithms, Protocol};
pub use args::ArgError;
pub use collectives::{Collectives, P2pKind, P2pOp, PathCounts};
pub use config::{AcrossNodes, CollConfig, Rule, Selector, TuningTable};
pub use error::{CollError, Expected};
pub use plans::{Nodes, PlanId, SHIPPED_INSTANCES, SHIPPED_LL_INSTANCES, load_user_plans};
pub use raw::RawCollectives;
pub use reduction::{Reduction, Scalar};
pub use typed::{Operator, P2pGroup};
pub use weft_types::{DataType, ReduceOp};
pub use window::Window;
