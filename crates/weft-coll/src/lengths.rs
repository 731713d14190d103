//! The element counts of the typed API's calls, checked against the communicator before
//! anything reaches the raw layer: pure, so tested without a GPU. Each check returns the
//! `count` the raw call takes.

use crate::error::{CollError, Expected};

/// The length checks of one rank of `ranks`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lengths {
    pub(crate) rank: usize,
    pub(crate) ranks: usize,
}

impl Lengths {
    fn error(&self, buffer: &'static str, actual: usize, expected: Expected) -> CollError {
        CollError::Length { rank: self.rank, buffer, actual, expected }
    }

    fn exactly(&self, buffer: &'static str, actual: usize, expected: usize) -> Result<(), CollError> {
        if actual == expected { Ok(()) } else { Err(self.error(buffer, actual, Expected::Exactly(expected))) }
    }

    /// One block per rank: the block's length.
    fn blocks(&self, buffer: &'static str, len: usize) -> Result<usize, CollError> {
        if len.is_multiple_of(self.ranks) {
            Ok(len / self.ranks)
        } else {
            Err(self.error(buffer, len, Expected::MultipleOf(self.ranks)))
        }
    }

    /// AllReduce, Broadcast and Reduce: as many elements out as in.
    pub(crate) fn same(&self, send: usize, recv: usize) -> Result<usize, CollError> {
        self.exactly("recv", recv, send)?;
        Ok(send)
    }

    /// AllGather: `recv` holds a block of `send`'s length per rank.
    pub(crate) fn all_gather(&self, send: usize, recv: usize) -> Result<usize, CollError> {
        self.exactly("recv", recv, send.saturating_mul(self.ranks))?;
        Ok(send)
    }

    /// ReduceScatter: `send` holds a block of `recv`'s length per rank.
    pub(crate) fn reduce_scatter(&self, send: usize, recv: usize) -> Result<usize, CollError> {
        self.exactly("send", send, recv.saturating_mul(self.ranks))?;
        Ok(recv)
    }

    /// AllToAll: both buffers hold a block per rank.
    pub(crate) fn all_to_all(&self, send: usize, recv: usize) -> Result<usize, CollError> {
        self.exactly("recv", recv, send)?;
        self.blocks("send", send)
    }

    /// The in-place AllGather, ReduceScatter and AllToAll: one buffer of a block per rank.
    pub(crate) fn in_place_blocks(&self, len: usize) -> Result<usize, CollError> {
        self.blocks("buffer", len)
    }

    /// AllToAllv's side of `len` elements: a count and a displacement per rank, every block
    /// inside the buffer.
    pub(crate) fn uneven_blocks(
        &self,
        buffer: &'static str,
        len: usize,
        counts: &[usize],
        displs: &[usize],
    ) -> Result<(), CollError> {
        self.exactly(if buffer == "send" { "send_counts" } else { "recv_counts" }, counts.len(), self.ranks)?;
        self.exactly(if buffer == "send" { "send_displs" } else { "recv_displs" }, displs.len(), self.ranks)?;
        for (&count, &displ) in counts.iter().zip(displs) {
            let end = count.saturating_add(displ);
            if end > len {
                return Err(self.error(buffer, len, Expected::AtLeast(end)));
            }
        }
        Ok(())
    }

    /// The in-place layouts of AllGather (`single` is the send block) and ReduceScatter (the
    /// recv block): block `rank` of the buffer, as an element offset.
    pub(crate) fn own_block(&self, count: usize) -> usize {
        self.rank * count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOUR: Lengths = Lengths { rank: 1, ranks: 4 };

    fn expected(result: Result<usize, CollError>) -> Option<(&'static str, usize, Expected)> {
        match result {
            Err(CollError::Length { buffer, actual, expected, .. }) => Some((buffer, actual, expected)),
            _ => None,
        }
    }

    #[test]
    fn counts_of_calls_that_fit() {
        assert_eq!(FOUR.same(10, 10).ok(), Some(10));
        assert_eq!(FOUR.all_gather(10, 40).ok(), Some(10));
        assert_eq!(FOUR.reduce_scatter(40, 10).ok(), Some(10));
        assert_eq!(FOUR.all_to_all(40, 40).ok(), Some(10));
        assert_eq!(FOUR.in_place_blocks(0).ok(), Some(0));
        assert_eq!(FOUR.own_block(10), 10);
        assert!(FOUR.uneven_blocks("send", 10, &[1, 2, 3, 4], &[0, 1, 3, 6]).is_ok());
    }

    #[test]
    fn lengths_that_do_not_fit_name_the_buffer() {
        assert_eq!(expected(FOUR.same(10, 9)), Some(("recv", 9, Expected::Exactly(10))));
        assert_eq!(expected(FOUR.all_gather(10, 30)), Some(("recv", 30, Expected::Exactly(40))));
        assert_eq!(expected(FOUR.reduce_scatter(30, 10)), Some(("send", 30, Expected::Exactly(40))));
        assert_eq!(expected(FOUR.all_to_all(10, 10)), Some(("send", 10, Expected::MultipleOf(4))));
        assert_eq!(expected(FOUR.all_to_all(40, 44)), Some(("recv", 44, Expected::Exactly(40))));
        assert_eq!(expected(FOUR.in_place_blocks(6)), Some(("buffer", 6, Expected::MultipleOf(4))));
        assert_eq!(expected(FOUR.all_gather(usize::MAX / 2, 0)), Some(("recv", 0, Expected::Exactly(usize::MAX))));
    }

    #[test]
    fn uneven_blocks_stay_inside_their_buffer() {
        let check = |len, counts: &[usize], displs: &[usize]| {
            expected(FOUR.uneven_blocks("recv", len, counts, displs).map(|()| 0))
        };
        assert_eq!(check(9, &[1, 2, 3, 4], &[0, 1, 3, 6]), Some(("recv", 9, Expected::AtLeast(10))));
        assert_eq!(check(10, &[1, 2, 3], &[0, 1, 3]), Some(("recv_counts", 3, Expected::Exactly(4))));
        assert_eq!(check(10, &[1, 2, 3, 4], &[0, 1, 3]), Some(("recv_displs", 3, Expected::Exactly(4))));
        assert_eq!(check(10, &[0, 0, 0, 1], &[0, 0, 0, usize::MAX]), Some(("recv", 10, Expected::AtLeast(usize::MAX))));
    }
}
