//! # weft-gin — device-initiated communication (GIN)
//!
//! **Owns:** the device communicator of NCCL 2.28's device API: [`DevComm`] allocates, from
//! [`Requirements`], a symmetric heap per rank (signals, `put_value` staging, windows), the
//! local counters and barrier state, maps the heaps of the peers of this node (the LSA team,
//! reached by loads and stores over NVLink) and opens PortChannels through the proxy to every
//! other peer; its [`weft_types::DevCommHandle`] is what kernels receive. The [`Team`]s (world,
//! LSA, rail) and their rank conversions, the checks of requirements, the heap's layout, and the
//! example kernels (`device/kernels/gin/`: AllToAll, ring AllGather, halo exchange) with their
//! parameter lists, safe launchers on typed device buffers (eager or captured in a graph) and
//! host references ([`examples`]), and the benchmark's probes (put + signal ping-pong, put
//! stream) and their launchers. The device API is `device/include/weft/gin.cuh` and `lsa.cuh`; the
//! semantics are in `docs/gin.md`.
//!
//! **Must not:** read or write device memory behind a kernel's back while one may run, call
//! multicast (NVLS) APIs, or change the proxy's transports (it only opens PortChannels).
//!
//! **Depends on:** `weft-types` (the handle's layout), `weft-gpu` (memory, kernels),
//! `weft-core` (communicator, registration, mapping), `weft-net` (the proxy, PortChannels).

// Unsafe code only where the example and probe calls enqueue work on device addresses (`examples`).
#![deny(unsafe_code)]

mod dev_comm;
pub mod device_code;
#[allow(unsafe_code)]
pub mod examples;
pub mod launch;
mod layout;
mod requirements;
mod team;

pub use dev_comm::{Backend, DevComm, GinWindow};
pub use layout::{HeapLayout, WINDOW_ALIGN};
pub use requirements::{GinError, Requirements};
pub use team::{Team, Teams};
