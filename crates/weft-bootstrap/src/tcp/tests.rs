//! Tests that need the wire internals: raw clients that misbehave in ways the public API cannot.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    thread,
    time::{Duration, Instant},
};

use super::{Ctx, wire};
use crate::{
    Bootstrap, BootstrapError, TcpBootstrap, UniqueId,
    codec::{FrameHeader, FrameKind, Message, Purpose},
};

pub(super) fn loopback_id() -> UniqueId {
    UniqueId::new("127.0.0.1:0".parse().unwrap()).unwrap()
}

pub(super) fn spawn_rank(
    id: UniqueId,
    rank: usize,
    world: usize,
    timeout: Duration,
) -> thread::JoinHandle<Result<TcpBootstrap, BootstrapError>> {
    thread::spawn(move || TcpBootstrap::builder().timeout(timeout).connect(&id, rank, world))
}

/// Connects to `addr` (retrying while nobody listens) and runs the connector handshake.
pub(super) fn raw_client(addr: SocketAddr, secret: &[u8; 32], rank: usize, purpose: Purpose) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut stream = loop {
        match TcpStream::connect(addr) {
            Ok(stream) => break stream,
            Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("cannot reach {addr}: {e}"),
        }
    };
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let ctx = Ctx { rank, peer: 0, addr, during: "test", timeout: Duration::from_secs(5) };
    wire::handshake_connect(&mut stream, &ctx, secret, purpose).unwrap();
    stream
}

/// Reads until the other side closes; fails if it does not within 5 s.
fn assert_closed_by_peer(stream: &mut TcpStream) {
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut sink = Vec::new();
    // Ok(_) is EOF; a reset also means the peer closed.
    if let Err(e) = stream.read_to_end(&mut sink) {
        assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "peer kept the connection open");
    }
}

#[test]
fn a_registered_rank_that_disconnects_aborts_the_rendezvous() {
    let id = loopback_id();
    let timeout = Duration::from_secs(20);
    let started = Instant::now();
    // Rank 3 never comes, so the rendezvous is still open when rank 1 dies.
    let rank0 = spawn_rank(id, 0, 4, timeout);
    let rank2 = spawn_rank(id, 2, 4, timeout);
    let mut stream = raw_client(id.address(), &id.secret(), 1, Purpose::Rendezvous);
    let register = Message::Register { world_size: 4, listen: "127.0.0.1:9".parse().unwrap(), budget_ms: 20_000 };
    stream.write_all(&register.encode()).unwrap();
    // Let the root admit rank 1, then "die".
    thread::sleep(Duration::from_millis(100));
    drop(stream);
    for (rank, handle) in [(0, rank0), (2, rank2)] {
        match handle.join().unwrap() {
            Err(BootstrapError::PeerClosed { rank: r, peer: 1, during: "rendezvous" }) => assert_eq!(r, rank),
            other => panic!("rank {rank}: expected PeerClosed(1), got {other:?}"),
        }
    }
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}

#[test]
fn unauthenticated_junk_is_dropped_and_the_job_completes() {
    let id = loopback_id();
    let timeout = Duration::from_secs(20);
    let rank0 = spawn_rank(id, 0, 2, timeout);

    // A header announcing 1 GiB before any proof: dropped without reading or allocating it.
    let mut huge = TcpStream::connect(id.address()).unwrap();
    let header = FrameHeader { kind: FrameKind::Hello, len: 1 << 30 };
    huge.write_all(&header.encode()).unwrap();
    assert_closed_by_peer(&mut huge);

    // Something that does not speak the protocol at all.
    let mut http = TcpStream::connect(id.address()).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_closed_by_peer(&mut http);

    // A client that connects and says nothing must not block the others.
    let _silent = TcpStream::connect(id.address()).unwrap();

    let rank1 = spawn_rank(id, 1, 2, timeout);
    let (a, b) = (rank0.join().unwrap().unwrap(), rank1.join().unwrap().unwrap());
    thread::scope(|s| {
        let ha = s.spawn(|| a.all_gather(b"a").unwrap());
        let hb = s.spawn(|| b.all_gather(b"b").unwrap());
        let expected = vec![b"a".to_vec(), b"b".to_vec()];
        assert_eq!(ha.join().unwrap(), expected);
        assert_eq!(hb.join().unwrap(), expected);
    });
}

#[test]
fn strangers_cannot_join_the_mesh() {
    let id = loopback_id();
    let timeout = Duration::from_secs(20);
    let rank0 = spawn_rank(id, 0, 2, timeout);
    let rank1 = spawn_rank(id, 1, 2, timeout);
    let (a, b) = (rank0.join().unwrap().unwrap(), rank1.join().unwrap().unwrap());
    let target = b.listen_addr();

    // A stranger with another secret: the handshake fails on the stranger's side.
    let mut stranger = TcpStream::connect(target).unwrap();
    stranger.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let ctx = Ctx { rank: 0, peer: 1, addr: target, during: "test", timeout: Duration::from_secs(5) };
    match wire::handshake_connect(&mut stranger, &ctx, &[0x42; 32], Purpose::Peer) {
        Err(BootstrapError::WrongSecret { rank: 0, peer_addr }) => assert_eq!(peer_addr, target),
        other => panic!("expected WrongSecret, got {other:?}"),
    }

    // Someone with the secret who claims to be rank 1 itself, or the wrong purpose, is dropped.
    let mut impostor = raw_client(target, &id.secret(), 1, Purpose::Peer);
    assert_closed_by_peer(&mut impostor);
    let mut confused = raw_client(target, &id.secret(), 0, Purpose::Rendezvous);
    assert_closed_by_peer(&mut confused);

    // The real rank 0 still gets through.
    a.send(1, 3, b"still here").unwrap();
    assert_eq!(b.recv(0, 3).unwrap(), b"still here");
}
