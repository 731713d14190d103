//! The rules of [`Protocol::Ll`] plans, checked by [`ExecutionPlan::validate`].
//!
//! A packet carries its data's arrival with it, so the receiver of a transfer polls the staged
//! chunk itself instead of a semaphore. That is sound only when every transfer lands in a
//! chunk of its own, which the receive that follows on the link reads and nothing else touches:
//! a chunk written twice in one launch would show the second reader the first packets (both
//! carry the launch's flag), and a plain read of it would see packets, not data. And scratch
//! holds packets only: chunks lie where the call's size puts them, so plain data a launch left
//! in scratch could sit, in a later launch of another size, on a packet's flag word and pass
//! its poll (packet chunks start 32-byte aligned, so old packets never do).

use std::collections::BTreeMap;

use super::validate::{LoadError, Site};
use super::{BufRef, Buffer, ExecutionPlan, Op, Protocol};

/// The staged operand a receive reads when its link's data has arrived (`recv`'s source,
/// `rrc`/`rrcs`/`rrs`'s staged chunk, `rcs`'s source); `None` for other operations. Under
/// [`Protocol::Ll`] it holds packets.
pub fn packet_input(op: &Op) -> Option<BufRef> {
    match *op {
        Op::Recv { src, .. } | Op::Rcs { src, .. } => Some(src),
        Op::Rrc { staged, .. } | Op::Rrcs { staged, .. } | Op::Rrs { staged, .. } => Some(staged),
        _ => None,
    }
}

/// What happened to one scratch chunk of one rank, for the packet rules.
#[derive(Clone, Copy, Default)]
struct Use {
    /// Written by a transfer (the site of the first).
    packets: Option<Site>,
    /// Touched by anything else: a local write or a plain read.
    other: Option<Site>,
}

impl ExecutionPlan {
    /// The [`Protocol::Ll`] rules (see the module documentation); nothing for other plans.
    pub(super) fn validate_packets(&self) -> Result<(), LoadError> {
        if self.protocol != Protocol::Ll {
            return Ok(());
        }
        // (from, to, channel) -> chunks sent, in link order; (to, from, channel) -> received.
        let mut sent: BTreeMap<(u32, u32, u32), Vec<BufRef>> = BTreeMap::new();
        let mut received: BTreeMap<(u32, u32, u32), Vec<BufRef>> = BTreeMap::new();
        let mut uses: Vec<Vec<Use>> = self.ranks.iter().map(|r| vec![Use::default(); r.scratch.len()]).collect();
        for rank in &self.ranks {
            for tb in &rank.threadblocks {
                for (i, op) in tb.ops.iter().enumerate() {
                    let site = Site { rank: rank.rank, tb: tb.id, op: i as u32 };
                    let allowed = matches!(
                        op,
                        Op::Nop
                            | Op::Barrier
                            | Op::WaitTb { .. }
                            | Op::Copy { .. }
                            | Op::Reduce { .. }
                            | Op::Send { .. }
                            | Op::Recv { .. }
                            | Op::Rrc { .. }
                            | Op::Rcs { .. }
                            | Op::Rrcs { .. }
                            | Op::Rrs { .. }
                            | Op::ReduceSend { .. }
                    );
                    if !allowed {
                        return Err(LoadError::PacketOp { site, op: op.name() });
                    }
                    let e = op.effects();
                    let staged = packet_input(op);
                    if let (Some(from), Some(chunks)) = (e.wait, staged) {
                        received.entry((from.peer, rank.rank, from.channel)).or_default().push(chunks);
                    }
                    for loc in &e.outputs {
                        match loc.peer {
                            Some(peer) if loc.buf.buffer != Buffer::Scratch => {
                                return Err(LoadError::PacketTarget { site, peer, target: loc.buf });
                            }
                            Some(peer) => {
                                sent.entry((rank.rank, peer, e.signal.map_or(0, |l| l.channel)))
                                    .or_default()
                                    .push(loc.buf);
                                mark(&mut uses, peer, loc.buf, site, true)?;
                            }
                            None => mark(&mut uses, rank.rank, loc.buf, site, false)?,
                        }
                    }
                    for loc in e.inputs.iter().filter(|l| Some(l.buf) != staged) {
                        mark(&mut uses, rank.rank, loc.buf, site, false)?;
                    }
                }
            }
        }
        for (rank, chunks) in uses.iter().enumerate() {
            for (index, u) in chunks.iter().enumerate() {
                let (rank, index) = (rank as u32, index as u32);
                match (u.packets, u.other) {
                    (Some(first), Some(second)) => return Err(LoadError::PacketChunk { rank, index, first, second }),
                    (None, Some(site)) => return Err(LoadError::PlainScratch { rank, index, site }),
                    _ => {}
                }
            }
        }
        for (&(from, to, channel), chunks) in &sent {
            let got = received.get(&(from, to, channel)).map_or(&[][..], Vec::as_slice);
            if let Some(k) = (0..chunks.len().max(got.len())).find(|&k| chunks.get(k) != got.get(k)) {
                let show = |c: Option<&BufRef>| c.map_or_else(|| "nothing".into(), BufRef::to_string);
                return Err(LoadError::PacketPairing {
                    from,
                    to,
                    channel,
                    transfer: k,
                    sent: show(chunks.get(k)),
                    received: show(got.get(k)),
                });
            }
        }
        Ok(())
    }
}

/// Records an access to `rank`'s scratch chunks `buf` (other buffers are not packet targets):
/// a transfer's write when `packets`, anything else otherwise. A chunk written by two
/// transfers is an error at once.
fn mark(uses: &mut [Vec<Use>], rank: u32, buf: BufRef, site: Site, packets: bool) -> Result<(), LoadError> {
    if buf.buffer != Buffer::Scratch {
        return Ok(());
    }
    let Some(chunks) = uses.get_mut(rank as usize) else { return Ok(()) };
    for index in buf.index..buf.index + buf.count {
        let Some(u) = chunks.get_mut(index as usize) else { continue };
        if packets {
            if let Some(first) = u.packets {
                return Err(LoadError::PacketChunk { rank, index, first, second: site });
            }
            u.packets = Some(site);
        } else {
            u.other.get_or_insert(site);
        }
    }
    Ok(())
}
