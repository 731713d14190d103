//! # weft-core — communicators, registered memory, semaphores, Memory and Port channels
//!
//! **Owns:** the [`Communicator`] (a rank's view of its peers over a bootstrap), the
//! [`Topology`] (same host, same process, peer access), [`RegisteredMemory`] (and
//! [`UserRegistration`] for application allocations) with its
//! explicit, versioned wire descriptor, the CUDA IPC transport (POSIX file descriptors passed
//! over a Unix socket between processes, legacy IPC handles as a fallback, plain pointers between
//! threads of one process), device-to-device [`Semaphore`]s, [`MemoryChannel`]s and their device
//! handles, [`PortChannel`]s (commands through a FIFO to this rank's [`PortProxy`], executed by
//! the copy engine) with their host-to-device semaphores, the typed [`Env`], the embedded device
//! sources with their per-device kernel loader, and the proxy layer: the host side of the
//! GPU→CPU [`fifo`], the [`proxy`] service with its flow control and the transports it drives
//! (copy engine with an emulated NIC between virtual nodes, TCP; InfiniBand verbs behind the
//! `ib` feature).
//!
//! **Must not:** implement collectives or algorithms (weft-coll), talk to the network except
//! through the bootstrap and the proxy's transports, make a CUDA call that can wait behind a
//! running kernel on a proxy thread, or call `cuMulticast*`.
//!
//! **Depends on:** `weft-types`, `weft-gpu`, `weft-bootstrap`.

mod channel;
mod communicator;
pub mod descriptor;
pub mod device_code;
mod env;
mod error;
mod fd_passing;
pub mod fifo;
mod identity;
mod memory;
#[cfg(not(all(test, weft_loom)))]
mod port_channel;
#[cfg(all(feature = "ib", not(all(test, weft_loom))))]
mod port_ib;
pub mod proxy;
pub mod selftest_kernels;
mod semaphore;
mod sync;
mod topology;
mod wire;

pub use channel::{MemoryChannel, MemoryChannelConfig};
pub use communicator::Communicator;
pub use device_code::{KernelLibrary, LoadedKernels};
pub use env::{CUDA_QUEUES_VAR, CUDA_QUEUES_WANTED, Env, EnvError, Network, cuda_queues_ok};
pub use error::{ConnectError, DeviceFailure, Error, RegisterMemoryError};
pub use identity::ProcessIdentity;
pub use memory::{RegisteredMemory, RemoteMemory, UserRegistration};
#[cfg(not(all(test, weft_loom)))]
pub use port_channel::{MemoryId, PortChannel, PortProxy, PortProxyConfig, PortRoute};
pub use semaphore::Semaphore;
pub use topology::{NodeLayout, PeerInfo, Topology};
pub use weft_bootstrap::codec::CodecError;
