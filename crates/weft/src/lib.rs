//! # weft — GPU communication for AI inference and training
//!
//! **Owns:** the paved path through weft's crates (re-exported here) and the `weft` command:
//! `weft info`, `weft selftest` (the GPU suite), `weft bench`, `weft tune`, `weft plan` and
//! `weft gen-header`.
//!
//! **Must not:** hold protocol or algorithm logic of its own; the command only orchestrates.
//!
//! **Depends on:** every weft crate below it.

pub mod bench;
pub mod info;
pub mod launch;
pub mod plan_cmd;
pub mod selftest;
pub mod tune;

pub use weft_bootstrap as bootstrap;
pub use weft_core as core;
pub use weft_gpu as gpu;
pub use weft_types as types;

pub use weft_core::{Communicator, Env, Error, MemoryChannel, RegisteredMemory};
