//! # weft-net — the proxy layer: FIFO host side, proxy service, PortChannels, transports
//!
//! **Owns:** the host side of the GPU→CPU [`fifo`] (layout and protocol in
//! `weft_types::FifoCommand` and `device/include/weft/fifo.cuh`), the [`proxy`] service (threads
//! that execute the commands kernels push, a handler per op number, flow control, draining
//! shutdown), the transports it drives ([`proxy::transport`]: copy engine with an emulated NIC
//! between virtual nodes, TCP through pinned host memory, InfiniBand verbs and its software RC
//! fabric behind the `ib` feature, and the router in front of them), the counter immediates of
//! the expert-parallel network path and their receiving-side sequence ordering
//! ([`proxy::immediate`], [`proxy::ordering`]), and the host side of
//! [`PortChannel`]s: a rank's [`PortProxy`] with its FIFO, the route to each peer
//! ([`PortRoute`]) and the pairwise channel setup; and the safe launchers of the device tests'
//! and benchmarks' kernels over them ([`test_launchers`]).
//!
//! **Must not:** implement collectives or algorithms (weft-coll), define device layouts
//! (weft-types) or channels that need no proxy (weft-core), make a CUDA call that can wait
//! behind a running kernel on a proxy thread, or call `cuMulticast*`.
//!
//! **Depends on:** `weft-types`, `weft-gpu`, `weft-bootstrap`, `weft-core` (the communicator,
//! registered memory and the environment a PortProxy is built from).

pub mod fifo;
#[cfg(not(all(test, weft_loom)))]
mod port_channel;
#[cfg(all(feature = "ib", not(all(test, weft_loom))))]
mod port_ib;
pub mod proxy;
mod sync;
#[cfg(not(all(test, weft_loom)))]
pub mod test_launchers;

#[cfg(not(all(test, weft_loom)))]
pub use port_channel::{MAX_PROXY_FIFOS, MemoryId, PortChannel, PortProxy, PortProxyConfig, PortRoute};
