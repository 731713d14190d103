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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

    use super::TARGETS;

    /// Every target is a binary of this crate with its entry in `fuzz_targets/`, and
    /// `scripts/fuzz.sh` (CI) runs every one of them by default: a target named in one place
    /// only is never fuzzed.
    #[test]
    fn every_target_is_built_and_run_by_the_script() {
        let root = env!("CARGO_MANIFEST_DIR");
        let read = |path: &str| std::fs::read_to_string(format!("{root}/{path}")).unwrap();
        let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
        let manifest = read("Cargo.toml");
        let bins: Vec<&str> = manifest
            .split("[[bin]]")
            .skip(1)
            .filter_map(|bin| bin.lines().find_map(|l| l.strip_prefix("name = \"")?.strip_suffix('"')))
            .collect();
        assert_eq!(bins, names, "fuzz/Cargo.toml's [[bin]]s");
        for name in &names {
            assert!(std::path::Path::new(&format!("{root}/fuzz_targets/{name}.rs")).is_file(), "{name}");
        }
        let script = read("../scripts/fuzz.sh");
        // `targets=("$@")` first, then the default list when no target is named.
        let defaults = script.lines().rev().find_map(|l| l.trim().strip_prefix("targets=(")?.strip_suffix(')'));
        assert_eq!(
            defaults.map(|d| d.split_whitespace().collect::<Vec<_>>()),
            Some(names),
            "scripts/fuzz.sh's default targets"
        );
    }
}
