//! The worker processes of `weft bench` and `weft tune`: one per GPU, started by the launcher
//! with their options in a variable, each leaving `Result<T, String>` as its report, while
//! rank 0's progress drives the bar.

use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;
use weft_bootstrap::TorchrunEnv;

/// Runs `worker` on `gpus` processes with the variables `envs` set (the options variable
/// among them), draws a bar over `items` (the byte sizes rank 0 records as it finishes them),
/// and returns every rank's report, in rank order: each worker writes `Result<T, String>` as
/// JSON.
pub(crate) fn run_workers<T: serde::de::DeserializeOwned>(
    gpus: usize,
    worker: &str,
    envs: &[(&str, String)],
    items: &[usize],
    deadline: Duration,
) -> Result<Vec<T>, Box<dyn std::error::Error>> {
    let mut bar = super::progress::Bar::new(items);
    let finished = super::launch::run_ranks_watching(gpus, &[worker], envs, deadline, &mut |dir| bar.update(dir));
    bar.finish();
    let finished = finished?;
    let mut per_rank = Vec::new();
    for (rank, status) in finished.statuses.iter().enumerate() {
        let report = finished
            .report(rank)
            .and_then(|b| serde_json::from_slice::<Result<T, String>>(&b).ok())
            .ok_or_else(|| format!("rank {rank} exited with {status} and no report"))?
            .map_err(|e| format!("rank {rank}: {e}"))?;
        per_rank.push(report);
    }
    Ok(per_rank)
}

/// The body of a worker process: reads its options (JSON) from the variable `options`, runs
/// `run` and writes `Result<T, String>` as the rank's report for [`run_workers`].
pub(crate) fn worker_main<O: serde::de::DeserializeOwned, T: Serialize>(
    options: &str,
    run: impl FnOnce(&O, &TorchrunEnv) -> Result<T, Box<dyn std::error::Error>>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let super::launch::Started::Launcher(torchrun) = super::launch::started_from_env()? else {
        return Err(
            "this is one rank of `weft bench`, started by it: run `weft bench` (alone, or under torchrun)".into()
        );
    };
    let options: O = serde_json::from_str(&std::env::var(options)?)?;
    let result = run(&options, &torchrun).map_err(|e| e.to_string());
    let failed = result.is_err();
    if let Err(e) = &result {
        eprintln!("rank {}: {e}", torchrun.rank);
    }
    super::launch::write_report(torchrun.rank, &serde_json::to_vec(&result)?)?;
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
