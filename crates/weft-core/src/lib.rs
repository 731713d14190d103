//! # weft-core — communicators, registered memory, semaphores, MemoryChannels
//!
//! **Owns:** the [`Communicator`] (a rank's view of its peers over a bootstrap), the
//! [`Topology`] (same host, same process, peer access), [`RegisteredMemory`] (and
//! [`UserRegistration`] for application allocations) with its
//! explicit, versioned wire descriptor, the CUDA IPC transport (POSIX file descriptors passed
//! over a Unix socket between processes, legacy IPC handles as a fallback, plain pointers between
//! threads of one process), device-to-device [`Semaphore`]s, [`MemoryChannel`]s and their device
//! handles, the typed [`Env`] (every variable weft reads, with the generated reference
//! `docs/env.md`), the [`LinkModel`] of a network link, and the embedded device sources with
//! their per-device kernel loader (and the parameter lists of the test kernels,
//! [`test_kernels`], with their safe launchers, [`selftest_kernels`] and [`test_launchers`]),
//! and [`host_cxx`], which compiles device headers of plain arithmetic on the host for tests.
//!
//! **Must not:** implement collectives or algorithms (weft-coll), run a proxy or a network
//! transport (weft-net: the FIFO host side, the proxy service, PortChannels and the transports
//! stand on this crate), talk to the network except through the bootstrap, or call
//! `cuMulticast*`.
//!
//! **Depends on:** `weft-types`, `weft-gpu`, `weft-bootstrap`.

mod channel;
mod communicator;
pub mod descriptor;
pub mod device_code;
pub mod env;
mod error;
mod fd_passing;
pub mod host_cxx;
mod identity;
mod link_model;
mod memory;
pub mod selftest_kernels;
mod semaphore;
pub mod test_kernels;
pub mod test_launchers;
mod topology;
pub mod trace;
pub mod wire;

pub use channel::{MemoryChannel, MemoryChannelConfig};
pub use communicator::Communicator;
pub use device_code::{KernelLibrary, LoadedKernels};
pub use env::{CUDA_QUEUES_VAR, CUDA_QUEUES_WANTED, Env, EnvError, Network, cuda_queues_ok};
pub use error::{ConnectError, DeviceFailure, Error, RegisterMemoryError};
pub use identity::ProcessIdentity;
pub use link_model::LinkModel;
pub use memory::{RegisteredMemory, RemoteMemory, UserRegistration};
pub use semaphore::Semaphore;
pub use topology::{NodeLayout, PeerInfo, Topology};
pub use weft_bootstrap::codec::CodecError;
