//! # weft-ep — MoE expert parallelism over NVLink
//!
//! **Owns:** token dispatch and combine for mixture-of-experts layers, as DeepEP V1's `Buffer`
//! offers them: the layout of a routing, the normal (high-throughput) dispatch with its notify
//! phase and its handle, the combine, the low-latency dispatch and combine for decoding, their
//! device kernels (`device/kernels/ep/`, helpers in `device/include/weft/ep/`) and a CPU model
//! of every result ([`model`]) that tests and the self-test check the kernels against.
//!
//! **Must not:** call `cuMulticast*`, spin without a bound, or synchronise with the host on the
//! cached-handle and low-latency paths.
//!
//! **Depends on:** `weft-types`, `weft-gpu`, `weft-core`.
//!
//! ## API, mapped onto DeepEP's `deep_ep.Buffer`
//!
//! | DeepEP | weft-ep |
//! |---|---|
//! | `get_dispatch_layout` | [`model::dispatch_layout`] (CPU) |
//! | `dispatch` / `combine` | [`model::dispatch`] / [`model::combine`] (CPU) |

pub mod device_code;
pub mod model;
