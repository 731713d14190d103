//! The ways a job goes wrong: every one ends in a clear error, within the timeout plus a little.

use std::{
    thread,
    time::{Duration, Instant},
};

use weft_bootstrap::{Bootstrap, BootstrapError, InProcessBootstrap, MIN_MAX_FRAME_BYTES, TcpBootstrap, UniqueId};

use crate::common::{free_port, loopback_id, on_each, spawn_rank, tcp_group};

const SHORT: Duration = Duration::from_secs(1);
/// What a timed-out rank may take beyond its timeout.
const SLACK: Duration = Duration::from_millis(1500);
const LONG: Duration = Duration::from_secs(20);

/// Asserts `result` is a timeout of `rank` during `during` that names exactly `missing`.
#[track_caller]
fn assert_timeout<T: std::fmt::Debug>(result: Result<T, BootstrapError>, rank: usize, missing: &[usize], during: &str) {
    match result {
        Err(BootstrapError::Timeout { rank: r, missing: m, during: d, .. })
            if r == rank && m == missing && d == during => {}
        other => panic!("rank {rank}: expected a {during} timeout missing {missing:?}, got {other:?}"),
    }
}

#[test]
fn a_rank_that_never_arrives_is_named_by_everyone() {
    let id = loopback_id();
    let started = Instant::now();
    let handles: Vec<_> = [0, 1, 3].into_iter().map(|rank| (rank, spawn_rank(id, rank, 4, SHORT))).collect();
    for (rank, handle) in handles {
        assert_timeout(handle.join().unwrap(), rank, &[2], "rendezvous");
    }
    assert!(started.elapsed() < SHORT + SLACK, "took {:?}", started.elapsed());
}

#[test]
fn several_missing_ranks_are_all_named() {
    let id = loopback_id();
    let handles: Vec<_> = [0, 2].into_iter().map(|rank| (rank, spawn_rank(id, rank, 5, SHORT))).collect();
    for (rank, handle) in handles {
        let err = handle.join().unwrap().unwrap_err();
        assert!(err.to_string().contains("[1, 3, 4]"), "{err}");
        assert_timeout(Err::<(), _>(err), rank, &[1, 3, 4], "rendezvous");
    }
}

#[test]
fn a_missing_root_is_named_as_rank_0() {
    let address = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let id = UniqueId::from_parts(address, [1; 32]).unwrap();
    let started = Instant::now();
    let handles: Vec<_> = [1, 2].into_iter().map(|rank| (rank, spawn_rank(id, rank, 3, SHORT))).collect();
    for (rank, handle) in handles {
        assert_timeout(handle.join().unwrap(), rank, &[0], "connecting to the rendezvous root");
    }
    assert!(started.elapsed() < SHORT + SLACK, "took {:?}", started.elapsed());
}

#[test]
fn a_stranger_with_the_wrong_secret_is_rejected_and_the_job_completes() {
    let id = loopback_id();
    let rank0 = spawn_rank(id, 0, 2, LONG);
    let stranger_id = UniqueId::from_parts(id.address(), [0x99; 32]).unwrap();
    match TcpBootstrap::builder().timeout(LONG).connect(&stranger_id, 1, 2) {
        Err(BootstrapError::WrongSecret { rank: 1, peer_addr }) => {
            assert_eq!(peer_addr, id.address());
        }
        other => panic!("expected WrongSecret, got {other:?}"),
    }
    let rank1 = spawn_rank(id, 1, 2, LONG);
    let ranks = vec![rank0.join().unwrap().unwrap(), rank1.join().unwrap().unwrap()];
    on_each(&ranks, |bs| {
        assert_eq!(bs.all_gather(&[bs.rank() as u8]).unwrap(), vec![vec![0], vec![1]]);
    });
}

#[test]
fn a_stranger_in_place_of_a_rank_leaves_it_missing() {
    let id = loopback_id();
    let started = Instant::now();
    let rank0 = spawn_rank(id, 0, 2, SHORT);
    let stranger_id = UniqueId::from_parts(id.address(), [0x99; 32]).unwrap();
    let stranger = TcpBootstrap::builder().timeout(SHORT).connect(&stranger_id, 1, 2);
    assert!(matches!(stranger, Err(BootstrapError::WrongSecret { rank: 1, .. })), "{stranger:?}");
    assert_timeout(rank0.join().unwrap(), 0, &[1], "rendezvous");
    assert!(started.elapsed() < SHORT + SLACK, "took {:?}", started.elapsed());
}

#[test]
fn a_duplicate_rank_is_rejected() {
    let id = loopback_id();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut handles = Vec::new();
    for rank in [0, 1, 1] {
        let tx = tx.clone();
        handles.push(thread::spawn(move || {
            let result = TcpBootstrap::builder().timeout(LONG).connect(&id, rank, 3);
            let failed = result.is_err();
            tx.send(result.as_ref().err().map(ToString::to_string)).unwrap();
            (failed, result)
        }));
    }
    // The second registration of rank 1 is turned away at once, while rank 2 is still missing.
    let first = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let message = first.expect("the first result must be the duplicate's error");
    assert!(message.contains("rank 1 is already registered"), "{message}");
    let rank2 = spawn_rank(id, 2, 3, LONG);
    let mut results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    results.sort_by_key(|(failed, _)| *failed);
    assert!(matches!(results[2].1, Err(BootstrapError::DuplicateRank { rank: 1 })));
    let ranks = vec![results.remove(0).1.unwrap(), results.remove(0).1.unwrap(), rank2.join().unwrap().unwrap()];
    on_each(&ranks, |bs| bs.barrier().unwrap());
}

#[test]
fn a_world_size_mismatch_is_reported() {
    let id = loopback_id();
    let rank0 = spawn_rank(id, 0, 2, SHORT);
    match TcpBootstrap::builder().timeout(SHORT).connect(&id, 1, 3) {
        Err(BootstrapError::WorldSizeMismatch { rank: 1, expected: 2, got: 3 }) => {}
        other => panic!("expected WorldSizeMismatch, got {other:?}"),
    }
    assert_timeout(rank0.join().unwrap(), 0, &[1], "rendezvous");
}

#[test]
fn bad_configurations_fail_before_touching_the_network() {
    let id = loopback_id();
    let started = Instant::now();
    let connect = |rank, world| TcpBootstrap::builder().timeout(LONG).connect(&id, rank, world);
    assert!(matches!(connect(0, 0), Err(BootstrapError::InvalidConfig(_))));
    assert!(matches!(connect(3, 3), Err(BootstrapError::RankOutOfRange { rank: 3, world_size: 3 })));
    assert!(matches!(
        TcpBootstrap::builder().timeout(Duration::ZERO).connect(&id, 0, 1),
        Err(BootstrapError::InvalidConfig(_))
    ));
    assert!(matches!(
        TcpBootstrap::builder().timeout(LONG).max_frame_bytes(MIN_MAX_FRAME_BYTES - 1).connect(&id, 0, 1),
        Err(BootstrapError::InvalidConfig(_))
    ));
    assert!(matches!(InProcessBootstrap::group(0), Err(BootstrapError::InvalidConfig(_))));
    assert!(started.elapsed() < Duration::from_secs(1));
    let message = connect(0, 0).unwrap_err().to_string();
    assert!(message.contains("world size must be at least 1"), "{message}");
}

#[test]
fn an_oversized_frame_is_refused_without_allocating_it() {
    const LIMIT: usize = 64 << 10;
    let id = loopback_id();
    let rank0 = spawn_rank(id, 0, 2, LONG);
    let rank1 = thread::spawn(move || TcpBootstrap::builder().timeout(LONG).max_frame_bytes(LIMIT).connect(&id, 1, 2));
    let (big, small) = (rank0.join().unwrap().unwrap(), rank1.join().unwrap().unwrap());
    assert_eq!(small.max_frame_bytes(), LIMIT);

    // Sending more than one's own limit fails before anything is sent.
    match small.send(0, 1, &vec![0; 2 * LIMIT]) {
        Err(BootstrapError::FrameTooLarge { rank: 1, peer: Some(0), len, limit: LIMIT }) => {
            assert_eq!(len, 2 * LIMIT as u64 + 4)
        }
        other => panic!("expected FrameTooLarge, got {other:?}"),
    }
    // A frame over the receiver's limit ends that connection with FrameTooLarge at the receiver.
    big.send(1, 1, b"fits").unwrap();
    let _ = big.send(1, 2, &vec![0; 2 * LIMIT]);
    assert_eq!(small.recv(0, 1).unwrap(), b"fits");
    match small.recv(0, 2) {
        Err(BootstrapError::FrameTooLarge { rank: 1, peer: Some(0), len, limit: LIMIT }) => {
            assert_eq!(len, 2 * LIMIT as u64 + 4)
        }
        other => panic!("expected FrameTooLarge, got {other:?}"),
    }
}

#[test]
fn a_rank_that_leaves_after_the_rendezvous_is_reported_as_closed() {
    let mut ranks = tcp_group(3, LONG);
    let started = Instant::now();
    let gone = ranks.pop().unwrap();
    gone.send(0, 1, b"last words").unwrap();
    gone.send(1, 1, b"last words").unwrap();
    drop(gone);
    on_each(&ranks, |bs| {
        assert_eq!(bs.recv(2, 1).unwrap(), b"last words");
        let rank = bs.rank();
        match bs.recv(2, 1) {
            Err(BootstrapError::PeerClosed { rank: r, peer: 2, .. }) if r == rank => {}
            other => panic!("expected PeerClosed, got {other:?}"),
        }
        match bs.all_gather(b"x") {
            Err(BootstrapError::PeerClosed { peer: 2, .. }) => {}
            other => panic!("expected PeerClosed, got {other:?}"),
        }
    });
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}

#[test]
fn a_rank_that_never_sends_is_named_by_recv_and_collectives() {
    // Rank 2 stays alive (it is in `ranks`) but calls nothing.
    let ranks = tcp_group(3, SHORT);
    let started = Instant::now();
    let results = on_each(&ranks[..2], |bs| {
        let rank = bs.rank();
        assert_timeout(bs.recv(2, 9), rank, &[2], "recv");
        assert_timeout(bs.barrier(), rank, &[2], "barrier");
        bs.all_gather(b"x")
    });
    for (rank, result) in results.into_iter().enumerate() {
        assert_timeout(result, rank, &[2], "all_gather");
    }
    assert!(started.elapsed() < 3 * (SHORT + SLACK), "took {:?}", started.elapsed());
}

#[test]
fn broadcast_from_a_missing_root_names_it() {
    let ranks = InProcessBootstrap::builder().timeout(SHORT).group(3).unwrap();
    let results = on_each(&ranks[1..], |bs| bs.broadcast(0, None));
    for (i, result) in results.into_iter().enumerate() {
        assert_timeout(result, i + 1, &[0], "broadcast");
    }
}

#[test]
fn in_process_timeouts_and_departures() {
    let mut ranks = InProcessBootstrap::builder().timeout(SHORT).group(4).unwrap();
    let started = Instant::now();
    let results = on_each(&ranks[..2], |bs| bs.all_gather(&[1]));
    for (rank, result) in results.into_iter().enumerate() {
        assert_timeout(result, rank, &[2, 3], "all_gather");
    }
    assert!(started.elapsed() < SHORT + SLACK, "took {:?}", started.elapsed());

    let gone = ranks.pop().unwrap();
    drop(gone);
    assert!(matches!(ranks[0].recv(3, 0), Err(BootstrapError::PeerClosed { rank: 0, peer: 3, .. })));
    assert!(matches!(ranks[0].send(3, 0, b"x"), Err(BootstrapError::PeerClosed { rank: 0, peer: 3, .. })));
}

#[test]
fn mismatched_collectives_are_reported() {
    let check = |ranks: &[&dyn Bootstrap]| {
        let results = thread::scope(|s| {
            let a = s.spawn(|| ranks[0].all_gather(b"a").map(drop));
            let b = s.spawn(|| ranks[1].barrier());
            [a.join().unwrap(), b.join().unwrap()]
        });
        match &results {
            [
                Err(BootstrapError::CollectiveMismatch { rank: 0, peer: 1, expected: "all_gather", got: "barrier" }),
                Err(BootstrapError::CollectiveMismatch { rank: 1, peer: 0, expected: "barrier", got: "all_gather" }),
            ] => {}
            other => panic!("expected a mismatch on both sides, got {other:?}"),
        }
    };
    let in_process = InProcessBootstrap::builder().timeout(LONG).group(2).unwrap();
    check(&[&in_process[0], &in_process[1]]);
    let tcp = tcp_group(2, LONG);
    check(&[&tcp[0], &tcp[1]]);
}

#[test]
fn ranks_that_name_different_broadcast_roots_fail_instead_of_returning_different_bytes() {
    let check = |ranks: &[&dyn Bootstrap]| {
        // Ranks 0 and 2 name root 0, rank 1 names itself: each rank sees rank 1 (or, on rank 1,
        // rank 0) disagree.
        let roots = [0, 1, 0];
        let started = Instant::now();
        let results = thread::scope(|s| {
            let handles: Vec<_> = ranks
                .iter()
                .zip(roots)
                .map(|(bs, root)| s.spawn(move || bs.broadcast(root, (bs.rank() == root).then_some(b"bytes"))))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        });
        for (rank, result) in results.into_iter().enumerate() {
            let (peer, root, peer_root) = if rank == 1 { (0, 1, 0) } else { (1, 0, 1) };
            match result {
                Err(BootstrapError::RootMismatch { rank: r, peer: p, root: n, peer_root: q })
                    if (r, p, n, q) == (rank, peer, root, peer_root) => {}
                other => panic!("rank {rank}: expected a root mismatch with rank {peer}, got {other:?}"),
            }
        }
        assert!(started.elapsed() < SHORT, "took {:?}", started.elapsed());
        // The ranks agree again on the next call.
        thread::scope(|s| {
            let handles: Vec<_> =
                ranks.iter().map(|bs| s.spawn(move || bs.broadcast(2, (bs.rank() == 2).then_some(b"two")))).collect();
            for handle in handles {
                assert_eq!(handle.join().unwrap().unwrap(), b"two");
            }
        });
    };
    let in_process = InProcessBootstrap::builder().timeout(LONG).group(3).unwrap();
    check(&in_process.iter().map(|b| b as &dyn Bootstrap).collect::<Vec<_>>());
    let tcp = tcp_group(3, LONG);
    check(&tcp.iter().map(|b| b as &dyn Bootstrap).collect::<Vec<_>>());
}

#[test]
fn bad_arguments_are_reported() {
    let ranks = InProcessBootstrap::builder().timeout(LONG).group(2).unwrap();
    assert!(matches!(
        ranks[0].send(2, 0, b""),
        Err(BootstrapError::PeerOutOfRange { rank: 0, peer: 2, world_size: 2 })
    ));
    assert!(matches!(ranks[1].recv(5, 0), Err(BootstrapError::PeerOutOfRange { peer: 5, .. })));
    assert!(matches!(ranks[0].broadcast(7, None), Err(BootstrapError::PeerOutOfRange { peer: 7, .. })));
    assert!(matches!(ranks[0].broadcast(0, None), Err(BootstrapError::InvalidArgument { rank: 0, .. })));
}
