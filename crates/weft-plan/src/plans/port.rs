//! Algorithms over port channels, written at the channel level.

use super::at_least_two;
use crate::dsl::{Buffer, ChannelProgram, Collective, DslError};
use crate::plan::BufRef;

/// Inputs one reduce folds in this plan: the executor's operation holds four.
const FOLD: usize = 4;

/// All-pairs AllReduce over port channels (MSCCL++'s two-shot all-pairs with PortChannels):
/// `nranks` chunks, chunk `q` reduced by rank `q`. Every rank stages its input in scratch,
/// puts chunk `q` into rank `q`'s scratch through the proxy (`put_with_signal`), folds what
/// its peers put into its own chunk, puts the result into every peer's scratch, and copies
/// the peers' results into its output; last, it flushes every channel. The copy engine moves
/// every byte between ranks; the thread blocks only stage, fold and copy locally.
///
/// Scratch of rank `r` (the same indices on every rank): `0..n` the staged input (chunk `j`
/// in class `j`), `n..2n` what each peer put of chunk `r`, `2n` the reduced chunk `r`, and
/// `2n + 1..3n + 1` every rank's reduced chunk.
pub fn port_allpairs_allreduce(nranks: u32) -> Result<ChannelProgram, DslError> {
    at_least_two("port_allpairs_allreduce", nranks)?;
    let n = nranks;
    let mut p = ChannelProgram::new("port_allpairs_allreduce", Collective::all_reduce(n, n)?);
    let chunk = |buffer, index| BufRef::new(buffer, index, 1);
    for r in 0..n {
        let classes: Vec<u32> = (0..n).chain((0..=n).map(|_| r)).chain(0..n).collect();
        let scratch = p.scratch(r, &classes)?;
        let staged = BufRef::new(Buffer::Scratch, scratch.index, n);
        let received = |s: u32| chunk(Buffer::Scratch, scratch.index + n + s);
        let reduced = chunk(Buffer::Scratch, scratch.index + 2 * n);
        let gathered = |q: u32| chunk(Buffer::Scratch, scratch.index + 2 * n + 1 + q);
        let peers: Vec<u32> = (1..n).map(|k| (r + k) % n).collect();
        let channels = peers.iter().map(|&q| p.port_channel(r, q, 0)).collect::<Result<Vec<_>, _>>()?;
        let mut tb = p.threadblock(r, 0)?;
        tb.copy(BufRef::new(Buffer::Input, 0, n), staged);
        for (ch, &q) in channels.iter().zip(&peers) {
            tb.put_with_signal(ch, chunk(Buffer::Scratch, scratch.index + q), received(r));
        }
        for ch in &channels {
            tb.wait(ch);
        }
        let mut operands = vec![chunk(Buffer::Input, r)];
        operands.extend(peers.iter().map(|&q| received(q)));
        let (first, rest) = operands.split_at(operands.len().min(FOLD));
        tb.reduce(first.to_vec(), reduced);
        for more in rest.chunks(FOLD - 1) {
            tb.reduce(std::iter::once(reduced).chain(more.iter().copied()).collect(), reduced);
        }
        tb.copy(reduced, chunk(Buffer::Output, r));
        for ch in &channels {
            tb.put_with_signal(ch, reduced, gathered(r));
        }
        for (ch, &q) in channels.iter().zip(&peers) {
            tb.recv(ch, gathered(q), chunk(Buffer::Output, q));
        }
        for ch in &channels {
            tb.flush(ch);
        }
    }
    Ok(p)
}
