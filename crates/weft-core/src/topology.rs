//! Where every rank lives: host, process, GPU. Gathered once when a communicator is created.

use crate::identity::ProcessIdentity;
use weft_bootstrap::codec::{CodecError, Reader, Writer};

use crate::wire::{put_short_bytes, short_bytes, to_u32};

const PEER_INFO_VERSION: u8 = 1;

/// What a rank tells the others about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// The rank.
    pub rank: usize,
    /// CUDA ordinal of its GPU (as its own process numbers them).
    pub device_ordinal: usize,
    /// PCI bus id of its GPU (process-independent).
    pub pci_bus_id: String,
    /// Its host and process.
    pub identity: ProcessIdentity,
}

impl PeerInfo {
    /// Versioned wire encoding.
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        let mut w = Writer::new();
        w.put_u8(PEER_INFO_VERSION);
        w.put_u32(to_u32("rank", self.rank)?);
        w.put_u32(to_u32("device ordinal", self.device_ordinal)?);
        w.put_u64(self.identity.host_hash);
        w.put_u64(self.identity.pid_hash);
        put_short_bytes(&mut w, self.pci_bus_id.as_bytes())?;
        Ok(w.into_inner())
    }

    /// Decodes [`PeerInfo::encode`]'s output.
    pub fn decode(bytes: &[u8]) -> Result<Self, CodecError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != PEER_INFO_VERSION {
            return Err(CodecError::InvalidValue { field: "peer info version", value: version.into() });
        }
        let rank = r.u32()? as usize;
        let device_ordinal = r.u32()? as usize;
        let host_hash = r.u64()?;
        let pid_hash = r.u64()?;
        let bus = short_bytes(&mut r)?;
        let pci_bus_id = String::from_utf8(bus.to_vec())
            .map_err(|_| CodecError::InvalidValue { field: "pci bus id (not UTF-8)", value: bus.len() as u64 })?;
        r.finish()?;
        Ok(Self { rank, device_ordinal, pci_bus_id, identity: ProcessIdentity { host_hash, pid_hash } })
    }
}

/// How ranks group into nodes, and whether ranks of one node may share a GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeLayout {
    /// Ranks per virtual node (in rank order; the last node of a host may be smaller; `None`:
    /// a node is a host).
    pub ranks_per_node: Option<usize>,
    /// Whether ranks of one node may share a GPU (`WEFT_SHARE_GPUS`, for checks on fewer GPUs).
    pub share_gpus: bool,
}

impl NodeLayout {
    /// Virtual nodes of `ranks_per_node` ranks, one GPU per rank within a node.
    pub fn virtual_nodes(ranks_per_node: usize) -> Self {
        Self { ranks_per_node: Some(ranks_per_node), share_gpus: false }
    }
}

/// Every rank's [`PeerInfo`], indexed by rank, seen from one rank, and the node each rank
/// belongs to: its host, or with `ranks_per_node` a virtual node of that many ranks of one
/// host (in rank order), so a multi-node algorithm can be studied on one host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    me: usize,
    peers: Vec<PeerInfo>,
    nodes: Vec<usize>,
    ranks_per_node: Option<usize>,
    /// The most ranks any one GPU carries (derived from `peers` once: calls ask on every launch).
    most_ranks_per_gpu: usize,
}

impl Topology {
    /// Builds the topology seen by rank `me`, with every host's ranks grouped into nodes as
    /// `layout` says. Rejects tables whose entries disagree with their index, and two ranks on
    /// one GPU of one host in the same node unless `layout.share_gpus`. Ranks of different
    /// nodes may always share a GPU: they only reach each other through a network transport,
    /// as on different hosts (several virtual nodes on fewer GPUs).
    pub fn new(me: usize, peers: Vec<PeerInfo>, layout: NodeLayout) -> Result<Self, String> {
        if me >= peers.len() {
            return Err(format!("rank {me} outside a world of {}", peers.len()));
        }
        if let Some((i, p)) = peers.iter().enumerate().find(|(i, p)| p.rank != *i) {
            return Err(format!("entry {i} claims to be rank {}", p.rank));
        }
        let nodes = node_ids(&peers, layout.ranks_per_node);
        if !layout.share_gpus {
            for (i, p) in peers.iter().enumerate() {
                for (j, q) in peers[..i].iter().enumerate() {
                    if same_gpu(p, q) && nodes[i] == nodes[j] {
                        return Err(format!(
                            "ranks {} and {} share GPU {} in one node (only ranks of different virtual nodes may share a GPU, unless WEFT_SHARE_GPUS=1)",
                            q.rank, p.rank, p.pci_bus_id
                        ));
                    }
                }
            }
        }
        let most_ranks_per_gpu =
            peers.iter().map(|p| peers.iter().filter(|q| same_gpu(p, q)).count()).max().unwrap_or(1);
        Ok(Self { me, peers, nodes, ranks_per_node: layout.ranks_per_node, most_ranks_per_gpu })
    }

    /// The most ranks any one GPU carries (1 with a GPU per rank). Every rank computes the
    /// same value, so launch shapes derived from it agree across ranks.
    pub fn most_ranks_per_gpu(&self) -> usize {
        self.most_ranks_per_gpu
    }

    /// The node of `rank` (numbered from 0 in order of first appearance), if it exists.
    pub fn node(&self, rank: usize) -> Option<usize> {
        self.nodes.get(rank).copied()
    }

    /// Number of (possibly virtual) nodes the ranks are in.
    pub fn node_count(&self) -> usize {
        // Nodes are numbered from 0 in order of first appearance.
        self.nodes.iter().max().map_or(0, |&n| n + 1)
    }

    /// Ranks per virtual node, when nodes are virtual.
    pub fn ranks_per_node(&self) -> Option<usize> {
        self.ranks_per_node
    }

    /// Whether `rank` is in this rank's (possibly virtual) node.
    pub fn same_node(&self, rank: usize) -> bool {
        self.node(rank).is_some_and(|n| Some(n) == self.node(self.me))
    }

    /// Whether some rank is in another node than this rank's (so only network transports
    /// reach it).
    pub fn spans_nodes(&self) -> bool {
        (0..self.peers.len()).any(|r| !self.same_node(r))
    }

    /// Whether some rank runs on another host.
    pub fn spans_hosts(&self) -> bool {
        (0..self.peers.len()).any(|r| !self.same_host(r))
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.peers.len()
    }

    /// Info of `rank`.
    pub fn peer(&self, rank: usize) -> Option<&PeerInfo> {
        self.peers.get(rank)
    }

    /// All ranks.
    pub fn peers(&self) -> &[PeerInfo] {
        &self.peers
    }

    /// Whether `rank` runs on this rank's host.
    pub fn same_host(&self, rank: usize) -> bool {
        self.peers.get(rank).is_some_and(|p| p.identity.host_hash == self.peers[self.me].identity.host_hash)
    }

    /// Whether `rank` runs in this rank's process.
    pub fn same_process(&self, rank: usize) -> bool {
        self.peers.get(rank).is_some_and(|p| p.identity == self.peers[self.me].identity)
    }
}

/// Whether two ranks run on one GPU (one host, one PCI bus id).
fn same_gpu(a: &PeerInfo, b: &PeerInfo) -> bool {
    a.identity.host_hash == b.identity.host_hash && a.pci_bus_id == b.pci_bus_id
}

/// Node of every rank: ranks of one host form one node, or consecutive groups of
/// `ranks_per_node` of them (in rank order) with virtual nodes.
fn node_ids(peers: &[PeerInfo], ranks_per_node: Option<usize>) -> Vec<usize> {
    let mut keys: Vec<(u64, usize)> = Vec::new();
    let mut seen_on_host: Vec<(u64, usize)> = Vec::new();
    peers
        .iter()
        .map(|p| {
            let host = p.identity.host_hash;
            let local = match seen_on_host.iter_mut().find(|(h, _)| *h == host) {
                Some((_, n)) => {
                    *n += 1;
                    *n - 1
                }
                None => {
                    seen_on_host.push((host, 1));
                    0
                }
            };
            let key = (host, ranks_per_node.map_or(0, |g| local / g.max(1)));
            keys.iter().position(|k| *k == key).unwrap_or_else(|| {
                keys.push(key);
                keys.len() - 1
            })
        })
        .collect()
}

/// Test aid: rank `rank` on GPU `bus` of host `host`, in process `pid`.
#[cfg(test)]
pub(crate) fn test_peer(rank: usize, host: u64, pid: u64, bus: &str) -> PeerInfo {
    PeerInfo {
        rank,
        device_ordinal: rank,
        pci_bus_id: bus.into(),
        identity: ProcessIdentity { host_hash: host, pid_hash: pid },
    }
}

#[cfg(test)]
mod tests {
    use super::test_peer as info;
    use super::*;

    #[test]
    fn peer_info_round_trips_and_rejects_other_versions() {
        let p = info(3, 7, 9, "0000:19:00.0");
        let bytes = p.encode().unwrap();
        assert_eq!(PeerInfo::decode(&bytes).unwrap(), p);
        let mut bad = bytes.clone();
        bad[0] = 2;
        assert!(PeerInfo::decode(&bad).is_err());
        assert!(PeerInfo::decode(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn same_host_and_process_and_duplicate_gpus() {
        let t =
            Topology::new(0, vec![info(0, 1, 1, "a"), info(1, 1, 2, "b"), info(2, 5, 3, "a")], NodeLayout::default())
                .unwrap();
        assert!(t.same_host(1) && !t.same_process(1));
        assert!(!t.same_host(2));
        assert!(t.same_process(0));
        assert!(Topology::new(0, vec![info(0, 1, 1, "a"), info(1, 1, 2, "a")], NodeLayout::default()).is_err());
        assert!(Topology::new(0, vec![info(0, 1, 1, "a"), info(1, 1, 2, "a")], NodeLayout::virtual_nodes(2)).is_err());
        assert!(Topology::new(0, vec![info(1, 1, 1, "a")], NodeLayout::default()).is_err());
        // Ranks of different virtual nodes may share a GPU.
        let shared =
            Topology::new(0, vec![info(0, 1, 1, "a"), info(1, 1, 2, "a")], NodeLayout::virtual_nodes(1)).unwrap();
        assert!(!shared.same_node(1) && shared.same_host(1));
        assert!(shared.spans_nodes() && !shared.spans_hosts());
        assert!(t.spans_nodes() && t.spans_hosts());
        let one = Topology::new(0, vec![info(0, 1, 1, "a"), info(1, 1, 2, "b")], NodeLayout::default()).unwrap();
        assert!(!one.spans_nodes() && !one.spans_hosts());
        assert_eq!(one.most_ranks_per_gpu(), 1);
        assert_eq!(shared.most_ranks_per_gpu(), 2);
        // With WEFT_SHARE_GPUS, ranks of one node may share a GPU too.
        let sharing = NodeLayout { ranks_per_node: None, share_gpus: true };
        let three = vec![info(0, 1, 1, "a"), info(1, 1, 1, "a"), info(2, 1, 1, "b"), info(3, 2, 1, "a")];
        let t = Topology::new(2, three, sharing).unwrap();
        assert!(t.same_node(0) && t.same_process(1) && !t.same_node(3));
        assert_eq!(t.most_ranks_per_gpu(), 2);
    }

    #[test]
    fn nodes_are_hosts_or_virtual_groups_of_a_host() {
        let peers =
            vec![info(0, 1, 1, "a"), info(1, 1, 2, "b"), info(2, 5, 3, "a"), info(3, 1, 4, "c"), info(4, 5, 5, "b")];
        let t = Topology::new(0, peers.clone(), NodeLayout::default()).unwrap();
        assert_eq!((0..5).map(|r| t.node(r).unwrap()).collect::<Vec<_>>(), vec![0, 0, 1, 0, 1]);
        assert!(t.same_node(3) && !t.same_node(2) && t.ranks_per_node().is_none());
        // Two ranks per virtual node: host 1 holds ranks 0, 1, 3 -> nodes {0, 1}, {3}.
        let v = Topology::new(0, peers, NodeLayout::virtual_nodes(2)).unwrap();
        assert_eq!((0..5).map(|r| v.node(r).unwrap()).collect::<Vec<_>>(), vec![0, 0, 1, 2, 1]);
        assert!(v.same_node(1) && !v.same_node(3));
        assert_eq!(v.ranks_per_node(), Some(2));
    }
}
