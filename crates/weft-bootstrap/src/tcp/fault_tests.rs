//! Injected faults at the two kinds of acceptor a rank connects to, the rendezvous root and a
//! peer's listener: the socket cut at each point of the handshake, and garbage, truncated,
//! oversized or out-of-place frames in place of the answer. Each must end the connecting rank's
//! call with an error naming the other end, within the timeout plus 1 s, and leave every other
//! connection and communicator of the process working. A peer that sends garbage once
//! authenticated is named by the rank that reads it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::Write,
    net::{SocketAddr, TcpListener, TcpStream},
    thread,
    time::{Duration, Instant},
};

use super::{
    tests::{loopback_id, raw_client, spawn_rank},
    wire,
};
use crate::{
    Bootstrap, BootstrapError, TcpBootstrap, UniqueId, auth,
    codec::{CodecError, FrameHeader, FrameKind, Message, Purpose},
};

const TIMEOUT: Duration = Duration::from_secs(2);
/// What a rank may take beyond [`TIMEOUT`] to report a fault.
const SLACK: Duration = Duration::from_secs(1);

/// What a misbehaving acceptor does to the one connection it accepts.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Closes the socket as soon as it is accepted.
    CutOnAccept,
    /// Reads the `Hello`, then closes.
    CutAfterHello,
    /// Sends the first half of its `Challenge`, then closes.
    CutMidChallenge,
    /// Completes the handshake (reads the `Proof`), then closes.
    CutAfterProof,
    /// Answers the `Hello` with bytes of another protocol.
    Garbage,
    /// Answers the `Hello` with a header announcing 1 GiB.
    Oversized,
    /// Answers the `Hello` with a `Challenge` whose body is too short.
    TruncatedBody,
    /// Answers the `Hello` with a well-formed frame of the wrong kind.
    WrongKind,
}

impl Fault {
    const CUTS: [Fault; 4] = [Fault::CutOnAccept, Fault::CutAfterHello, Fault::CutMidChallenge, Fault::CutAfterProof];
    const FRAMES: [Fault; 4] = [Fault::Garbage, Fault::Oversized, Fault::TruncatedBody, Fault::WrongKind];

    /// Whether `error`, met by a rank connecting to `acceptor`, is the clear error this fault
    /// must give.
    fn expected(self, error: &BootstrapError, acceptor: usize) -> bool {
        let named = Some(acceptor);
        match (self, error) {
            (Fault::CutOnAccept | Fault::CutAfterHello | Fault::CutMidChallenge | Fault::CutAfterProof, e) => {
                matches!(e, BootstrapError::PeerClosed { peer, .. } if *peer == acceptor)
            }
            (Fault::Garbage, BootstrapError::Malformed { peer, source: CodecError::BadMagic { .. }, .. }) => {
                *peer == named
            }
            (Fault::Oversized, BootstrapError::FrameTooLarge { peer, len, .. }) => *peer == named && *len == 1 << 30,
            (Fault::TruncatedBody, BootstrapError::Malformed { peer, .. }) => *peer == named,
            (Fault::WrongKind, BootstrapError::UnexpectedFrame { peer, got: FrameKind::Table, .. }) => *peer == named,
            _ => false,
        }
    }
}

/// Accepts one connection on `listener` and does `fault` to it. Returns the socket when the
/// fault leaves it open, so that the connecting rank sees the bad frame and not a close.
fn misbehave(listener: TcpListener, secret: [u8; 32], fault: Fault) -> thread::JoinHandle<Option<TcpStream>> {
    thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        if let Fault::CutOnAccept = fault {
            return None;
        }
        let (kind, body) = wire::read_frame(&mut stream, wire::HANDSHAKE_LIMIT).unwrap();
        let Ok(Message::Hello { purpose, rank, nonce }) = Message::decode_body(kind, &body) else {
            panic!("expected a Hello");
        };
        let acceptor_nonce = auth::nonce();
        let challenge = Message::Challenge {
            nonce: acceptor_nonce,
            proof: auth::acceptor_proof(&secret, purpose, rank, &nonce, &acceptor_nonce),
        }
        .encode();
        let reply = match fault {
            Fault::CutOnAccept => unreachable!("handled above"),
            Fault::CutAfterHello => return None,
            Fault::CutMidChallenge => {
                stream.write_all(&challenge[..challenge.len() / 2]).unwrap();
                return None;
            }
            Fault::CutAfterProof => {
                stream.write_all(&challenge).unwrap();
                wire::read_frame(&mut stream, wire::HANDSHAKE_LIMIT).unwrap();
                return None;
            }
            Fault::Garbage => b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec(),
            Fault::Oversized => FrameHeader { kind: FrameKind::Challenge, len: 1 << 30 }.encode().to_vec(),
            Fault::TruncatedBody => {
                let mut frame = FrameHeader { kind: FrameKind::Challenge, len: 10 }.encode().to_vec();
                frame.extend_from_slice(&[7; 10]);
                frame
            }
            Fault::WrongKind => Message::Table { listen: Vec::new() }.encode(),
        };
        stream.write_all(&reply).unwrap();
        Some(stream)
    })
}

fn loopback_listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

/// Asserts `fault` gave its clear error, naming `acceptor`, within the bound; prints the time.
#[track_caller]
fn check<T: std::fmt::Debug>(
    what: &str,
    fault: Fault,
    acceptor: usize,
    result: Result<T, BootstrapError>,
    took: Duration,
) {
    let error = result.expect_err(&format!("{what}, {fault:?}: the call succeeded"));
    assert!(fault.expected(&error, acceptor), "{what}, {fault:?}: unexpected error {error:?}");
    assert!(took <= TIMEOUT + SLACK, "{what}, {fault:?}: took {took:?}");
    println!("{what}, {fault:?}: {error} (after {took:?})");
}

#[test]
fn a_root_that_cuts_the_handshake_or_answers_garbage_is_named_as_rank_0() {
    // An unrelated job of this process, to show that it is not disturbed.
    let id = loopback_id();
    let bystanders: Vec<_> = (0..2).map(|rank| spawn_rank(id, rank, 2, TIMEOUT)).collect();
    let bystanders: Vec<TcpBootstrap> = bystanders.into_iter().map(|h| h.join().unwrap().unwrap()).collect();

    for fault in Fault::CUTS.into_iter().chain(Fault::FRAMES) {
        let listener = loopback_listener();
        let id = UniqueId::from_parts(listener.local_addr().unwrap(), [0x31; 32]).unwrap();
        let root = misbehave(listener, id.secret(), fault);
        let started = Instant::now();
        let result = TcpBootstrap::builder().timeout(TIMEOUT).connect(&id, 1, 2);
        check("rank 1 joining through a faulty root", fault, 0, result, started.elapsed());
        drop(root.join().unwrap());
    }

    thread::scope(|s| {
        let gathered: Vec<_> = bystanders.iter().map(|b| s.spawn(|| b.all_gather(&[b.rank() as u8]))).collect();
        for handle in gathered {
            assert_eq!(handle.join().unwrap().unwrap(), vec![vec![0], vec![1]]);
        }
    });
}

/// Registers a hand-made rank `rank` of `world` with the root of `id`, advertising `listen`;
/// returns every rank's listener address once the rendezvous is complete.
fn register_by_hand(
    id: UniqueId,
    rank: usize,
    world: usize,
    listen: SocketAddr,
) -> thread::JoinHandle<Vec<SocketAddr>> {
    thread::spawn(move || {
        let mut root = raw_client(id.address(), &id.secret(), rank, Purpose::Rendezvous);
        let register = Message::Register { world_size: world as u32, listen, budget_ms: 20_000 };
        root.write_all(&register.encode()).unwrap();
        let (kind, body) = wire::read_frame(&mut root, 1 << 16).unwrap();
        match Message::decode_body(kind, &body).unwrap() {
            Message::Table { listen } => listen,
            other => panic!("expected the table, got {other:?}"),
        }
    })
}

#[test]
fn faulty_peers_are_named_and_the_rest_of_the_mesh_keeps_working() {
    // Ranks 0 and 1 are real; rank 2 is played by hand.
    let id = loopback_id();
    let fake = loopback_listener();
    let fake_addr = fake.local_addr().unwrap();
    let real: Vec<_> = (0..2).map(|rank| spawn_rank(id, rank, 3, TIMEOUT)).collect();
    let table = register_by_hand(id, 2, 3, fake_addr).join().unwrap();
    let ranks: Vec<TcpBootstrap> = real.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
    assert_eq!(table[2], fake_addr);

    // Rank 0 connects to rank 2 on its first send; rank 2's listener misbehaves each time. A
    // failed connection leaves the link idle, so the next send connects afresh.
    let mut fake = Some(fake);
    // (A cut after the handshake is not among them: `send` returns once its frame is written, and
    // the loss shows on the next call.)
    for fault in Fault::CUTS[..3].iter().copied().chain(Fault::FRAMES) {
        let listener = fake.take().unwrap();
        let keep = listener.try_clone().unwrap();
        let peer = misbehave(listener, id.secret(), fault);
        let started = Instant::now();
        let result = ranks[0].send(2, 1, b"to a faulty peer");
        check("rank 0 sending to a faulty rank 2", fault, 2, result, started.elapsed());
        drop(peer.join().unwrap());
        fake = Some(keep);
    }

    // A connector that gives up mid-handshake at rank 0's listener: only logged there.
    for cut in 1..=3 {
        let mut stream = TcpStream::connect(table[0]).unwrap();
        let hello = Message::Hello { purpose: Purpose::Peer, rank: 2, nonce: [5; 32] }.encode();
        let bytes = match cut {
            1 => &hello[..0],
            2 => &hello[..hello.len() / 2],
            _ => &hello[..],
        };
        stream.write_all(bytes).unwrap();
    }

    // Rank 2, authenticated, sends rank 0 garbage: rank 0 names rank 2 when it reads from it.
    let mut garbage = raw_client(table[0], &id.secret(), 2, Purpose::Peer);
    garbage.write_all(b"\x00\x01 not a frame, but long enough for a header").unwrap();
    let started = Instant::now();
    let result = ranks[0].recv(2, 1);
    let error = result.expect_err("recv from a peer that sent garbage succeeded");
    assert!(matches!(error, BootstrapError::Malformed { rank: 0, peer: Some(2), .. }), "{error:?}");
    assert!(started.elapsed() <= TIMEOUT + SLACK);
    println!("rank 0 reading garbage from rank 2: {error} (after {:?})", started.elapsed());
    // With rank 2's listener gone too, a collective names rank 2 whichever failure it meets first.
    drop(fake);
    match ranks[0].all_gather(b"x") {
        Err(BootstrapError::Malformed { peer: Some(2), .. } | BootstrapError::PeerClosed { peer: 2, .. }) => {}
        other => panic!("expected an error naming rank 2, got {other:?}"),
    }

    // Ranks 0 and 1 still talk.
    ranks[0].send(1, 4, b"still here").unwrap();
    ranks[1].send(0, 4, b"and here").unwrap();
    assert_eq!(ranks[1].recv(0, 4).unwrap(), b"still here");
    assert_eq!(ranks[0].recv(1, 4).unwrap(), b"and here");
}
