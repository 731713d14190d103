//! What the GPU examples share: finding GPUs (or declaring the skip) and running one rank per
//! thread.

use std::sync::Arc;

use weft::bootstrap::InProcessBootstrap;
use weft::gpu::Device;

/// The error type of the examples.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The GPUs visible here. With none, prints one line saying `example` needs a GPU and returns
/// `Ok(None)` (the example skips and exits 0), or, under `WEFT_REQUIRE_GPU=1`, returns the error.
pub(crate) fn gpus_or_skip(example: &str) -> Result<Option<usize>, BoxError> {
    let (count, why) = match Device::count() {
        Ok(0) => (0, "no CUDA device is visible".to_string()),
        Ok(n) => (n, String::new()),
        Err(e) => (0, e.to_string()),
    };
    if count > 0 {
        return Ok(Some(count));
    }
    if std::env::var("WEFT_REQUIRE_GPU").as_deref() == Ok("1") {
        return Err(format!("{example} needs a GPU and WEFT_REQUIRE_GPU=1 forbids skipping: {why}").into());
    }
    println!("{example}: SKIPPED: this example needs a GPU ({why}); set WEFT_REQUIRE_GPU=1 to make that an error");
    Ok(None)
}

/// Runs `rank_main(rank, bootstrap)` for `ranks` ranks, one thread each, joined through an
/// in-process bootstrap, and returns every rank's result in rank order (a panic becomes an
/// error naming the rank).
pub(crate) fn run_ranks<T: Send + 'static>(
    ranks: usize,
    rank_main: impl Fn(usize, Arc<InProcessBootstrap>) -> Result<T, BoxError> + Send + Sync + 'static,
) -> Result<Vec<T>, BoxError> {
    InProcessBootstrap::run_threads(ranks, "rank", rank_main)?
        .into_iter()
        .enumerate()
        .map(|(rank, outcome)| {
            outcome
                .map_err(|_| BoxError::from(format!("rank {rank} panicked")))?
                .map_err(|e| format!("rank {rank}: {e}").into())
        })
        .collect()
}
