//! Ranks as processes: the test binary runs copies of itself (the ignored `child` test) as the
//! other ranks, passing the job through environment variables, and checks their exit codes.

use std::{
    process::{Child, Command, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant},
};

use weft_bootstrap::{Bootstrap, BootstrapError, TcpBootstrap, UniqueId};

use crate::common::{free_port, loopback_id};

const TIMEOUT: Duration = Duration::from_secs(20);
/// Names the child's role; unset in a normal test run, where `child` does nothing.
const MODE: &str = "WEFT_BOOTSTRAP_TEST_CHILD";
const ID: &str = "WEFT_BOOTSTRAP_TEST_ID";
const RANK: &str = "WEFT_BOOTSTRAP_TEST_RANK";
const WORLD: &str = "WEFT_BOOTSTRAP_TEST_WORLD";

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} must be set for a child"))
}

/// What every process rank does: an all_gather and a ring of tagged messages.
fn work(bs: &TcpBootstrap) {
    let (rank, world) = (bs.rank(), bs.world_size());
    let mine = format!("pid {} is rank {rank}", std::process::id()).into_bytes();
    let all = bs.all_gather(&mine).unwrap();
    assert_eq!(all.len(), world);
    for (r, part) in all.iter().enumerate() {
        assert!(String::from_utf8_lossy(part).ends_with(&format!("is rank {r}")));
    }
    let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);
    bs.send(next, 11, &vec![rank as u8; 100_000]).unwrap();
    bs.send(next, 10, b"first tag").unwrap();
    assert_eq!(bs.recv(prev, 10).unwrap(), b"first tag");
    assert_eq!(bs.recv(prev, 11).unwrap(), vec![prev as u8; 100_000]);
    bs.barrier().unwrap();
}

/// The entry point of child processes; does nothing unless started by a test below.
#[test]
#[ignore = "run as a child process by the other tests in this module"]
fn child() {
    let Ok(mode) = std::env::var(MODE) else {
        return;
    };
    match mode.as_str() {
        "unique-id" => {
            let id: UniqueId = var(ID).parse().unwrap();
            let (rank, world) = (var(RANK).parse().unwrap(), var(WORLD).parse().unwrap());
            let bs = TcpBootstrap::builder().timeout(TIMEOUT).connect(&id, rank, world).unwrap();
            work(&bs);
        }
        "torchrun" => {
            // Timeout and job come from the environment only.
            let bs = TcpBootstrap::builder().from_env().unwrap();
            assert_eq!(bs.timeout(), Duration::from_secs(20));
            work(&bs);
        }
        "die-mid-rendezvous" => {
            let id: UniqueId = var(ID).parse().unwrap();
            let (rank, world) = (var(RANK).parse().unwrap(), var(WORLD).parse().unwrap());
            thread::spawn(move || TcpBootstrap::builder().timeout(TIMEOUT).connect(&id, rank, world));
            // Long enough to register, then exit while the rendezvous is still open.
            thread::sleep(Duration::from_millis(1000));
            std::process::exit(3);
        }
        other => panic!("unknown child mode {other:?}"),
    }
}

fn spawn_child(mode: &str, vars: &[(&str, String)]) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "processes::child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(MODE, mode)
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits for `child` until `deadline`; kills it and fails if it is still running then.
fn wait(mut child: Child, deadline: Instant) -> ExitStatus {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child {} still running at its deadline", child.id());
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn processes_join_with_a_unique_id() {
    const WORLD: usize = 4;
    let id = loopback_id();
    let deadline = Instant::now() + TIMEOUT + Duration::from_secs(10);
    // This process is rank 0 (it holds the id's listener); the others are children.
    let children: Vec<_> = (1..WORLD)
        .map(|rank| {
            spawn_child(
                "unique-id",
                &[(ID, id.to_string()), (RANK, rank.to_string()), (self::WORLD, WORLD.to_string())],
            )
        })
        .collect();
    let bs = TcpBootstrap::builder().timeout(TIMEOUT).connect(&id, 0, WORLD).unwrap();
    work(&bs);
    for child in children {
        let status = wait(child, deadline);
        assert!(status.success(), "child failed: {status}");
    }
}

#[test]
fn processes_join_from_torchrun_variables() {
    const WORLD: usize = 3;
    let port = free_port();
    let deadline = Instant::now() + TIMEOUT + Duration::from_secs(10);
    let children: Vec<_> = (0..WORLD)
        .map(|rank| {
            spawn_child(
                "torchrun",
                &[
                    ("RANK", rank.to_string()),
                    ("LOCAL_RANK", rank.to_string()),
                    ("WORLD_SIZE", WORLD.to_string()),
                    ("MASTER_ADDR", "127.0.0.1".to_owned()),
                    ("MASTER_PORT", port.to_string()),
                    ("WEFT_BOOTSTRAP_TIMEOUT", "20".to_owned()),
                    ("WEFT_BOOTSTRAP_SECRET", "5e".repeat(32)),
                ],
            )
        })
        .collect();
    for child in children {
        let status = wait(child, deadline);
        assert!(status.success(), "child failed: {status}");
    }
}

#[test]
fn a_process_that_dies_mid_rendezvous_is_named() {
    const WORLD: usize = 3;
    let id = loopback_id();
    let started = Instant::now();
    let child = spawn_child(
        "die-mid-rendezvous",
        &[(ID, id.to_string()), (RANK, "1".to_owned()), (self::WORLD, WORLD.to_string())],
    );
    // Rank 2 never comes, so the rendezvous is still open when rank 1 exits.
    let result = TcpBootstrap::builder().timeout(TIMEOUT).connect(&id, 0, WORLD);
    match result {
        Err(BootstrapError::PeerClosed { rank: 0, peer: 1, during: "rendezvous" }) => {}
        other => panic!("expected PeerClosed from rank 1, got {other:?}"),
    }
    assert!(started.elapsed() < TIMEOUT / 2, "took {:?}", started.elapsed());
    let status = wait(child, Instant::now() + Duration::from_secs(10));
    assert_eq!(status.code(), Some(3));
}
