//! # weft-nccl — `libnccl.so.2`: weft behind the NCCL C API
//!
//! **Owns:** the NCCL 2.28 C ABI (every function of `nccl.h`, with its `pnccl*` alias), its C
//! types and constants ([`ffi`], checked against the real header by a C probe), communicator
//! handles and their initialisation (one rank per call, several at once from one thread inside
//! a group or `ncclCommInitAll`, splits), per-thread group semantics, the per-call route to
//! weft's collectives or to the real NCCL loaded from `WEFT_NCCL_FALLBACK_LIB`, the host side of
//! NCCL's device API on weft-gin (device communicators, teams, requirements; [`device_api`]),
//! and the NCCL error model (codes plus `ncclGetLastError`).
//!
//! **Must not:** let a panic cross the C ABI (every body runs in [`guard::guard`]); write an
//! output pointer unless the call succeeds; refuse a configuration NCCL 2.28 accepts (hints it
//! has no equivalent for are logged once and passed to the fallback); return a wrong result for a request weft cannot serve (without a
//! fallback it is an error); call `cuMulticast*`.
//!
//! **Depends on:** `weft-types`, `weft-gpu`, `weft-bootstrap`, `weft-core`, `weft-coll` (its
//! NCCL loader loads the fallback), `weft-gin` (device communicators).
//!
//! `unsafe` is allowed here (ARCHITECTURE §1): the crate is a C ABI.

pub mod api;
pub mod comm;
pub mod dev_comm;
pub mod dev_requirements;
pub mod device_api;
pub mod device_ffi;
pub mod env;
pub mod error;
pub mod exec;
pub mod exports;
pub mod fallback;
pub mod ffi;
pub mod group;
pub mod guard;
pub mod ops;
pub mod route;

pub use error::{Code, NcclError};
