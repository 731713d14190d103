//! `weft bench --trace DIR`: tracing turned on for the ranks, and one Chrome trace per row and
//! weft contender written into DIR (docs/trace.md).

use std::path::Path;

use weft_core::Env;
use weft_core::env::vars;
use weft_core::trace::{RankTrace, rank_path, write_chrome};

/// `env` with tracing on when `dir` is given: what no row takes (the set-up's calls) goes to
/// `<dir>/<name>-rest.json` when the collectives or buffers are dropped.
pub(crate) fn traced_env(mut env: Env, dir: Option<&Path>, name: &str) -> std::io::Result<Env> {
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)?;
        env.set_var(&vars::WEFT_TRACE, dir.join(format!("{name}-rest.json")).to_string_lossy());
    }
    Ok(env)
}

/// Writes `trace` (what a contender recorded over one row) to `<dir>/<name>.json`, made per
/// rank by [`rank_path`]; nothing when tracing is off.
pub(crate) fn write_row(
    dir: &Path,
    name: &str,
    rank: usize,
    ranks: usize,
    trace: Option<RankTrace>,
) -> std::io::Result<()> {
    let Some(trace) = trace else { return Ok(()) };
    let path = rank_path(&dir.join(format!("{name}.json")), rank as u32, ranks as u32);
    write_chrome(&path, &[trace])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_s_trace_lands_in_the_folder_per_rank_and_tracing_goes_on() {
        let dir = std::env::temp_dir().join(format!("weft-bench-trace-{}", std::process::id()));
        let env = traced_env(Env::default(), Some(&dir), "allreduce").unwrap();
        assert_eq!(env.var(&vars::WEFT_TRACE), Some(dir.join("allreduce-rest.json").to_string_lossy().as_ref()));
        assert_eq!(traced_env(Env::default(), None, "x").unwrap().var(&vars::WEFT_TRACE), None);
        write_row(&dir, "allreduce-1024-weft", 1, 2, Some(RankTrace { rank: 1, ..RankTrace::default() })).unwrap();
        write_row(&dir, "allreduce-2048-weft", 1, 2, None).unwrap();
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("allreduce-1024-weft.rank1.json")).unwrap()).unwrap();
        assert_eq!(written["traceEvents"][0]["args"]["name"], "rank 1");
        assert!(!dir.join("allreduce-2048-weft.rank1.json").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
