//! What each example leaves on a rank, computed on the host from every rank's input: the
//! references the GPU suite checks every element against.

/// Rank `rank`'s output of an AllToAll of `inputs` (rank r's input is world chunks, chunk p
/// for rank p): chunk p of the output is chunk `rank` of rank p's input. Over all ranks, a
/// transposition of the (rank, chunk) matrix.
pub fn alltoall<T: Copy>(inputs: &[Vec<T>], rank: usize) -> Vec<T> {
    let world = inputs.len();
    let chunk = inputs.first().map_or(0, |i| i.len() / world.max(1));
    inputs.iter().flat_map(|input| input[rank * chunk..(rank + 1) * chunk].iter().copied()).collect()
}

/// Every rank's output of an AllGather of `inputs`: the inputs in rank order.
pub fn allgather<T: Copy>(inputs: &[Vec<T>]) -> Vec<T> {
    inputs.concat()
}

/// Rank `rank`'s field after a halo exchange of `halo` elements over a ring of ranks with
/// interiors `interiors`: `[last halo of rank - 1's interior | own interior | first halo of
/// rank + 1's interior]`.
pub fn halo<T: Copy>(interiors: &[Vec<T>], halo: usize, rank: usize) -> Vec<T> {
    let world = interiors.len();
    let left = &interiors[(rank + world - 1) % world];
    let right = &interiors[(rank + 1) % world];
    [&left[left.len() - halo..], &interiors[rank][..], &right[..halo]].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Element `i` of chunk `to` of rank `from`'s input.
    fn tagged(world: usize, chunk: usize) -> Vec<Vec<(usize, usize, usize)>> {
        (0..world).map(|from| (0..world * chunk).map(|e| (from, e / chunk, e % chunk)).collect()).collect()
    }

    #[test]
    fn alltoall_is_a_transposition_of_ranks_and_chunks() {
        for (world, chunk) in [(1, 3), (2, 1), (3, 4), (5, 2)] {
            let inputs = tagged(world, chunk);
            let outputs: Vec<_> = (0..world).map(|r| alltoall(&inputs, r)).collect();
            for (rank, output) in outputs.iter().enumerate() {
                let want: Vec<_> = (0..world * chunk).map(|e| (e / chunk, rank, e % chunk)).collect();
                assert_eq!(output, &want, "rank {rank} of {world}");
            }
            // Transposing twice gives the inputs back.
            let back: Vec<_> = (0..world).map(|r| alltoall(&outputs, r)).collect();
            assert_eq!(back, inputs);
        }
    }

    #[test]
    fn allgather_lays_the_inputs_out_in_rank_order() {
        let inputs = vec![vec![1, 2], vec![3, 4], vec![5, 6]];
        assert_eq!(allgather(&inputs), vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn halo_takes_the_neighbours_facing_edges_around_the_ring() {
        let interiors: Vec<Vec<u32>> = (0..3).map(|r| (0..4).map(|i| 10 * r + i).collect()).collect();
        assert_eq!(halo(&interiors, 2, 0), vec![22, 23, 0, 1, 2, 3, 10, 11]);
        assert_eq!(halo(&interiors, 1, 2), vec![13, 20, 21, 22, 23, 0]);
        // Alone on the ring, a rank is its own neighbour on both sides.
        assert_eq!(halo(&interiors[..1], 1, 0), vec![3, 0, 1, 2, 3, 0]);
    }
}
