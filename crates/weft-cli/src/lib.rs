//! # weft-cli — the `weft` command
//!
//! **Owns:** the command line and everything only it runs: `weft info`, `weft selftest` (the GPU
//! suite), `weft bench` (collectives against NCCL, the FIFO, point-to-point and GIN benchmarks),
//! `weft soak` (random collectives for a bounded time, every element checked), `weft tune`,
//! `weft plan`, `weft model` (the multi-node AllReduce cost model and simulator of
//! weft-model), `weft gen-header`, `weft trace-merge`, and the hidden worker subcommands their
//! ranks run as. What several commands share (the collectives as nccl-tests lays them out, the
//! host references every element is checked against, one rank's buffers, timing and checked
//! call, the CPU reference backend, the parsing of a sweep, the launch of ranks as processes or
//! threads) is in [`harness`], which imports none of the commands but `plan_cmd`'s registry of
//! shipped algorithms: bench, selftest, soak, tune and model import it, never each other.
//!
//! **Must not:** hold protocol or algorithm logic of its own (it orchestrates the library's),
//! or be a dependency of any library crate: programs use the `weft` facade.
//!
//! **Depends on:** `weft-types`, `weft-gpu`, `weft-bootstrap`, `weft-core` (with the verbs
//! transport), `weft-coll`, `weft-plan`, `weft-exec`, `weft-model`.
//!
//! The collectives (weft's and the NCCL baseline's) run through the typed, safe API on views of
//! device buffers, and the device tests' and benchmarks' kernels through the safe launchers of
//! weft-core and weft-net (`test_launchers`), which borrow what a kernel uses for a
//! `weft_gpu::LaunchScope`; the EP selftest and bench harness (`harness::ep`, `harness::ep_ll`)
//! through weft-ep's typed layer. The crate contains no `unsafe` (`forbid(unsafe_code)`), as
//! ARCHITECTURE §1 lists.

#![forbid(unsafe_code)]

pub mod bench;
pub mod harness;
pub mod info;
pub mod model_cmd;
pub mod plan_cmd;
pub mod selftest;
pub mod soak;
pub mod tune;
