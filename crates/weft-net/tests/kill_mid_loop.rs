//! A rank process killed with SIGKILL in the middle of a loop of exchanges: every surviving
//! rank must report an error naming the dead rank within the timeout plus 1 s, and none may hang.
//!
//! The test binary runs copies of itself (the ignored `rank` test) as the ranks of a 3-rank job
//! on loopback, all of them children, so that every survivor is observed the same way. Each
//! rank prints `weft-rank ready` once its first round is through and `weft-rank error <error>`
//! when the loop fails, then waits for its stdin to close, so that one survivor's exit is never
//! mistaken by another for a new fault. The parent kills rank 1 once every rank is ready and
//! times each survivor's error line from the kill.
//!
//! Two loops, each with the timeout of the layer it exercises set to [`TIMEOUT`]:
//! - `bootstrap`: all_gather and barrier of the TCP bootstrap (`WEFT_BOOTSTRAP_TIMEOUT`).
//! - `proxy-tcp`: every rank puts, signals and flushes to every other rank through the proxy
//!   service over the TCP transport, then waits for every peer's signal, as a kernel driving
//!   the proxy does (`WEFT_TIMEOUT` bounds those waits on a GPU).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use weft_bootstrap::{Bootstrap, TcpBootstrap, UniqueId};
use weft_net::fifo::{FifoError, FifoReader, FifoWriter, HostFifo};
use weft_net::proxy::transport::tcp::{TcpConfig, TcpTransport};
use weft_net::proxy::{HostInbox, HostMemory, Memory, MemoryTable, ProxyConfig, ProxyService};
use weft_types::{FifoCommand, FifoCommandFields, FifoOp};

/// Bound of every wait of a rank on its peers.
const TIMEOUT: Duration = Duration::from_secs(2);
/// What a survivor may take beyond [`TIMEOUT`] to report the death.
const SLACK: Duration = Duration::from_secs(1);
const WORLD: usize = 3;
const VICTIM: usize = 1;
/// Bytes each rank puts to each peer per round.
const CHUNK: usize = 4096;

/// Names the child's role; unset in a normal test run, where `rank` does nothing.
const ROLE: &str = "WEFT_KILL_TEST_ROLE";
const ID: &str = "WEFT_KILL_TEST_ID";
const RANK: &str = "WEFT_KILL_TEST_RANK";
/// Prefix of the lines a rank prints for the parent (the test harness prints its own lines).
const MARK: &str = "weft-rank";

#[test]
fn a_rank_killed_mid_bootstrap_loop_is_named_by_every_survivor() {
    kill_mid_loop("bootstrap");
}

#[test]
fn a_rank_killed_mid_proxy_tcp_loop_is_named_by_every_survivor() {
    kill_mid_loop("proxy-tcp");
}

/// The entry point of the rank processes; does nothing unless started by [`kill_mid_loop`].
#[test]
#[ignore = "run as a child process by the other tests of this file"]
fn rank() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let id: UniqueId = std::env::var(ID).unwrap().parse().unwrap();
    let rank: usize = std::env::var(RANK).unwrap().parse().unwrap();
    let bs = TcpBootstrap::builder().timeout(TIMEOUT).connect(&id, rank, WORLD).unwrap();
    let failure = match role.as_str() {
        "bootstrap" => bootstrap_loop(&bs),
        "proxy-tcp" => proxy_tcp_loop(&bs),
        other => panic!("unknown role {other:?}"),
    };
    println!("{MARK} error {failure}");
    // Stay alive (sockets open) until the parent has heard every survivor.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

fn ready() {
    println!("{MARK} ready");
}

/// all_gather and barrier until one fails; returns the error.
fn bootstrap_loop(bs: &TcpBootstrap) -> String {
    for round in 0u32.. {
        let mine = [round.to_le_bytes(), (bs.rank() as u32).to_le_bytes()].concat();
        match bs.all_gather(&mine).and_then(|all| bs.barrier().map(|()| all)) {
            Ok(all) => {
                for (r, part) in all.iter().enumerate() {
                    assert_eq!(part, &[round.to_le_bytes(), (r as u32).to_le_bytes()].concat());
                }
            }
            Err(e) => return e.to_string(),
        }
        if round == 0 {
            ready();
        }
        thread::sleep(Duration::from_millis(1));
    }
    unreachable!("the loop ends with an error")
}

/// Rounds of put + signal + flush to every peer through the proxy, then a wait for every
/// peer's signal; returns the first error.
fn proxy_tcp_loop(bs: &TcpBootstrap) -> String {
    let rank = bs.rank();
    let src = Arc::new(HostMemory::new(CHUNK));
    src.write(0, &[rank as u8; CHUNK]).unwrap();
    let dst = Arc::new(HostMemory::new(CHUNK * WORLD));
    let sources = MemoryTable::new();
    sources.register(src).unwrap();
    let destinations = MemoryTable::new();
    destinations.register(dst.clone()).unwrap();
    let inbox = Arc::new(HostInbox::new(destinations));
    let config = TcpConfig { timeout: TIMEOUT, ..TcpConfig::default() };
    let transport = TcpTransport::bind(config, format!("rank {rank}"), Arc::new(sources), inbox.clone()).unwrap();
    let addresses = bs.all_gather(transport.local_addr().to_string().as_bytes()).unwrap();
    let peers: Vec<usize> = (0..WORLD).filter(|&p| p != rank).collect();
    // Connection `p` of this rank arrives at peer `p` as connection `rank`: its signals count
    // in the peer's token `rank`.
    for &peer in &peers {
        let addr = String::from_utf8(addresses[peer].clone()).unwrap().parse().unwrap();
        transport.connect(peer as u16, addr, rank as u16, &format!("rank {peer}")).unwrap();
    }
    bs.barrier().unwrap();

    let fifo = HostFifo::new(16).unwrap();
    let transport = Arc::new(transport);
    let service = ProxyService::builder(ProxyConfig::default())
        .transport(transport.clone())
        .fifo(FifoReader::new(fifo.clone()).unwrap())
        .start()
        .unwrap();
    // No timeout: only the proxy's stop word may release a writer whose peer died.
    let writer = FifoWriter::new(fifo, None);
    for round in 1u64.. {
        let mut last = 0;
        for &peer in &peers {
            let fields = FifoCommandFields {
                op: FifoOp::PutSignalFlush as u8,
                connection: peer as u16,
                src_memory: 0,
                dst_memory: 0,
                src_offset: 0,
                dst_offset: (rank * CHUNK) as u32,
                size: CHUNK as u32,
            };
            match writer.push(FifoCommand::encode(fields).unwrap()) {
                Ok(pos) => last = pos,
                Err(e) => return proxy_failure(service, &e),
            }
        }
        if let Err(e) = writer.sync(last) {
            return proxy_failure(service, &e);
        }
        if let Err(e) = await_signals(&transport, &inbox, &peers, round) {
            return e;
        }
        if round == 1 {
            let bytes = dst.snapshot();
            for &peer in &peers {
                assert!(bytes[peer * CHUNK..(peer + 1) * CHUNK].iter().all(|&b| b == peer as u8));
            }
            ready();
        }
    }
    unreachable!("the loop ends with an error")
}

/// Waits until every peer's token reaches `round`, bounded by [`TIMEOUT`]. A lost connection
/// to any peer ends the wait with the transport's error, which names that peer: a survivor
/// waiting on another survivor (stopped by its own error) must still blame the dead rank.
fn await_signals(transport: &TcpTransport, inbox: &HostInbox, peers: &[usize], round: u64) -> Result<(), String> {
    let deadline = Instant::now() + TIMEOUT;
    for &peer in peers {
        while !inbox.wait_token(peer as u16, round, Duration::from_millis(5)) {
            for &other in peers {
                if let Some(e) = transport.failure(other as u16).map_err(|e| e.to_string())? {
                    return Err(e.to_string());
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("no signal from rank {peer} within {TIMEOUT:?} in round {round}"));
            }
        }
    }
    Ok(())
}

/// The proxy's error once it stopped the FIFO (it names the connection's peer).
fn proxy_failure(service: ProxyService, fifo: &FifoError) -> String {
    match service.shutdown() {
        Err(e) => format!("{e} (the FIFO writer saw: {fifo})"),
        Ok(report) => format!("the FIFO failed ({fifo}) but the proxy reports none: {report:?}"),
    }
}

/// A line a rank printed, and when the parent read it.
struct Line {
    rank: usize,
    at: Instant,
    text: String,
}

/// Starts the ranks of `role`, kills [`VICTIM`] once all are ready, and checks that every
/// survivor names it within [`TIMEOUT`] + [`SLACK`].
fn kill_mid_loop(role: &str) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let id = UniqueId::from_parts(format!("127.0.0.1:{port}").parse().unwrap(), [0x6b; 32]).unwrap();
    let (tx, lines) = mpsc::channel();
    let mut children: Vec<Child> = (0..WORLD).map(|rank| spawn_rank(role, &id, rank, tx.clone())).collect();
    let outcome = observe(&mut children, &lines);
    if let Err(e) = &outcome {
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("{role}: {e}");
    }
    // Release the survivors, then make sure every child is gone (the victim reaped too).
    for child in &mut children {
        drop(child.stdin.take());
    }
    let reap_by = Instant::now() + Duration::from_secs(10);
    let mut stuck = Vec::new();
    for (rank, child) in children.iter_mut().enumerate() {
        while child.try_wait().unwrap().is_none() && Instant::now() < reap_by {
            thread::sleep(Duration::from_millis(10));
        }
        if child.try_wait().unwrap().is_none() {
            let _ = child.kill();
            let _ = child.wait();
            stuck.push(rank);
        }
    }
    assert!(stuck.is_empty(), "{role}: ranks {stuck:?} did not exit once released");
    let errors = outcome.unwrap_or_default();
    for (rank, waited, text) in &errors {
        println!("{role}: rank {rank} reported rank {VICTIM}'s death after {waited:?}: {text}");
        assert!(*waited <= TIMEOUT + SLACK, "{role}: rank {rank} took {waited:?}: {text}");
        assert!(
            [format!("rank {VICTIM} "), format!("rank {VICTIM}@"), format!("[{VICTIM}]")]
                .iter()
                .any(|n| text.contains(n)),
            "{role}: rank {rank}'s error does not name rank {VICTIM}: {text}"
        );
    }
}

/// Waits until every rank is ready, kills the victim, and collects each survivor's first error:
/// (rank, time from the kill, error).
fn observe(children: &mut [Child], lines: &mpsc::Receiver<Line>) -> Result<Vec<(usize, Duration, String)>, String> {
    let start_by = Instant::now() + Duration::from_secs(30);
    let mut ready = vec![false; children.len()];
    while !ready.iter().all(|&r| r) {
        let line = next(lines, start_by).ok_or_else(|| format!("ranks not ready in time: {ready:?}"))?;
        match line.text.as_str() {
            "ready" => ready[line.rank] = true,
            other => return Err(format!("rank {} failed before the kill: {other}", line.rank)),
        }
    }
    // SIGKILL on Unix.
    children[VICTIM].kill().map_err(|e| e.to_string())?;
    let killed = Instant::now();
    let report_by = killed + TIMEOUT + SLACK + Duration::from_secs(3);
    let mut errors: Vec<(usize, Duration, String)> = Vec::new();
    while errors.len() < children.len() - 1 {
        let Some(line) = next(lines, report_by) else {
            let heard: Vec<usize> = errors.iter().map(|e| e.0).collect();
            return Err(format!("only ranks {heard:?} reported an error within {:?} of the kill", report_by - killed));
        };
        if let Some(error) = line.text.strip_prefix("error ")
            && line.rank != VICTIM
            && errors.iter().all(|e| e.0 != line.rank)
        {
            errors.push((line.rank, line.at.saturating_duration_since(killed), error.to_owned()));
        }
    }
    errors.sort_by_key(|e| e.0);
    Ok(errors)
}

fn next(lines: &mpsc::Receiver<Line>, deadline: Instant) -> Option<Line> {
    lines.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok()
}

/// Starts rank `rank` of `role`; a thread forwards its marked lines to `tx`.
fn spawn_rank(role: &str, id: &UniqueId, rank: usize, tx: mpsc::Sender<Line>) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "rank", "--ignored", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(ID, id.to_string())
        .env(RANK, rank.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    thread::spawn(move || {
        for text in BufReader::new(stdout).lines().map_while(Result::ok) {
            // The harness may have started the line (`test rank ... `).
            if let Some((_, text)) = text.split_once(MARK) {
                let _ = tx.send(Line { rank, at: Instant::now(), text: text.trim_start().to_owned() });
            }
        }
    });
    child
}
