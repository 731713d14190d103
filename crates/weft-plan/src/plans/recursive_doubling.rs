//! Who talks to whom in recursive doubling among any number of members (MPICH's AllReduce,
//! Thakur and Gropp 2005): the one pairing that [`super::nvrar_allreduce`] and weft-model's
//! schedule of NVRAR both follow.
//!
//! With `k = 2^q + r` members, members `2i` and `2i + 1` (`i < r`) pair up first: `2i` folds
//! its value into `2i + 1` and sits the rounds out. The `2^q` survivors (the odd members of
//! those pairs, then every member from `2r` on) run `q` rounds; in round `b` survivor number
//! `a` exchanges with survivor number `a ^ 2^b` and both reduce. Last, every folded member gets
//! the result back from the member it folded into. A power of two has no fold: `q` rounds.

/// What one member does around the rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Folds its value into member `into`, skips the rounds and gets the result back from it.
    Folded {
        /// The member it folds into.
        into: usize,
    },
    /// Takes part in the rounds.
    Survivor {
        /// Its survivor number (the index whose bits the rounds flip).
        index: usize,
        /// The folded member whose value it absorbs first and hands the result back to.
        absorbs: Option<usize>,
    },
}

/// The pairing of recursive doubling among `members` members (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecursiveDoubling {
    members: usize,
    folded: usize,
}

impl RecursiveDoubling {
    /// The pairing among `members` members (at least one).
    pub fn new(members: usize) -> Self {
        let members = members.max(1);
        Self { members, folded: members - (1 << members.ilog2()) }
    }

    /// Rounds of exchanges: log2 of the largest power of two not above the member count.
    pub fn rounds(&self) -> u32 {
        self.members.ilog2()
    }

    /// `(folded, into)` for every member that folds, in member order.
    pub fn folds(&self) -> impl Iterator<Item = (usize, usize)> {
        (0..self.folded).map(|i| (2 * i, 2 * i + 1))
    }

    /// Survivor number `index`'s member.
    fn survivor(&self, index: usize) -> usize {
        if index < self.folded { 2 * index + 1 } else { index + self.folded }
    }

    /// Every survivor, by survivor number.
    pub fn survivors(&self) -> impl Iterator<Item = usize> {
        let this = *self;
        (0..self.members - self.folded).map(move |index| this.survivor(index))
    }

    /// What `member` does.
    pub fn role(&self, member: usize) -> Role {
        if member < 2 * self.folded {
            if member.is_multiple_of(2) {
                Role::Folded { into: member + 1 }
            } else {
                Role::Survivor { index: member / 2, absorbs: Some(member - 1) }
            }
        } else {
            Role::Survivor { index: member - self.folded, absorbs: None }
        }
    }

    /// The member `member` exchanges with in `round`; `None` for a folded member.
    pub fn peer(&self, member: usize, round: u32) -> Option<usize> {
        match self.role(member) {
            Role::Folded { .. } => None,
            Role::Survivor { index, .. } => Some(self.survivor(index ^ (1 << round))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_pairs_consistently_for_any_count() {
        for k in 1..=70 {
            let rd = RecursiveDoubling::new(k);
            let pof2 = 1 << rd.rounds();
            assert!(pof2 <= k && k < 2 * pof2);
            assert_eq!(rd.folds().count(), k - pof2, "{k}");
            let survivors: Vec<usize> = rd.survivors().collect();
            assert_eq!(survivors.len(), pof2);
            for (index, &m) in survivors.iter().enumerate() {
                assert!(matches!(rd.role(m), Role::Survivor { index: i, .. } if i == index), "{k}: {m}");
            }
            for (f, into) in rd.folds() {
                assert_eq!(rd.role(f), Role::Folded { into });
                assert!(matches!(rd.role(into), Role::Survivor { absorbs: Some(a), .. } if a == f));
                assert_eq!(rd.peer(f, 0), None);
            }
            for round in 0..rd.rounds() {
                for &m in &survivors {
                    let q = rd.peer(m, round).unwrap_or(usize::MAX);
                    assert!(q != m && survivors.contains(&q), "{k}: round {round}, {m} -> {q}");
                    assert_eq!(rd.peer(q, round), Some(m), "{k}: round {round} is not an exchange");
                }
            }
        }
    }
}
