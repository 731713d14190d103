//! # weft — GPU communication for AI inference and training
//!
//! **Owns:** the paved path through weft's library crates: each layer's public API under one
//! name, lowest first: [`types`] (device layouts, element types, operators), [`gpu`] (safe
//! CUDA), [`bootstrap`] (rendezvous), [`core`] (communicator, memory, semaphores, MemoryChannels,
//! the environment), [`net`] (FIFO host side, proxy, PortChannels, transports), [`coll`] (the
//! collectives: [`Collectives`] with its typed API over [`DeviceBuffer`] views and its raw
//! layer, [`CollConfig`], [`Reduction`], [`Operator`], [`P2pGroup`], [`Window`], the selector and
//! the NCCL baseline loader), [`plan`] (the algorithm DSL, its verifying compiler and the CPU
//! reference interpreter), [`exec`] (the plan executor), [`gin`] (device-initiated communication) and [`ep`] (MoE expert-parallel dispatch
//! and combine).
//! The names most programs start from are re-exported at the top as well.
//!
//! **Must not:** hold code of its own beyond these re-exports: no protocol or algorithm logic,
//! and no command-line code (the `weft` command is the `weft-cli` crate).
//!
//! **Depends on:** `weft-types`, `weft-gpu`, `weft-bootstrap`, `weft-core`, `weft-net`, `weft-coll`,
//! `weft-plan`, `weft-exec`, `weft-ep`, `weft-gin`. Not on `weft-nccl`: that crate is a C ABI whose exported `nccl*`
//! symbols are meant for `libnccl.so.2`, not for a Rust program linking this facade.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use weft::bootstrap::TcpBootstrap;
//! use weft::{CollConfig, Collectives, Communicator, Env};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // One rank of a job torchrun started (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
//! let env = Env::from_process()?;
//! let bootstrap = Arc::new(TcpBootstrap::builder().from_env()?);
//! let device = weft::gpu::Device::new(0)?;
//! let comm = Communicator::new(bootstrap, device, env.clone())?;
//! let coll = Collectives::new(&comm, CollConfig::from_env(&env)?)?;
//! coll.prepare(weft::DataType::Bf16, weft::ReduceOp::Sum)?;
//! # Ok(())
//! # }
//! ```

pub use weft_bootstrap as bootstrap;
pub use weft_coll as coll;
pub use weft_core as core;
pub use weft_ep as ep;
pub use weft_exec as exec;
pub use weft_gin as gin;
pub use weft_gpu as gpu;
pub use weft_net as net;
pub use weft_plan as plan;
pub use weft_types as types;

pub use weft_coll::{CollConfig, CollError, Collectives, Operator, P2pGroup, Reduction, Window};
pub use weft_core::{Communicator, Env, Error, MemoryChannel, RegisteredMemory};
pub use weft_gpu::{DeviceBuffer, DeviceElement, DeviceSlice, DeviceSliceMut, Stream};
pub use weft_types::{DataType, ReduceOp};
