//! Nodes × GPUs per node, and where a rank sits: rank `node * gpus_per_node + local`.

use crate::ModelError;

/// A machine of `nodes` nodes with `gpus_per_node` GPUs each, one rank per GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    nodes: usize,
    gpus_per_node: usize,
}

impl Shape {
    /// A shape of at least one node and one GPU per node.
    pub fn new(nodes: usize, gpus_per_node: usize) -> Result<Self, ModelError> {
        if nodes == 0 || gpus_per_node == 0 {
            return Err(ModelError::EmptyShape { nodes, gpus_per_node });
        }
        Ok(Self { nodes, gpus_per_node })
    }

    /// Nodes (N).
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// GPUs per node (G).
    pub fn gpus_per_node(&self) -> usize {
        self.gpus_per_node
    }

    /// Ranks (p = N·G).
    pub fn ranks(&self) -> usize {
        self.nodes * self.gpus_per_node
    }

    /// The rank of GPU `local` of node `node`.
    pub fn rank(&self, node: usize, local: usize) -> usize {
        node * self.gpus_per_node + local
    }

    /// The node of `rank`.
    pub fn node_of(&self, rank: usize) -> usize {
        rank / self.gpus_per_node
    }

    /// The index of `rank` within its node.
    pub fn local_of(&self, rank: usize) -> usize {
        rank % self.gpus_per_node
    }

    /// Whether a transfer between `a` and `b` crosses the network.
    pub fn crosses_network(&self, a: usize, b: usize) -> bool {
        self.node_of(a) != self.node_of(b)
    }
}
