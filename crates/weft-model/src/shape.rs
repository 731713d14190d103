//! Nodes × GPUs per node, and where a rank sits: rank `node * gpus_per_node + local`.

use crate::ModelError;

/// A machine of `nodes` nodes with `gpus_per_node` GPUs each, one rank per GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    nodes: usize,
    gpus_per_node: usize,
}

impl Shape {
    /// A shape of at least one node and one GPU per node, whose rank count fits a `u32` (as
    /// weft's ranks do).
    pub fn new(nodes: usize, gpus_per_node: usize) -> Result<Self, ModelError> {
        if nodes == 0 || gpus_per_node == 0 {
            return Err(ModelError::EmptyShape { nodes, gpus_per_node });
        }
        if nodes.checked_mul(gpus_per_node).is_none_or(|ranks| u32::try_from(ranks).is_err()) {
            return Err(ModelError::BadParameter(format!(
                "{nodes} nodes x {gpus_per_node} GPUs is more ranks than a u32 counts"
            )));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_needs_a_node_a_gpu_and_a_rank_count_that_fits() {
        assert!(matches!(Shape::new(0, 4), Err(ModelError::EmptyShape { .. })));
        assert!(matches!(Shape::new(4, 0), Err(ModelError::EmptyShape { .. })));
        // More ranks than usize (or u32) counts is refused, not a multiplication overflow later.
        assert!(matches!(Shape::new(usize::MAX / 2, 4), Err(ModelError::BadParameter(_))));
        assert!(matches!(Shape::new(1 << 16, 1 << 16), Err(ModelError::BadParameter(_))));
        let shape = Shape::new(1 << 16, (1 << 16) - 1).map(|s| s.ranks());
        assert_eq!(shape.ok(), Some((1 << 16) * ((1 << 16) - 1)));
    }
}
