//! Device-side tracing: `%globaltimer` timestamps at the phase boundaries of weft's kernels,
//! written as a Chrome trace (docs/trace.md).
//!
//! A kernel compiled with `WEFT_TRACE_ENABLED` (its "traced" variant, a separate NVRTC cache
//! entry; the untraced one is unchanged) opens with `WEFT_TRACE_SCOPE(kernel)` and marks its
//! phases with `WEFT_TRACE_MARK(phase)` (weft/trace.cuh): the first active lane of each warp
//! logs `(time, warp, phase)` into the block's shared memory, and the block's last warp to
//! leave copies the log into the [`Recorder`]'s ring when the call is sampled. Phases and
//! kernels are named once, in [`table`], and generated into the device header ([`header`]).
//! [`chrome`] turns what a recorder took into the trace; a [`Tracer`] is what a crate that
//! loads kernels holds: the environment's settings, the recorder and the rank's trace file.

pub mod chrome;
pub mod header;
pub mod layout;
mod recorder;
pub mod table;
mod tracer;

pub use chrome::{RankTrace, chrome_trace, merge};
pub use recorder::{RING_GLOBAL, Recorder, Sampling};
pub use tracer::{TraceConfig, TraceError, Tracer};

/// The define that compiles a kernel source's traced variant.
pub const TRACE_DEFINE: &str = "WEFT_TRACE_ENABLED=1";

/// `defines` with [`TRACE_DEFINE`] added when `traced`.
pub fn with_trace(defines: &[String], traced: bool) -> Vec<String> {
    let mut out = defines.to_vec();
    if traced {
        out.push(TRACE_DEFINE.to_string());
    }
    out
}

/// `source` without its trace marks: every line that is a `WEFT_TRACE_*(...);` statement or
/// includes `weft/trace.cuh`, removed. What an untraced compile must equal
/// ([`crate::KernelLibrary::check_marks_compile_away`]).
pub fn without_marks(source: &str) -> String {
    let is_mark = |line: &str| {
        let line = line.trim();
        (line.starts_with("WEFT_TRACE_") && line.ends_with(");") && !line.contains(' '))
            || line == "#include \"weft/trace.cuh\""
    };
    source.split_inclusive('\n').filter(|line| !is_mark(line)).collect()
}

/// Every kernel of `source` whose trace scope names another kernel, as `"kernel: scope"`: a
/// scope is the first `WEFT_TRACE_SCOPE(...)` after a `__global__` definition and before the
/// next one. A kernel without a scope is not listed.
pub fn scope_mismatches(source: &str) -> Vec<String> {
    let definitions: Vec<usize> = source.match_indices("__global__").map(|(i, _)| i).collect();
    let mut wrong = Vec::new();
    for (n, &start) in definitions.iter().enumerate() {
        let end = definitions.get(n + 1).copied().unwrap_or(source.len());
        let body = &source[start..end];
        // The kernel's name is the identifier before the first `(` that is not its launch bounds.
        let name = body
            .match_indices('(')
            .filter_map(|(open, _)| body[..open].split(|c: char| !(c.is_alphanumeric() || c == '_')).next_back())
            .find(|name| !name.is_empty() && *name != "__launch_bounds__");
        let Some(name) = name else { continue };
        let Some(at) = body.find("WEFT_TRACE_SCOPE(") else { continue };
        let rest = &body[at + "WEFT_TRACE_SCOPE(".len()..];
        let scope = rest.split(')').next().unwrap_or_default().trim();
        if scope != name {
            wrong.push(format!("{name}: {scope}"));
        }
    }
    wrong
}

/// Where rank `rank` of `ranks` writes the trace asked for at `path`: `{rank}` in the path
/// becomes the rank; otherwise, with more than one rank, `.rank<r>` goes before the extension.
pub fn rank_path(path: &std::path::Path, rank: u32, ranks: u32) -> std::path::PathBuf {
    let text = path.to_string_lossy();
    if text.contains("{rank}") {
        return text.replace("{rank}", &rank.to_string()).into();
    }
    if ranks <= 1 {
        return path.to_path_buf();
    }
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.rank{rank}.{}", ext.to_string_lossy()),
        None => format!("{stem}.rank{rank}"),
    };
    path.with_file_name(name)
}

/// Writes `traces` as one Chrome trace to `path`.
pub fn write_chrome(path: &std::path::Path, traces: &[RankTrace]) -> std::io::Result<()> {
    let text = serde_json::to_string(&chrome_trace(traces)).map_err(std::io::Error::other)?;
    std::fs::write(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_scope_naming_another_kernel_is_found() {
        let good = "extern \"C\" __global__ void a(int x) {\n  WEFT_TRACE_SCOPE(a);\n}\n";
        let bad = "extern \"C\" __global__ void __launch_bounds__(512)\n    b(int x) {\n  WEFT_TRACE_SCOPE(a);\n}\n";
        assert!(scope_mismatches(good).is_empty());
        assert_eq!(scope_mismatches(&format!("{good}{bad}")), vec!["b: a".to_string()]);
    }

    #[test]
    fn marks_and_the_trace_include_are_removed_and_nothing_else() {
        let source = "#include \"weft/trace.cuh\"\nvoid k() {\n  WEFT_TRACE_SCOPE(k);\n  f();\n  WEFT_TRACE_WARP_MARK(send);\n  \
                      g(); // WEFT_TRACE_MARK(x);\n}\n";
        assert_eq!(without_marks(source), "void k() {\n  f();\n  g(); // WEFT_TRACE_MARK(x);\n}\n");
    }

    #[test]
    fn each_rank_gets_its_own_file() {
        assert_eq!(rank_path(Path::new("t/ar.json"), 1, 2), Path::new("t/ar.rank1.json"));
        assert_eq!(rank_path(Path::new("t/ar-{rank}.json"), 3, 4), Path::new("t/ar-3.json"));
        assert_eq!(rank_path(Path::new("ar.json"), 0, 1), Path::new("ar.json"));
        assert_eq!(rank_path(Path::new("trace"), 2, 4), Path::new("trace.rank2"));
    }
}
