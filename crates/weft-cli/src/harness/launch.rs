//! Running one process per GPU on this host, torchrun-style: every child gets `RANK`,
//! `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, plus a folder to leave its report
//! in. Bounded: children still running at the deadline are killed and that is an error. Also
//! ranks as threads of this process ([`run_rank_threads`]), how a process was started
//! ([`started`]: by this launcher, by torchrun, or by hand), and the end of a job torchrun
//! started ([`conclude`]: every rank's outcome to rank 0, the verdict back to every rank).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use weft_bootstrap::{Bootstrap, InProcessBootstrap, TorchrunEnv};

/// How ranks are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One process per GPU.
    Processes,
    /// One process driving every GPU, a thread per GPU.
    Threads,
    /// Both, one after the other.
    Both,
}

/// Environment variable naming the folder where each rank writes `rank-<r>.json`.
pub const REPORT_DIR: &str = "WEFT_REPORT_DIR";

/// How this process was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// As a rank of this launcher ([`run_ranks`]), which waits for its report.
    Launcher(TorchrunEnv),
    /// As a rank of a job torchrun (or anything setting its variables) started: nobody waits
    /// for a report, the ranks conclude among themselves.
    Torchrun(TorchrunEnv),
    /// By hand: the command launches its ranks itself.
    Plain,
}

/// How this process was started, from the variables `var` reads (the process environment,
/// injected for tests): the launcher's report folder marks its ranks; `RANK` or `WORLD_SIZE`
/// marks a torchrun rank, whose launch variables must then all be right (a stray
/// `MASTER_ADDR` alone is not a job); neither, a start by hand.
pub fn started(var: impl Fn(&str) -> Option<String>) -> Result<Started, String> {
    let torchrun = || TorchrunEnv::from_lookup(&var).map_err(|e| e.to_string());
    if var(REPORT_DIR).is_some() {
        Ok(Started::Launcher(torchrun()?))
    } else if var("RANK").is_some() || var("WORLD_SIZE").is_some() {
        Ok(Started::Torchrun(torchrun()?))
    } else {
        Ok(Started::Plain)
    }
}

/// [`started`] from the process environment.
pub fn started_from_env() -> Result<Started, String> {
    started(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
}

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

/// Bootstrap tag of the outcomes the ranks send rank 0 in [`conclude`] (tags, not collectives:
/// a rank that failed half way through a collective cannot take one for the other).
const OUTCOME_TAG: u32 = 0x5746_4201;

/// Bootstrap tag of the verdict rank 0 sends every rank in [`conclude`].
const VERDICT_TAG: u32 = 0x5746_4202;

type BoxError = Box<dyn std::error::Error>;

/// The end of a job torchrun started, on every rank: this rank's outcome `mine` goes to rank 0;
/// once every rank succeeded, rank 0 alone hands the values (in rank order) to `report`, which
/// prints what the job found; rank 0 then sends every rank the verdict. Every rank returns it:
/// success only if every rank succeeded and `report` did. The other ranks print nothing but
/// their own error, and wait for the verdict (bounded by the bootstrap's timeout), so that none
/// exits, and makes torchrun stop the job, before rank 0 has reported.
pub fn conclude<T: Serialize + DeserializeOwned>(
    bootstrap: &dyn Bootstrap,
    mine: Result<T, String>,
    report: impl FnOnce(Vec<T>) -> Result<ExitCode, BoxError>,
) -> Result<ExitCode, BoxError> {
    let rank = bootstrap.rank();
    if rank != 0 {
        // Rank 0's own failure is in the error it returns.
        if let Err(e) = &mine {
            eprintln!("rank {rank}: {e}");
        }
        bootstrap.send(0, OUTCOME_TAG, &serde_json::to_vec(&mine)?)?;
        let verdict =
            bootstrap.recv(0, VERDICT_TAG).map_err(|e| format!("rank {rank}: no verdict from rank 0: {e}"))?;
        return Ok(match (mine, verdict.as_slice()) {
            (Ok(_), [1]) => ExitCode::SUCCESS,
            _ => ExitCode::FAILURE,
        });
    }
    let outcomes: Vec<Result<T, String>> =
        std::iter::once(mine).chain((1..bootstrap.world_size()).map(|peer| outcome_of(bootstrap, peer))).collect();
    let failures: Vec<String> =
        outcomes.iter().enumerate().filter_map(|(r, o)| o.as_ref().err().map(|e| format!("rank {r}: {e}"))).collect();
    let concluded = if failures.is_empty() {
        report(outcomes.into_iter().flatten().collect())
    } else {
        Err(failures.join("; ").into())
    };
    let verdict = u8::from(matches!(concluded, Ok(code) if code == ExitCode::SUCCESS));
    for peer in 1..bootstrap.world_size() {
        // A peer that is gone already failed, and says so itself.
        if let Err(e) = bootstrap.send(peer, VERDICT_TAG, &[verdict]) {
            tracing::debug!("verdict not sent to rank {peer}: {e}");
        }
    }
    concluded
}

/// Rank 0's copy of `peer`'s outcome in [`conclude`].
fn outcome_of<T: DeserializeOwned>(bootstrap: &dyn Bootstrap, peer: usize) -> Result<T, String> {
    let bytes = bootstrap.recv(peer, OUTCOME_TAG).map_err(|e| format!("no outcome: {e}"))?;
    serde_json::from_slice::<Result<T, String>>(&bytes).map_err(|e| format!("unreadable outcome: {e}"))?
}

/// Runs `rank_main(rank, bootstrap)` for `ranks` ranks as threads of this process (named
/// `<name>-<rank>`), meeting through an in-process bootstrap, and returns every thread's
/// outcome in rank order (`Err` when it panicked).
pub fn run_rank_threads<T: Send + 'static>(
    ranks: usize,
    name: &str,
    rank_main: impl Fn(usize, Arc<InProcessBootstrap>) -> T + Send + Sync + 'static,
) -> Result<Vec<std::thread::Result<T>>, Box<dyn std::error::Error>> {
    Ok(InProcessBootstrap::run_threads(ranks, name, rank_main)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lookup of `pairs`, standing for the process environment.
    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(name, _)| *name == k).map(|(_, v)| v.to_string())
    }

    const TORCHRUN: &[(&str, &str)] = &[
        ("RANK", "1"),
        ("LOCAL_RANK", "1"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
    ];

    #[test]
    fn a_process_knows_who_started_it() {
        let rank = TorchrunEnv::from_lookup(env(TORCHRUN)).unwrap();
        assert_eq!(started(env(TORCHRUN)), Ok(Started::Torchrun(rank.clone())));
        let child: &[(&str, &str)] = &[
            ("RANK", "1"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            (REPORT_DIR, "/tmp/weft-ranks"),
        ];
        assert_eq!(started(env(child)), Ok(Started::Launcher(rank)));
        assert_eq!(started(env(&[])), Ok(Started::Plain));
        // Variables some shells export for every job are not a job.
        assert_eq!(started(env(&[("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500")])), Ok(Started::Plain));
    }

    #[test]
    fn a_half_set_launch_is_an_error_not_a_plain_start() {
        let missing = started(env(&[("RANK", "0"), ("WORLD_SIZE", "2")])).unwrap_err();
        assert!(missing.contains("MASTER_ADDR"), "{missing}");
        assert!(started(env(&[("WORLD_SIZE", "2")])).unwrap_err().contains("RANK"));
        assert!(started(env(&[(REPORT_DIR, "/tmp/weft-ranks")])).is_err());
    }

    /// [`conclude`] on `outcomes.len()` ranks as threads, rank 0 reporting with `report`: every
    /// rank's verdict (`Err` as its text) and what rank 0's report was given.
    fn conclude_threads(
        outcomes: Vec<Result<u32, String>>,
        report: fn(&[u32]) -> ExitCode,
    ) -> (Vec<Result<ExitCode, String>>, Option<Vec<u32>>) {
        let given = Arc::new(std::sync::Mutex::new(None));
        let seen = Arc::clone(&given);
        let verdicts = run_rank_threads(outcomes.len(), "conclude", move |rank, bootstrap| {
            conclude(&*bootstrap, outcomes[rank].clone(), |values: Vec<u32>| {
                let code = report(&values);
                *seen.lock().unwrap() = Some(values);
                Ok(code)
            })
            .map_err(|e| e.to_string())
        })
        .unwrap();
        let given = given.lock().unwrap().take();
        (verdicts.into_iter().map(|v| v.unwrap()).collect(), given)
    }

    #[test]
    fn rank_0_reports_every_rank_s_values_and_all_share_its_verdict() {
        let (verdicts, given) = conclude_threads(vec![Ok(10), Ok(11), Ok(12)], |_| ExitCode::SUCCESS);
        assert_eq!(given, Some(vec![10, 11, 12]));
        assert_eq!(verdicts, vec![Ok(ExitCode::SUCCESS); 3]);
        let (verdicts, _) = conclude_threads(vec![Ok(10), Ok(11), Ok(12)], |_| ExitCode::FAILURE);
        assert_eq!(verdicts, vec![Ok(ExitCode::FAILURE); 3]);
    }

    #[test]
    fn one_failed_rank_fails_every_rank_and_rank_0_names_it() {
        let (verdicts, given) =
            conclude_threads(vec![Ok(10), Err("out of memory".into()), Ok(12)], |_| ExitCode::SUCCESS);
        assert_eq!(given, None, "no report of part of the ranks");
        assert_eq!(verdicts[0], Err("rank 1: out of memory".to_string()));
        assert_eq!(verdicts[1..], [Ok(ExitCode::FAILURE), Ok(ExitCode::FAILURE)]);
        let (verdicts, _) = conclude_threads(vec![Err("no GPU 0".into()), Ok(11)], |_| ExitCode::SUCCESS);
        assert_eq!(verdicts, vec![Err("rank 0: no GPU 0".to_string()), Ok(ExitCode::FAILURE)]);
    }
}
