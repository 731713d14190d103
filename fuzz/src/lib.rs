//! # weft-fuzz — libFuzzer targets for weft's decoders of untrusted bytes
//!
//! **Owns:** one module per target, each with `check` (what the target asserts of any input)
//! and `seeds` (valid inputs made by the real encoders, the committed corpus's source), and
//! [`corpus`], which keeps `fuzz/corpus/<target>/` equal to the seeds.
//!
//! Every `check` holds the same contract: decoding any bytes returns a value or a typed error,
//! never panics, aborts, hangs or allocates without bound; where an encoder exists, whatever
//! decodes encodes back to the same value (and, for the strict binary codecs, to the same
//! bytes). A broken contract panics, which libFuzzer reports as a crash.
//!
//! Built with libFuzzer's coverage instrumentation on stable Rust by `scripts/fuzz.sh`; the
//! binaries in `fuzz_targets/` only hand their input to `check`.

pub mod bootstrap_frame;
pub mod corpus;
pub mod counter_order;
pub mod memory_descriptor;
pub mod plan_loader;
pub mod proxy_wire;
pub mod tuning_table;

/// One fuzz target: its name (its binary and its corpus folder), its check and its seeds.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Name of the binary in `fuzz_targets/` and of the folder in `corpus/`.
    pub name: &'static str,
    /// What the target asserts of any input (panics on a broken contract); returns whether
    /// the input decoded.
    pub check: fn(&[u8]) -> bool,
    /// The seed corpus: `(file name, bytes)`.
    pub seeds: fn() -> Vec<(&'static str, Vec<u8>)>,
}

/// Every target.
pub const TARGETS: [Target; 6] = [
    Target { name: "bootstrap_frame", check: bootstrap_frame::check, seeds: bootstrap_frame::seeds },
    Target { name: "memory_descriptor", check: memory_descriptor::check, seeds: memory_descriptor::seeds },
    Target { name: "plan_loader", check: plan_loader::check, seeds: plan_loader::seeds },
    Target { name: "tuning_table", check: tuning_table::check, seeds: tuning_table::seeds },
    Target { name: "proxy_wire", check: proxy_wire::check, seeds: proxy_wire::seeds },
    Target { name: "counter_order", check: counter_order::check, seeds: counter_order::seeds },
];
