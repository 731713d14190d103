//! The proxy layer: host threads that execute the commands GPUs push into FIFOs.
//!
//! This is a reusable layer, not a PortChannel detail: the PortChannel device API, the
//! expert-parallel network path and a GIN-style proxy backend all push [`FifoCommand`]s and
//! register handlers for their op numbers. Pieces:
//!
//! - [`ProxyService`] ([`service`]): threads (optionally pinned to the CPUs near a GPU), each
//!   polling several FIFOs round-robin, a [`CommandHandler`] per op number, shutdown that
//!   drains, stops and joins without ever hanging a kernel or the host.
//! - [`FlowControl`] ([`flow`]): bounded in-flight operations per connection; a command that
//!   finds no credit stays in its FIFO (backpressure reaches the GPU's `fifo_push`).
//! - [`immediate`] and [`ordering`]: counter updates as 32-bit immediate data and the
//!   receiving side's per-(peer, channel) sequence ordering of them, for carriers that reorder;
//!   [`counters`] applies them to an inbox's counters through that ordering, and [`transfer`]
//!   is the handler of the expert-parallel path's `TransferCmd`s (op 10) that stamps and sends
//!   them.
//! - [`transport`]: the [`Transport`] trait (put, signal, flush semantics) and the TCP
//!   transport; InfiniBand verbs behind the `ib` feature.
//!
//! See docs/proxy.md for the design, the ordering rules and what is not done yet.
//!
//! [`FifoCommand`]: weft_types::FifoCommand

pub mod counters;
pub mod flow;
pub mod immediate;
pub mod ordering;
pub mod service;
pub mod transfer;
pub mod transport;

pub use counters::{CounterConfig, CounterError};
pub use flow::FlowControl;
pub use service::{
    CommandHandler, Handled, Pending, ProxyConfig, ProxyError, ProxyService, ProxyServiceBuilder, ShutdownReport,
    TransportHandler, cpus_near_pci_device, parse_cpu_list,
};
pub use transfer::{TransferConfig, TransferHandler, TransferLink};
pub use transport::{
    ConnectionId, HostCounterStream, HostInbox, HostMemory, Inbox, Memory, MemoryError, MemoryTable, Op, Submitted,
    Transport, TransportError,
};
