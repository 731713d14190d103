//! Teams: the world, this rank's LSA team (the ranks of its node, whose memory it maps) and its
//! rail team (the ranks with its local index on every node), and the conversions between a
//! member's index in a team and its world rank. Built from each rank's node, so nodes of any
//! size (the last virtual node of a host may be smaller) give the right teams.

/// A team seen from one rank: its members' world ranks in order, and this rank's index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Team {
    members: Vec<usize>,
    me: usize,
}

impl Team {
    /// Ranks of the team.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// This rank's index in the team.
    pub fn rank(&self) -> usize {
        self.me
    }

    /// Members' world ranks, in team order.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// The world rank of member `peer`, if there is one.
    pub fn world_rank(&self, peer: usize) -> Option<usize> {
        self.members.get(peer).copied()
    }

    /// The index of world rank `rank` in this team, if it is a member.
    pub fn team_rank(&self, rank: usize) -> Option<usize> {
        self.members.iter().position(|&m| m == rank)
    }
}

/// The three teams of one rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Teams {
    /// Every rank.
    pub world: Team,
    /// The ranks of this rank's node.
    pub lsa: Team,
    /// The ranks whose index in their node equals this rank's, one per node.
    pub rail: Team,
}

impl Teams {
    /// The teams of `comm`'s rank, from its topology's nodes (hosts, or virtual nodes).
    pub fn of(comm: &weft_core::Communicator) -> Option<Self> {
        let topology = comm.topology();
        let nodes: Vec<usize> = (0..comm.world_size()).map(|r| topology.node(r).unwrap_or(r)).collect();
        Self::new(comm.rank(), &nodes)
    }

    /// The teams of rank `me` when rank r lies in node `nodes[r]`; `None` if `me` is outside.
    pub fn new(me: usize, nodes: &[usize]) -> Option<Self> {
        let my_node = *nodes.get(me)?;
        let local_index = |r: usize| nodes[..r].iter().filter(|&&n| n == nodes[r]).count();
        let lsa: Vec<usize> = (0..nodes.len()).filter(|&r| nodes[r] == my_node).collect();
        let mine = local_index(me);
        let rail: Vec<usize> = (0..nodes.len()).filter(|&r| local_index(r) == mine).collect();
        let team = |members: Vec<usize>| {
            let me = members.iter().position(|&m| m == me)?;
            Some(Team { members, me })
        };
        Some(Self { world: team((0..nodes.len()).collect())?, lsa: team(lsa)?, rail: team(rail)? })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn two_nodes_of_two_give_node_and_rail_teams() {
        let nodes = [0, 0, 1, 1];
        let t = Teams::new(3, &nodes).unwrap();
        assert_eq!((t.world.size(), t.world.rank()), (4, 3));
        assert_eq!((t.lsa.members(), t.lsa.rank()), (&[2, 3][..], 1));
        assert_eq!((t.rail.members(), t.rail.rank()), (&[1, 3][..], 1));
        let t = Teams::new(0, &nodes).unwrap();
        assert_eq!((t.lsa.members(), t.rail.members()), (&[0, 1][..], &[0, 2][..]));
    }

    #[test]
    fn a_smaller_last_node_has_a_shorter_lsa_team_and_rails_skip_it() {
        let nodes = [0, 0, 0, 1, 1];
        let t = Teams::new(2, &nodes).unwrap();
        assert_eq!(t.lsa.members(), &[0, 1, 2]);
        assert_eq!(t.rail.members(), &[2]);
        let t = Teams::new(4, &nodes).unwrap();
        assert_eq!((t.lsa.members(), t.lsa.rank()), (&[3, 4][..], 1));
        assert_eq!(t.rail.members(), &[1, 4]);
    }

    #[test]
    fn conversions_round_trip_in_every_team_of_every_rank() {
        let nodes = [0, 0, 0, 1, 1, 1, 2, 2, 2];
        for me in 0..nodes.len() {
            let t = Teams::new(me, &nodes).unwrap();
            for team in [&t.world, &t.lsa, &t.rail] {
                assert_eq!(team.world_rank(team.rank()), Some(me));
                for i in 0..team.size() {
                    assert_eq!(team.team_rank(team.world_rank(i).unwrap()), Some(i));
                }
                assert_eq!(team.world_rank(team.size()), None);
            }
            assert_eq!(t.rail.size(), 3);
            assert!(t.rail.members().iter().all(|&r| r % 3 == me % 3));
        }
    }

    #[test]
    fn one_node_makes_the_lsa_team_the_world_and_rails_single() {
        let t = Teams::new(1, &[0, 0, 0]).unwrap();
        assert_eq!(t.lsa, t.world);
        assert_eq!(t.rail.members(), &[1]);
        assert!(Teams::new(3, &[0, 0, 0]).is_none());
    }
}
