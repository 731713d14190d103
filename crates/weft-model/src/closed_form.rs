//! The α-β time of every algorithm in closed form.
//!
//! Notation: N nodes of G GPUs, p = N·G ranks, m bytes per rank; α_l, β_l of NVLink and α_n, β_n
//! of a NIC ([`Params`]); η the LL payload factor. A NIC per GPU, no proxy cost, no contention
//! beyond what each formula states. Sources: "Understanding and Improving Communication
//! Performance in Multi-node LLM Inference" (Singhania et al., CAIS '26; NVRAR), equations
//! (1)–(6); Thakur and Gropp, "Optimization of Collective Communication Operations in MPICH"
//! (2005) for recursive doubling and its fix-up.

use crate::params::message_us;
use crate::{Algorithm, Params, Shape};

/// The formula [`time_us`] evaluates for `algorithm`, with its source.
pub fn formula(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::Ring => {
            "2(p-1)·max(α_P + m/(pβ_n), α_l + m/(pβ_l)), over the kinds of edge the ring has: every step \
             waits for its slowest edge (NVRAR paper eq. 1, which keeps the network's); α_P is a \
             PortChannel step's α across the network"
        }
        Algorithm::NcclRing => {
            "2(p-1)·max(α_n + m/(pβ_n), α_l + m/(pβ_l)), over the kinds of edge the ring has: every step \
             waits for its slowest edge (NVRAR paper eq. 1, which keeps the network's)"
        }
        Algorithm::AllPairs => {
            "max(α_l + (G-1)m/β_l, α_P + (N-1)G·m/β_n): every rank's messages share its NVLink and \
             its NIC (rounds::port_allpairs_us); α_P is a PortChannel step's α across the network"
        }
        Algorithm::TwoPhase => "2(G-1)(α_l + m/(Gβ_l)) + α_n + (N-1)(m/G)/β_n (intranode ring RS and AG, eq. 3 and 5)",
        Algorithm::TwoPhaseRing => "2(G-1)(α_l + m/(Gβ_l)) + 2(N-1)(α_n + m/(GNβ_n))",
        Algorithm::Nvrar => {
            "2(G-1)(α_l + m/(Gβ_l)) + s(α_n + η·m/(Gβ_n)), s = log2 N, or ⌊log2 N⌋ + 2 when N is not a \
             power of two (eq. 6 with the full shard exchanged each step; eq. 4's (N-1)/N is recursive \
             halving's)"
        }
        Algorithm::NcclTree => "2(G-1)α_l + 2·log2(N)·α_n + 2(N-1)/N·m/β_n (NVRAR paper eq. 2)",
    }
}

/// The closed-form time, in µs, of `algorithm` reducing `bytes` per rank on `shape`.
pub fn time_us(algorithm: Algorithm, shape: Shape, bytes: f64, params: &Params) -> f64 {
    let (n, g, p) = (shape.nodes() as f64, shape.gpus_per_node() as f64, shape.ranks() as f64);
    let (nvlink, net) = (&params.nvlink, &params.net);
    // What weft's PortChannel algorithms (Ring, AllPairs) pay per step across the network.
    let port = params.port_link();
    // The intranode ring reduce-scatter (and, the same, all-gather) of m over G GPUs.
    let intranode_ring = (g - 1.0) * message_us(nvlink, bytes / g);
    let shard = bytes / g;
    match algorithm {
        Algorithm::Ring | Algorithm::NcclRing => {
            let piece = bytes / p;
            let net = if algorithm == Algorithm::Ring { &port } else { net };
            let crossing = if shape.nodes() > 1 { message_us(net, piece) } else { 0.0 };
            let within = if shape.gpus_per_node() > 1 { message_us(nvlink, piece) } else { 0.0 };
            2.0 * (p - 1.0) * crossing.max(within)
        }
        Algorithm::AllPairs => {
            let within = if shape.gpus_per_node() > 1 { message_us(nvlink, (g - 1.0) * bytes) } else { 0.0 };
            let across = if shape.nodes() > 1 { message_us(&port, (n - 1.0) * g * bytes) } else { 0.0 };
            within.max(across)
        }
        Algorithm::TwoPhase => {
            let across = if shape.nodes() > 1 { message_us(net, (n - 1.0) * shard) } else { 0.0 };
            2.0 * intranode_ring + across
        }
        Algorithm::TwoPhaseRing => 2.0 * intranode_ring + 2.0 * (n - 1.0) * message_us(net, shard / n),
        Algorithm::Nvrar => {
            2.0 * intranode_ring
                + recursive_doubling_steps(shape.nodes()) as f64 * message_us(net, params.ll_factor * shard)
        }
        Algorithm::NcclTree => {
            let alpha_l = crate::params::alpha_us(nvlink);
            let alpha_n = crate::params::alpha_us(net);
            2.0 * (g - 1.0) * alpha_l
                + 2.0 * n.log2() * alpha_n
                + 2.0 * (n - 1.0) / n * bytes * crate::params::us_per_byte(net)
        }
    }
}

/// Steps of recursive doubling among `k` members: log2 k for a power of two, ⌊log2 k⌋ + 2
/// otherwise (the fix-up's fold-in and hand-back).
pub fn recursive_doubling_steps(k: usize) -> usize {
    match k {
        0 | 1 => 0,
        k if k.is_power_of_two() => k.ilog2() as usize,
        k => k.ilog2() as usize + 2,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;
    use weft_core::LinkModel;

    fn params() -> Params {
        Params::new(LinkModel::new(0.5, Some(400.0)), LinkModel::new(2.0, Some(50.0)))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn ring_is_two_p_minus_one_steps_of_alpha_plus_a_pth_over_beta() {
        // One GPU per node: p = N, every edge crosses the network; α = 2 µs, β = 50 000 B/µs.
        for nodes in [2, 3, 8, 32] {
            let shape = Shape::new(nodes, 1).unwrap();
            let m = 1_048_576.0;
            let p = nodes as f64;
            let expected = 2.0 * (p - 1.0) * (2.0 + m / p / 50_000.0);
            assert!(close(time_us(Algorithm::Ring, shape, m, &params()), expected));
        }
        // One node: the ring runs on NVLink.
        let one = Shape::new(1, 8).unwrap();
        assert!(close(time_us(Algorithm::Ring, one, 8e6, &params()), 14.0 * (0.5 + 1e6 / 400_000.0)));
    }

    #[test]
    fn only_weft_s_port_algorithms_pay_the_port_channel_alpha() {
        let shape = Shape::new(4, 1).unwrap();
        let m = 1_048_576.0;
        let slow_port = Params { port_alpha_us: Some(30.0), ..params() };
        // Ring: 6 steps, each 28 µs longer; all-pairs: one step.
        let ring = time_us(Algorithm::Ring, shape, m, &slow_port) - time_us(Algorithm::Ring, shape, m, &params());
        assert!(close(ring, 6.0 * 28.0), "{ring}");
        let pairs =
            time_us(Algorithm::AllPairs, shape, m, &slow_port) - time_us(Algorithm::AllPairs, shape, m, &params());
        assert!(close(pairs, 28.0), "{pairs}");
        for algorithm in [Algorithm::NcclRing, Algorithm::Nvrar, Algorithm::TwoPhase, Algorithm::NcclTree] {
            assert_eq!(time_us(algorithm, shape, m, &slow_port), time_us(algorithm, shape, m, &params()));
        }
    }

    #[test]
    fn recursive_doubling_is_log2_p_exchanges_plus_two_for_the_fix_up() {
        let g1 = |n| Shape::new(n, 1).unwrap();
        let mut p = params();
        p.ll_factor = 1.0;
        let m = 65_536.0;
        let step = 2.0 + m / 50_000.0;
        for (nodes, steps) in [(2, 1.0), (4, 2.0), (32, 5.0), (3, 3.0), (5, 4.0), (6, 4.0), (31, 6.0), (33, 7.0)] {
            assert!(close(time_us(Algorithm::Nvrar, g1(nodes), m, &p), steps * step), "{nodes} nodes");
        }
    }

    #[test]
    fn every_closed_form_grows_with_the_size() {
        for algorithm in Algorithm::ALL {
            for (nodes, gpus) in [(1, 4), (2, 1), (5, 4), (32, 4)] {
                if algorithm == Algorithm::NcclTree && nodes == 1 {
                    continue; // eq. 2 keeps the network's bandwidth term only: flat on one node
                }
                let shape = Shape::new(nodes, gpus).unwrap();
                let times: Vec<f64> =
                    (10..28).map(|e| time_us(algorithm, shape, (1u64 << e) as f64, &params())).collect();
                assert!(times.windows(2).all(|w| w[1] >= w[0]), "{} on {nodes} x {gpus}: {times:?}", algorithm.name());
                assert!(times.windows(2).any(|w| w[1] > w[0]), "{} on {nodes} x {gpus}", algorithm.name());
            }
        }
    }
}
