//! `get_dispatch_layout`: which ranks and experts each token goes to.

/// What `get_dispatch_layout` returns for one rank's `topk_idx`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `[ranks]`: tokens sent to each rank, a token counted once per rank however many of its
    /// experts that rank holds.
    pub tokens_per_rank: Vec<i32>,
    /// `[experts]`: top-k entries naming each expert.
    pub tokens_per_expert: Vec<i32>,
    /// `[tokens][ranks]`: whether a token goes to a rank.
    pub token_in_rank: Vec<bool>,
}

/// The layout of `topk_idx` (`[tokens][topk]`, a negative entry selects nothing) over `experts`
/// experts split evenly, in order, over `ranks` ranks.
pub fn dispatch_layout(topk_idx: &[i64], topk: usize, experts: usize, ranks: usize) -> Layout {
    let tokens = topk_idx.len().checked_div(topk).unwrap_or(0);
    let per_rank = experts / ranks;
    let mut layout = Layout {
        tokens_per_rank: vec![0; ranks],
        tokens_per_expert: vec![0; experts],
        token_in_rank: vec![false; tokens * ranks],
    };
    for t in 0..tokens {
        for &e in &topk_idx[t * topk..(t + 1) * topk] {
            let Ok(e) = usize::try_from(e) else { continue };
            layout.tokens_per_expert[e] += 1;
            layout.token_in_rank[t * ranks + e / per_rank] = true;
        }
        for r in 0..ranks {
            layout.tokens_per_rank[r] += i32::from(layout.token_in_rank[t * ranks + r]);
        }
    }
    layout
}
