//! Every operation, with ranks as threads: over TCP loopback and in process.

use std::time::Duration;

use weft_bootstrap::{Bootstrap, InProcessBootstrap};

use crate::common::{exercise, on_each, tcp_group};

const TIMEOUT: Duration = Duration::from_secs(20);

fn tcp_world(world: usize) {
    let ranks = tcp_group(world, TIMEOUT);
    for (rank, bs) in ranks.iter().enumerate() {
        assert_eq!((bs.rank(), bs.world_size()), (rank, world));
        assert_eq!(bs.peer_addr(rank), Some(bs.listen_addr()));
    }
    on_each(&ranks, exercise);
}

fn in_process_world(world: usize) {
    let ranks = InProcessBootstrap::builder().timeout(TIMEOUT).group(world).unwrap();
    on_each(&ranks, exercise);
}

#[test]
fn tcp_1_rank() {
    tcp_world(1);
}

#[test]
fn tcp_2_ranks() {
    tcp_world(2);
}

#[test]
fn tcp_3_ranks() {
    tcp_world(3);
}

#[test]
fn tcp_4_ranks() {
    tcp_world(4);
}

#[test]
fn tcp_8_ranks() {
    tcp_world(8);
}

#[test]
fn in_process_1_rank() {
    in_process_world(1);
}

#[test]
fn in_process_2_ranks() {
    in_process_world(2);
}

#[test]
fn in_process_3_ranks() {
    in_process_world(3);
}

#[test]
fn in_process_8_ranks() {
    in_process_world(8);
}

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8 ^ seed as u8).collect()
}

/// 8 MB each way, both sent before either side receives: a `send` that waited for its `recv`
/// would deadlock here (and time out).
fn large_messages<B: Bootstrap>(ranks: &[B]) {
    const LEN: usize = 8 << 20;
    on_each(ranks, |bs| {
        let (rank, peer) = (bs.rank(), 1 - bs.rank());
        bs.send(peer, 5, &pattern(rank, LEN)).unwrap();
        bs.send(peer, 6, &pattern(rank + 10, LEN / 2)).unwrap();
        assert!(bs.recv(peer, 6).unwrap() == pattern(peer + 10, LEN / 2));
        assert!(bs.recv(peer, 5).unwrap() == pattern(peer, LEN));
        let all = bs.all_gather(&pattern(rank, LEN)).unwrap();
        assert!(all[peer] == pattern(peer, LEN));
    });
}

#[test]
fn tcp_large_messages() {
    large_messages(&tcp_group(2, TIMEOUT));
}

#[test]
fn in_process_large_messages() {
    large_messages(&InProcessBootstrap::builder().timeout(TIMEOUT).group(2).unwrap());
}

/// Many threads of one rank sending to the same peer at once: frames stay whole.
#[test]
fn tcp_concurrent_sends_from_one_rank() {
    let ranks = tcp_group(2, TIMEOUT);
    std::thread::scope(|s| {
        for tag in 0..8u32 {
            let sender = &ranks[0];
            s.spawn(move || {
                for i in 0..50u32 {
                    let body = [tag.to_le_bytes(), i.to_le_bytes()].concat().repeat(100);
                    sender.send(1, tag, &body).unwrap();
                }
            });
        }
        for tag in 0..8u32 {
            let receiver = &ranks[1];
            s.spawn(move || {
                for i in 0..50u32 {
                    let body = [tag.to_le_bytes(), i.to_le_bytes()].concat().repeat(100);
                    assert_eq!(receiver.recv(0, tag).unwrap(), body);
                }
            });
        }
    });
}

/// The trait is object safe and usable through `Arc<dyn Bootstrap>`.
#[test]
fn works_as_a_trait_object() {
    let ranks: Vec<std::sync::Arc<dyn Bootstrap>> = InProcessBootstrap::group(2)
        .unwrap()
        .into_iter()
        .map(|b| std::sync::Arc::new(b) as std::sync::Arc<dyn Bootstrap>)
        .collect();
    on_each(&ranks, |bs| {
        assert_eq!(bs.all_gather(&[bs.rank() as u8]).unwrap(), vec![vec![0], vec![1]]);
    });
}
