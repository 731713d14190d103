//! Normal-mode combine: every token's rows sent back from the ranks that received it, summed
//! in a fixed order, as DeepEP's `combine` (no weighting: the expert side has already weighted
//! and summed its local experts' outputs).

use half::bf16;

use super::dispatch::Received;

/// One rank's combine input.
#[derive(Debug, Clone, Copy)]
pub struct CombineInput<'a> {
    /// `[received][hidden]` BF16 rows in the order dispatch received them.
    pub x: &'a [bf16],
    /// `[received][topk]` weights to sum alongside, or `None`.
    pub topk_weights: Option<&'a [f32]>,
    /// Up to two `[tokens][hidden]` BF16 biases of this rank's own tokens.
    pub bias: [Option<&'a [bf16]>; 2],
}

/// What combine returns on one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Combined {
    /// `[tokens][hidden]`.
    pub x: Vec<bf16>,
    /// `[tokens][topk]`, when weights were given.
    pub topk_weights: Option<Vec<f32>>,
}

/// The combine of every rank's `inputs` with the handles `received` of the dispatch before.
///
/// Token t of rank s: in f32, `acc = 0`, then `acc += bias0[t][h]`, `acc += bias1[t][h]` (each
/// when given), then `acc += x_r[row]` for every rank r that received t, in increasing r; the
/// sum is rounded to BF16 (nearest, ties to even). Weights sum the same way from 0 without bias.
pub fn combine(received: &[Received], inputs: &[CombineInput<'_>], hidden: usize, topk: usize) -> Vec<Combined> {
    let ranks = received.len();
    (0..ranks)
        .map(|s| {
            let tokens = received[s].send_head.len() / ranks;
            let with_weights = inputs.iter().all(|i| i.topk_weights.is_some());
            let mut x = vec![bf16::ZERO; tokens * hidden];
            let mut weights = with_weights.then(|| vec![0f32; tokens * topk]);
            for t in 0..tokens {
                let rows: Vec<(usize, usize)> = (0..ranks)
                    .filter_map(|r| {
                        let slot = usize::try_from(received[s].send_head[t * ranks + r]).ok()?;
                        let before = if s == 0 { 0 } else { received[r].rank_prefix_matrix[(s - 1) * ranks + r] };
                        Some((r, before as usize + slot))
                    })
                    .collect();
                for h in 0..hidden {
                    let mut acc = 0f32;
                    for bias in inputs[s].bias.iter().flatten() {
                        acc += bias[t * hidden + h].to_f32();
                    }
                    for &(r, row) in &rows {
                        acc += inputs[r].x[row * hidden + h].to_f32();
                    }
                    x[t * hidden + h] = bf16::from_f32(acc);
                }
                if let Some(w) = weights.as_mut() {
                    for k in 0..topk {
                        let mut acc = 0f32;
                        for &(r, row) in &rows {
                            acc += inputs[r].topk_weights.map_or(0.0, |tw| tw[row * topk + k]);
                        }
                        w[t * topk + k] = acc;
                    }
                }
            }
            Combined { x, topk_weights: weights }
        })
        .collect()
}
