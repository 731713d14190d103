//! The bootstrap operations, written once over a [`Transport`] that moves messages to peers
//! and a [`Mailbox`] that holds what arrived.
//!
//! Collectives are direct exchanges: each rank sends its part to every other rank and waits for
//! theirs. Per rank that moves the same bytes as a ring, in one step instead of `world - 1`, and
//! when a part does not arrive the waiting rank knows exactly whose part it was.

use std::time::{Duration, Instant};

use crate::{
    BootstrapError,
    codec::{CodecError, CollectiveOp, Message},
    mailbox::{Channel, Mailbox, Parcel, Wait},
};

/// What the operations need from a bootstrap implementation.
pub(crate) trait Transport {
    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// Bound of every operation.
    fn timeout(&self) -> Duration;
    /// This rank's incoming messages.
    fn mailbox(&self) -> &Mailbox;
    /// The next collective sequence number (0, 1, 2, ... per rank).
    fn next_seq(&self) -> u64;
    /// Hands a `Data` or `Collective` message to `peer`, which is not this rank.
    fn post(&self, peer: usize, message: &Message<'_>, deadline: Instant) -> Result<(), BootstrapError>;
}

fn check_peer<T: Transport>(t: &T, peer: usize) -> Result<(), BootstrapError> {
    if peer >= t.world_size() {
        return Err(BootstrapError::PeerOutOfRange { rank: t.rank(), peer, world_size: t.world_size() });
    }
    Ok(())
}

/// `Bootstrap::send`.
pub(crate) fn send<T: Transport>(t: &T, peer: usize, tag: u32, data: &[u8]) -> Result<(), BootstrapError> {
    check_peer(t, peer)?;
    if peer == t.rank() {
        t.mailbox().deliver(peer, Channel::User(tag), Parcel { op: None, payload: data.to_vec() });
        return Ok(());
    }
    t.post(peer, &Message::Data { tag, payload: data }, Instant::now() + t.timeout())
}

/// `Bootstrap::recv`.
pub(crate) fn recv<T: Transport>(t: &T, peer: usize, tag: u32) -> Result<Vec<u8>, BootstrapError> {
    check_peer(t, peer)?;
    let wait = Wait::new(t.timeout(), "recv");
    Ok(t.mailbox().take(peer, Channel::User(tag), &wait)?.payload)
}

/// `Bootstrap::all_gather`.
pub(crate) fn all_gather<T: Transport>(t: &T, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
    exchange(t, CollectiveOp::AllGather, mine)
}

/// `Bootstrap::barrier`.
pub(crate) fn barrier<T: Transport>(t: &T) -> Result<(), BootstrapError> {
    exchange(t, CollectiveOp::Barrier, &[]).map(drop)
}

/// `Bootstrap::broadcast`: the ranks first agree on the root, then the root sends its bytes.
///
/// Without the agreement, ranks that name different roots could all succeed with different
/// bytes (a rank that believes itself the root waits for nobody). It costs one exchange of
/// 4 bytes per pair, and broadcasts are for set-up.
pub(crate) fn broadcast<T: Transport>(t: &T, root: usize, data: Option<&[u8]>) -> Result<Vec<u8>, BootstrapError> {
    check_peer(t, root)?;
    let op = CollectiveOp::Broadcast;
    let me = t.rank();
    let data = match data {
        None if me == root => {
            return Err(BootstrapError::InvalidArgument {
                rank: me,
                reason: "broadcast: the root must pass Some(data)",
            });
        }
        data => data.unwrap_or_default(),
    };
    // The world size fits in u32 (checked when a bootstrap is built), so every root does.
    let named = exchange(t, op, &u32::try_from(root).unwrap_or(u32::MAX).to_le_bytes())?;
    for (peer, theirs) in named.iter().enumerate() {
        let theirs =
            <[u8; 4]>::try_from(theirs.as_slice()).map(u32::from_le_bytes).map_err(|_| BootstrapError::Malformed {
                rank: me,
                peer: Some(peer),
                source: CodecError::InvalidValue { field: "broadcast root length", value: theirs.len() as u64 },
            })?;
        if theirs as usize != root {
            return Err(BootstrapError::RootMismatch { rank: me, peer, root, peer_root: theirs as usize });
        }
    }
    let wait = Wait::new(t.timeout(), op.name());
    let seq = t.next_seq();
    if me != root {
        let parcel = t.mailbox().take(root, Channel::Collective(seq), &wait)?;
        return check_op(me, root, op, parcel);
    }
    let message = Message::Collective { seq, op, payload: data };
    for peer in others(me, t.world_size()) {
        t.post(peer, &message, wait.deadline)?;
    }
    Ok(data.to_vec())
}

/// Every rank sends `mine` to every other rank; returns all parts indexed by rank.
fn exchange<T: Transport>(t: &T, op: CollectiveOp, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
    let wait = Wait::new(t.timeout(), op.name());
    let seq = t.next_seq();
    let (me, world) = (t.rank(), t.world_size());
    let message = Message::Collective { seq, op, payload: mine };
    for peer in others(me, world) {
        t.post(peer, &message, wait.deadline)?;
    }
    // Ascending, so that the parts come back in rank order.
    let peers: Vec<usize> = (0..world).filter(|&peer| peer != me).collect();
    let parcels = t.mailbox().take_each(&peers, Channel::Collective(seq), &wait)?;
    let mut parts: Vec<Vec<u8>> = Vec::with_capacity(world);
    let mut parcels = peers.iter().zip(parcels);
    for rank in 0..world {
        if rank == me {
            parts.push(mine.to_vec());
        } else if let Some((&peer, parcel)) = parcels.next() {
            parts.push(check_op(me, peer, op, parcel)?);
        }
    }
    Ok(parts)
}

/// The other ranks, starting after `me` so that ranks do not all contact rank 0 first.
fn others(me: usize, world: usize) -> impl Iterator<Item = usize> {
    (1..world).map(move |k| (me + k) % world)
}

fn check_op(me: usize, peer: usize, op: CollectiveOp, parcel: Parcel) -> Result<Vec<u8>, BootstrapError> {
    match parcel.op {
        Some(got) if got == op => Ok(parcel.payload),
        got => Err(BootstrapError::CollectiveMismatch {
            rank: me,
            peer,
            expected: op.name(),
            got: got.map_or("send", CollectiveOp::name),
        }),
    }
}
