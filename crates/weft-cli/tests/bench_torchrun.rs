//! `weft bench` started the way torchrun starts it: two processes of the built binary with
//! torchrun's variables on 127.0.0.1, the GPUs hidden so that the CPU backend runs anywhere.
#![allow(clippy::unwrap_used)] // tests may panic on failure

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts rank `rank` of a `world`-rank job rendezvousing on `port`, running `weft` with `args`.
fn start_rank(rank: usize, world: usize, port: u16, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("WEFT_BOOTSTRAP_TIMEOUT", "5")
        .env_remove("WEFT_REPORT_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs one job, each rank with its own command line (`per_rank`); every rank's output.
fn run_job(per_rank: &[&[&str]]) -> Vec<Output> {
    let port = free_port();
    let mut children: Vec<Child> =
        per_rank.iter().enumerate().map(|(rank, args)| start_rank(rank, per_rank.len(), port, args)).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        if Instant::now() > deadline {
            children.iter_mut().for_each(|c| drop(c.kill()));
            panic!("the ranks were still running after 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    children.into_iter().map(|c| c.wait_with_output().unwrap()).collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn rank_0_alone_prints_the_table_and_both_ranks_succeed() {
    let args: &[&str] = &["bench", "allreduce", "-b", "1K", "-e", "16K", "--dtype", "f32"];
    let out = run_job(&[args, args]);
    let (rank0, rank1) = (text(&out[0].stdout), text(&out[1].stdout));
    let report = |r: usize| {
        format!("rank {r}: {:?}\nstdout:\n{}\nstderr:\n{}", out[r].status, text(&out[r].stdout), text(&out[r].stderr))
    };
    assert!(out.iter().all(|o| o.status.success()), "{}\n{}", report(0), report(1));
    assert_eq!(rank0.matches("cpu us").count(), 1, "{}", report(0));
    assert!(rank0.contains("2 ranks as host threads"), "{}", report(0));
    assert!(rank0.contains("# 0 wrong elements"), "{}", report(0));
    assert_eq!(rank1, "", "{}", report(1));
    assert!(!text(&out[1].stderr).contains("cpu us"), "{}", report(1));
}

#[test]
fn a_rank_that_fails_fails_the_other_too() {
    let good: &[&str] = &["bench", "allreduce", "-e", "4K"];
    let out = run_job(&[good, &["bench", "allreduce", "-e", "4K", "--dtype", "nope"]]);
    assert!(out.iter().all(|o| !o.status.success()), "{:?}", out.iter().map(|o| o.status).collect::<Vec<_>>());
    assert!(text(&out[1].stderr).contains("unknown dtype"), "{}", text(&out[1].stderr));
    assert!(!text(&out[0].stdout).contains("cpu us"), "{}", text(&out[0].stdout));
}

#[test]
fn torchrun_decides_the_ranks() {
    let out = run_job(&[&["bench", "allreduce", "--ranks", "4"]]);
    assert!(!out[0].status.success());
    assert!(text(&out[0].stderr).contains("the ranks are its WORLD_SIZE=1 processes"), "{}", text(&out[0].stderr));
}
