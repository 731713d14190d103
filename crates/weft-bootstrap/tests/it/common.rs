//! Helpers shared by the integration tests.

use std::{net::TcpListener, thread, time::Duration};

use weft_bootstrap::{Bootstrap, BootstrapError, TcpBootstrap, UniqueId};

/// A fresh id on a free loopback port, its listener kept for rank 0 of this process.
pub(crate) fn loopback_id() -> UniqueId {
    UniqueId::new("127.0.0.1:0".parse().unwrap()).unwrap()
}

/// A loopback port nobody listens on (free when this returns).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Joins `rank` of `world` in a new thread.
pub(crate) fn spawn_rank(
    id: UniqueId,
    rank: usize,
    world: usize,
    timeout: Duration,
) -> thread::JoinHandle<Result<TcpBootstrap, BootstrapError>> {
    thread::spawn(move || TcpBootstrap::builder().timeout(timeout).connect(&id, rank, world))
}

/// Every rank of a `world`-rank job over loopback, indexed by rank.
pub(crate) fn tcp_group(world: usize, timeout: Duration) -> Vec<TcpBootstrap> {
    let id = loopback_id();
    let handles: Vec<_> = (0..world).map(|rank| spawn_rank(id, rank, world, timeout)).collect();
    handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
}

/// Runs `f` on every rank, each in its own thread; returns the results indexed by rank.
pub(crate) fn on_each<B: Bootstrap, R: Send>(ranks: &[B], f: impl Fn(&B) -> R + Sync) -> Vec<R> {
    thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = ranks.iter().map(|b| s.spawn(move || f(b))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Rank `rank`'s all_gather contribution: a different length per rank, rank 1's empty.
pub(crate) fn contribution(rank: usize) -> Vec<u8> {
    let len = if rank == 1 { 0 } else { 3 * rank + 1 };
    (0..len).map(|i| (rank * 31 + i) as u8).collect()
}

/// The operations every bootstrap must get right, run by every rank of a job.
pub(crate) fn exercise<B: Bootstrap>(bs: &B) {
    let (rank, world) = (bs.rank(), bs.world_size());

    // all_gather with a different length per rank (one of them empty).
    let all = bs.all_gather(&contribution(rank)).unwrap();
    assert_eq!(all, (0..world).map(contribution).collect::<Vec<_>>());

    // broadcast from the last rank (not 0 when world > 1), then from rank 0.
    let root = world - 1;
    let data = format!("hello from rank {root}").into_bytes();
    assert_eq!(bs.broadcast(root, (rank == root).then_some(&data)).unwrap(), data);
    let data = vec![7u8; 1000];
    assert_eq!(bs.broadcast(0, (rank == 0).then_some(&data)).unwrap(), data);

    bs.barrier().unwrap();

    // Ring send/recv with tags, received out of order: tag 2 before tag 1.
    let next = (rank + 1) % world;
    let prev = (rank + world - 1) % world;
    bs.send(next, 1, b"tag one").unwrap();
    bs.send(next, 2, &[rank as u8; 2]).unwrap();
    assert_eq!(bs.recv(prev, 2).unwrap(), vec![prev as u8; 2]);
    assert_eq!(bs.recv(prev, 1).unwrap(), b"tag one");

    // Order within one (peer, tag).
    for i in 0..5u8 {
        bs.send(next, 7, &[i]).unwrap();
    }
    for i in 0..5u8 {
        assert_eq!(bs.recv(prev, 7).unwrap(), vec![i]);
    }

    // Everyone to everyone, self included, with an empty message in between.
    for peer in 0..world {
        bs.send(peer, 100, &[rank as u8, peer as u8]).unwrap();
        bs.send(peer, 100, &[]).unwrap();
    }
    for peer in 0..world {
        assert_eq!(bs.recv(peer, 100).unwrap(), vec![peer as u8, rank as u8]);
        assert_eq!(bs.recv(peer, 100).unwrap(), Vec::<u8>::new());
    }

    // Back-to-back collectives do not mix.
    for round in 0..5u8 {
        let all = bs.all_gather(&[round, rank as u8]).unwrap();
        let expected: Vec<Vec<u8>> = (0..world).map(|r| vec![round, r as u8]).collect();
        assert_eq!(all, expected);
        bs.barrier().unwrap();
    }
}
