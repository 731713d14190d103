//! # weft-ep — MoE expert parallelism over NVLink and between nodes
//!
//! **Owns:** token dispatch and combine for mixture-of-experts layers, as DeepEP V1's `Buffer`
//! offers them: the layout of a routing, the normal (high-throughput) dispatch with its notify
//! phase and its handle, the combine, the low-latency dispatch and combine for decoding (FP8
//! cast in the kernel, fixed per-expert receive slots, send and receive kernels for DeepEP's
//! hook, no host sync: CUDA-graph capturable; between nodes through `weft-gin`'s puts and
//! signals, docs/ep.md "Low latency between nodes"), the normal mode between nodes in two hops
//! (a rail hop of GIN puts, then the one-node kernels over each node: `internode.rs`'s host
//! sequence, docs/ep.md "Normal mode between nodes"), their device kernels
//! (`device/kernels/ep/`, helpers in `device/include/weft/ep/`), the buffer they stage tokens
//! in, and a CPU model of every result ([`model`]) that tests and `weft selftest --only ep`
//! check the kernels against.
//!
//! **Must not:** call `cuMulticast*`, spin without a bound (every wait names the rank, the peer
//! and the phase when it gives up), or synchronise with the host except where DeepEP does (the
//! counts of a dispatch without a handle) and at the end of a rail hop between nodes (whose
//! kernels wait for the proxy's copies, so nothing may be queued behind them: docs/ep.md, "The
//! proxy's copies and the hardware queues").
//!
//! **Depends on:** `weft-types`, `weft-gpu`, `weft-core`, `weft-gin` (the device communicator of
//! a group spanning nodes).
//!
//! ## Two layers
//!
//! - The **typed layer** ([`typed`], [`typed_low_latency`]) is the Rust API, safe to call: it
//!   takes views of `weft_gpu::DeviceBuffer`s, checks every length against the routing's
//!   shape and every GPU against the buffer's (an [`EpError::InvalidArgument`] naming the
//!   argument), owns the layout and handles that later calls trust, and has the stream keep
//!   every named buffer alive until its work has run. `weft selftest` and `weft bench` use it.
//! - The **raw layer** ([`raw`], [`low_latency`]: the `Buffer::raw_*` methods) takes device
//!   addresses, shapes and a stream, and is `unsafe`: what an address holds, and for how long,
//!   is the caller's contract. It checks shapes and sizes all the same. It exists for bindings
//!   that hold the tensors themselves (weft's Python package); the typed layer calls it.
//!
//! | DeepEP | weft-ep (typed) | raw |
//! |---|---|---|
//! | `Buffer(group, num_nvl_bytes, num_rdma_bytes)` | [`Buffer::new`] (collective) | |
//! | `Config(num_sms, …)` | [`Config`] (`num_sms`; weft stages whole dispatches, so no chunk sizes) | |
//! | `get_nvl_buffer_size_hint` | [`nvl_bytes_hint`] (between nodes [`nvl_bytes_hint_between_nodes`]) | |
//! | `get_rdma_buffer_size_hint` | [`rdma_bytes_hint`] (the normal mode between nodes) | |
//! | `get_dispatch_layout` | [`Buffer::get_dispatch_layout`] | [`Buffer::raw_get_dispatch_layout`] |
//! | `dispatch` (no handle) | [`Buffer::notify_dispatch`] (host sync), [`Buffer::dispatch`] | [`Buffer::raw_notify_dispatch`], [`Buffer::recv_counts`], [`Buffer::raw_dispatch`] |
//! | `dispatch(handle=…)` | [`Buffer::dispatch`] with a dispatched [`typed::DispatchHandle`] | [`Buffer::raw_dispatch`] with `cached` |
//! | `combine` | [`Buffer::combine`] | [`Buffer::raw_combine`] |
//! | `get_low_latency_rdma_size_hint` | [`low_latency_rdma_size_hint`] | |
//! | `low_latency_dispatch` | [`Buffer::low_latency_dispatch`] (`return_recv_hook` and the hook: [`low_latency::LlKernels`]) | [`Buffer::raw_low_latency_dispatch`] |
//! | `low_latency_combine` | [`Buffer::low_latency_combine`] | [`Buffer::raw_low_latency_combine`] |
//! | the intranode handle tuple | [`typed::DispatchHandle`] (owns five of the six, with the layout; `recv_src_idx` is an output of each dispatch) | [`raw::Handle`] (same six tensors, same order) |
//! | `dispatch`/`combine` between nodes (`internode_*`) | the same typed calls | [`Buffer::raw_notify_between_nodes`], [`Buffer::raw_dispatch_between_nodes`], [`Buffer::raw_combine_between_nodes`] |
//! | the internode handle tuple | [`typed::DispatchHandle`] (it also owns the two hops' tensors) | [`RailHandle`] (the two hops' tensors; the caller holds `rank_prefix_matrix`, `recv_src_idx` and the layout) |
//! | the low-latency handle | [`typed_low_latency::LlHandle`] | its two tensors |
//!
//! Semantics are DeepEP's: receive order by source rank, then token; `recv_topk_idx` holds
//! local expert indices (-1 and weight 0 for other ranks' experts); combine sums each token's
//! rows unweighted (the expert side weights them) after the optional biases, in increasing rank
//! order in f32, so results are bitwise reproducible. DeepEP's `send_head` entries are ring
//! positions; weft's are the token's position among the tokens sent to that rank (-1: none).
//! Low-latency rows are packed per local expert by source rank, then token (DeepEP's order
//! across ranks depends on arrival); the low-latency combine weights each row by its top-k
//! weight, as DeepEP's does. Not offered: LogFMT, zero-copy combine, UE8M0 packed scales,
//! the receive-cost statistics, and the shrink (fault-tolerance) masks.

mod buffer;
pub mod device_code;
mod error;
mod internode;
mod launch;
pub mod low_latency;
pub mod model;
mod phase_timer;
mod rail_arrival;
mod rail_raw;
pub mod raw;
mod region;
pub mod typed;
pub mod typed_low_latency;
mod views;

pub use buffer::{Buffer, Config, DEFAULT_NUM_SMS};
pub use error::EpError;
pub use rail_raw::RailHandle;
pub use region::{
    LL_MAX_EXPERTS, MAX_CHANNELS, MAX_LOCAL_EXPERTS, MAX_RANKS, ll_message_bytes, low_latency_net_bytes_hint,
    low_latency_rdma_size_hint, nvl_bytes_hint, nvl_bytes_hint_between_nodes, rdma_bytes_hint,
};
