//! Running one process per GPU on this host, torchrun-style: every child gets `RANK`,
//! `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, plus a folder to leave its report
//! in. Bounded: children still running at the deadline are killed and that is an error. Also
//! ranks as threads of this process ([`run_rank_threads`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_bootstrap::InProcessBootstrap;

/// Environment variable naming the folder where each rank writes `rank-<r>.json`.
pub const REPORT_DIR: &str = "WEFT_REPORT_DIR";

/// A finished multi-process run: its report folder and every child's exit status.
#[derive(Debug)]
pub struct Finished {
    dir: PathBuf,
    /// Exit status of each rank.
    pub statuses: Vec<ExitStatus>,
}

impl Finished {
    /// The report rank `rank` wrote, if it wrote one.
    pub fn report(&self, rank: usize) -> Option<Vec<u8>> {
        std::fs::read(report_path(&self.dir, rank)).ok()
    }
}

impl Drop for Finished {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where rank `rank` writes its report inside `dir`.
pub fn report_path(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("rank-{rank}.json"))
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Runs `ranks` copies of this executable with `args` and extra `envs`, waits for all of them
/// (at most `deadline`), and returns their statuses.
pub fn run_ranks(ranks: usize, args: &[&str], envs: &[(&str, String)], deadline: Duration) -> Result<Finished, String> {
    run_ranks_watching(ranks, args, envs, deadline, &mut |_| {})
}

/// [`run_ranks`], calling `watch` with the report folder every few milliseconds while the ranks
/// run (to follow what they write there, e.g. progress).
pub fn run_ranks_watching(
    ranks: usize,
    args: &[&str],
    envs: &[(&str, String)],
    deadline: Duration,
    watch: &mut dyn FnMut(&Path),
) -> Result<Finished, String> {
    let io = |e: std::io::Error| e.to_string();
    let dir = std::env::temp_dir().join(format!("weft-ranks-{}-{:08x}", std::process::id(), rand::random::<u32>()));
    std::fs::create_dir_all(&dir).map_err(io)?;
    let port = free_port().map_err(io)?;
    let exe = std::env::current_exe().map_err(io)?;
    let mut children: Vec<Child> = Vec::new();
    for rank in 0..ranks {
        let mut command = Command::new(&exe);
        command
            .args(args)
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", ranks.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env(REPORT_DIR, &dir);
        for (k, v) in envs {
            command.env(k, v);
        }
        match command.spawn() {
            Ok(child) => children.push(child),
            Err(e) => {
                children.iter_mut().for_each(|c| drop(c.kill()));
                return Err(format!("starting rank {rank}: {e}"));
            }
        }
    }
    let end = Instant::now() + deadline;
    let mut statuses = vec![None; ranks];
    while statuses.iter().any(Option::is_none) {
        for (rank, child) in children.iter_mut().enumerate() {
            if statuses[rank].is_none() {
                statuses[rank] = child.try_wait().map_err(io)?;
            }
        }
        if Instant::now() > end {
            children.iter_mut().for_each(|c| drop(c.kill()));
            return Err(format!("ranks still running after {deadline:?}: killed"));
        }
        watch(&dir);
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Finished { dir, statuses: statuses.into_iter().flatten().collect() })
}

/// In a child: the launcher's report folder.
pub fn report_dir() -> Result<PathBuf, String> {
    std::env::var_os(REPORT_DIR)
        .map(PathBuf::from)
        .ok_or_else(|| format!("{REPORT_DIR} is not set: run through the launcher"))
}

/// In a child: writes this rank's report where the launcher will look for it.
pub fn write_report(rank: usize, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(report_path(&report_dir()?, rank), bytes).map_err(|e| e.to_string())
}

/// Runs `rank_main(rank, bootstrap)` for `ranks` ranks as threads of this process (named
/// `<name>-<rank>`), meeting through an in-process bootstrap, and returns every thread's
/// outcome in rank order (`Err` when it panicked).
pub fn run_rank_threads<T: Send + 'static>(
    ranks: usize,
    name: &str,
    rank_main: impl Fn(usize, Arc<InProcessBootstrap>) -> T + Send + Sync + 'static,
) -> Result<Vec<std::thread::Result<T>>, Box<dyn std::error::Error>> {
    let rank_main = Arc::new(rank_main);
    let handles = InProcessBootstrap::group(ranks)?
        .into_iter()
        .enumerate()
        .map(|(rank, bootstrap)| {
            let rank_main = Arc::clone(&rank_main);
            std::thread::Builder::new()
                .name(format!("{name}-{rank}"))
                .spawn(move || rank_main(rank, Arc::new(bootstrap)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(handles.into_iter().map(|h| h.join()).collect())
}
