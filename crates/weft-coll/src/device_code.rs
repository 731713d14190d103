//! The collective kernels (`device/kernels/coll/`), embedded here, in the crate that launches
//! them: one file per algorithm family, each compiled as part of one of two translation units.
//! `reductions.cu` includes every reducing algorithm and is compiled once per (element type,
//! operator); `movement.cu` includes the algorithms that only move bytes and is compiled once.
//! One unit per module keeps one NVRTC compilation and one cache entry per (type, operator),
//! and every kernel of an algorithm is found in the module its unit compiles to. Both units
//! include `weft/generated/kernels/coll.cuh`, the prototypes generated from the kernels'
//! declared parameter lists (`crate::params`), so NVRTC checks every definition against them.

use weft_core::device_code::{KernelSet, compiled_once, type_variants};
use weft_types::ReduceOp;

/// The translation unit of the reducing collectives.
pub const REDUCTIONS: &str = "reductions.cu";
/// The translation unit of the collectives that only move bytes.
pub const MOVEMENT: &str = "movement.cu";

/// Every collective kernel source: the two units and the algorithm files and shared headers
/// they include.
pub const KERNELS: KernelSet = KernelSet {
    dir: "device/kernels/coll",
    units: &[
        (REDUCTIONS, include_str!("../../../device/kernels/coll/reductions.cu")),
        (MOVEMENT, include_str!("../../../device/kernels/coll/movement.cu")),
    ],
    includes: &[
        ("common.cuh", include_str!("../../../device/kernels/coll/common.cuh")),
        ("reducing.cuh", include_str!("../../../device/kernels/coll/reducing.cuh")),
        ("two_shot_hb.cuh", include_str!("../../../device/kernels/coll/two_shot_hb.cuh")),
        ("port_grid.cuh", include_str!("../../../device/kernels/coll/port_grid.cuh")),
        ("put_groups.cuh", include_str!("../../../device/kernels/coll/put_groups.cuh")),
        ("chain_geometry.cuh", include_str!("../../../device/kernels/coll/chain_geometry.cuh")),
        ("chain.cuh", include_str!("../../../device/kernels/coll/chain.cuh")),
        ("ll128_geometry.cuh", include_str!("../../../device/kernels/coll/ll128_geometry.cuh")),
        ("ll128.cuh", include_str!("../../../device/kernels/coll/ll128.cuh")),
        ("allreduce_ll.cu", include_str!("../../../device/kernels/coll/allreduce_ll.cu")),
        ("allreduce_hb.cu", include_str!("../../../device/kernels/coll/allreduce_hb.cu")),
        ("ring.cu", include_str!("../../../device/kernels/coll/ring.cu")),
        ("port_ring.cu", include_str!("../../../device/kernels/coll/port_ring.cu")),
        ("port_allpairs.cu", include_str!("../../../device/kernels/coll/port_allpairs.cu")),
        ("nvrar.cu", include_str!("../../../device/kernels/coll/nvrar.cu")),
        ("two_phase.cu", include_str!("../../../device/kernels/coll/two_phase.cu")),
        ("reduce_scatter.cu", include_str!("../../../device/kernels/coll/reduce_scatter.cu")),
        ("reduce.cu", include_str!("../../../device/kernels/coll/reduce.cu")),
        ("allgather.cu", include_str!("../../../device/kernels/coll/allgather.cu")),
        ("broadcast.cu", include_str!("../../../device/kernels/coll/broadcast.cu")),
        ("p2p.cu", include_str!("../../../device/kernels/coll/p2p.cu")),
    ],
    variants,
    signatures: crate::params::signatures,
    prototypes: "weft/generated/kernels/coll.cuh",
};

/// The reducing unit once per (element type, operator), every operator included; the movement
/// unit once.
fn variants(name: &str) -> Vec<Vec<String>> {
    match name {
        REDUCTIONS => type_variants(&ReduceOp::ALL),
        _ => compiled_once(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_collective_source_in_the_tree_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert_eq!(KERNELS.files_on_disk(&root).unwrap(), KERNELS.embedded_files());
    }

    #[test]
    fn the_collective_kernels_match_their_declarations() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert_eq!(KERNELS.prototype_problems(&root), Vec::<String>::new());
    }

    #[test]
    fn every_algorithm_file_is_included_by_one_unit() {
        for (file, _) in KERNELS.includes.iter().filter(|(n, _)| n.ends_with(".cu")) {
            let directive = format!("#include \"{file}\"");
            let including = KERNELS.units.iter().filter(|(_, text)| text.contains(&directive)).count();
            assert_eq!(including, 1, "{file} is included by {including} units");
        }
    }

    #[test]
    fn every_kernel_of_an_algorithm_lies_in_the_unit_it_is_loaded_from() {
        use crate::algorithm::Algorithm;
        for algorithm in Algorithm::ALL {
            let unit = if algorithm.reduces() { REDUCTIONS } else { MOVEMENT };
            let definition = format!(" {}(", algorithm.kernel());
            let holders: Vec<&str> = KERNELS
                .includes
                .iter()
                .filter(|(_, text)| text.contains("extern \"C\"") && text.contains(&definition))
                .map(|(n, _)| *n)
                .collect();
            assert_eq!(holders.len(), 1, "{} is defined in {holders:?}", algorithm.kernel());
            let (_, unit_text) = KERNELS.units.iter().find(|(n, _)| *n == unit).unwrap();
            assert!(unit_text.contains(&format!("#include \"{}\"", holders[0])), "{unit} lacks {}", holders[0]);
        }
    }

    /// An early launch (`CollConfig::early_launch`) is sound only for a kernel whose blocks all
    /// wait for the previous grid before anything else: every LL kernel must begin with
    /// `ll_round_begin` (`ll128_round_begin` for LL128 lines), and every send/receive LL kernel
    /// with `ll_launch_begin`, each of which waits first.
    #[test]
    fn every_early_launched_kernel_begins_by_waiting_for_the_previous_grid() {
        use crate::algorithm::{Algorithm, Protocol};
        let header = include_str!("../../../device/include/weft/collective.cuh");
        let ll128 = include_str!("../../../device/kernels/coll/ll128.cuh");
        let body_of = |text: &'static str, function: &str| {
            let at = text.find(&format!("{function}(")).unwrap_or_else(|| panic!("{function} is defined"));
            let from = &text[at..];
            from[from.find('{').unwrap() + 1..].trim_start()
        };
        let waits = body_of(header, "void ll_launch_begin").starts_with("ptx::grid_dependency_wait();");
        assert!(waits, "ll_launch_begin waits");
        assert!(body_of(header, "bool ll_round_begin").starts_with("ll_launch_begin();"), "ll_round_begin waits first");
        let waits = body_of(ll128, "bool ll128_round_begin").starts_with("ll_launch_begin();");
        assert!(waits, "ll128_round_begin waits first");
        // LL128 rounds wait for every block's token of every peer (the kernels number a
        // region's lines differently); LL16 rounds for their own block's, which is enough only
        // because every LL16 kernel deals its packets by position (checked below).
        let whole = |text: &'static str, function: &str| {
            let body = body_of(text, function);
            &body[..body.find("\n}\n").expect("the function ends")]
        };
        assert!(whole(ll128, "bool ll128_round_take").contains("ll_wait_every_token("), "LL128 waits for every block");
        for function in ["bool ll128_round_begin", "bool ll128_round_next"] {
            assert!(whole(ll128, function).contains("ll128_round_take("), "{function} takes its round by waiting");
        }
        // Within a launch, a chain round waits for the same block of each peer only: no block
        // waits for another block of its own launch.
        assert!(
            whole(ll128, "bool ll128_round_next").contains("LlOwnToken own(c, ll128_lane(c))"),
            "rounds 2+ wait for their block, on its LL128 lane"
        );
        assert!(
            whole(header, "bool ll_round_begin").contains("LlOwnToken own(c, blockIdx.x)"),
            "LL16 waits for its block"
        );
        // Each kind of launch takes its flag from, and ends on, its own lanes: an LL128 launch's
        // grid differs from the LL16 one, so sharing flags would put them out of step.
        assert!(whole(ll128, "bool ll128_round_begin").contains("+ ll128_lane(c)"), "LL128 flags are its lanes'");
        assert!(whole(header, "bool ll_round_begin").contains("c.flags) + blockIdx.x"), "LL16 flags are its blocks'");
        assert!(body_of(ll128, "void ll128_round_end").starts_with("ll_round_end_on(c, round, ll128_lane(c));"));
        assert!(!whole(header, "bool ll_round_begin").contains("every_token"), "LL16 waits for its own block");
        // The statements a kernel begins with; the trace scope (empty untraced) only touches
        // the block's shared memory first.
        let first_statements = |algorithm: Algorithm, n: usize| -> Vec<String> {
            let definition = format!(" {}(", algorithm.kernel());
            let (_, text) = KERNELS.includes.iter().find(|(_, t)| t.contains(&definition)).unwrap();
            let kernel = &text[text.find(&definition).unwrap()..];
            let statements = &kernel[kernel.find('{').unwrap() + 1..];
            statements
                .split(';')
                .map(str::trim)
                .filter(|s| !s.starts_with("WEFT_TRACE_"))
                .take(n)
                .map(String::from)
                .collect()
        };
        let kernel_body = |algorithm: Algorithm| -> &'static str {
            let definition = format!(" {}(", algorithm.kernel());
            let (_, text) = KERNELS.includes.iter().find(|(_, t)| t.contains(&definition)).unwrap();
            let kernel = &text[text.find(&definition).unwrap()..];
            &kernel[..kernel.find("\n}\n").expect("the kernel ends")]
        };
        let early = |a: &Algorithm| matches!(a.protocol(), Protocol::Ll | Protocol::LlP2p);
        for algorithm in Algorithm::ALL.into_iter().filter(early) {
            let first = first_statements(algorithm, 2);
            if algorithm.protocol() == Protocol::Ll {
                assert_eq!(first[0], "LlRound round", "{}", algorithm.kernel());
                if !algorithm.is_ll128() {
                    let body = kernel_body(algorithm);
                    let deals =
                        body.contains("LlDeal::of_block(") && !body.contains("LlDeal{") && !body.contains("LlDeal {");
                    assert!(deals, "{} deals its packets by position (LlDeal::of_block)", algorithm.kernel());
                }
                let begin = if algorithm.is_ll128() {
                    "if (!ll128_round_begin(c, round"
                } else {
                    "if (!ll_round_begin(c, round"
                };
                let begins = first[1].starts_with(begin) && first[1].ends_with(")) return");
                assert!(begins, "{}: {}", algorithm.kernel(), first[1]);
                // A launch ends on the lanes it began on: LL128 on its own (or down the
                // chain, which ends each round on them), LL16 on its blocks'.
                let body = kernel_body(algorithm);
                let ends_ll16 = body.contains(" ll_round_end(c, round)");
                let ends_ll128 = body.contains("ll128_round_end(c, round)") || body.contains("ll128_chain");
                let ends_right = if algorithm.is_ll128() { ends_ll128 && !ends_ll16 } else { ends_ll16 && !ends_ll128 };
                assert!(ends_right, "{} ends its round on its own kind of lane", algorithm.kernel());
            } else {
                assert_eq!(first[0], "ll_launch_begin()", "{}", algorithm.kernel());
            }
        }
    }

    /// A trace scope names the kernel it opens (a copied scope would file a kernel's spans
    /// under another's name).
    #[test]
    fn every_trace_scope_names_its_kernel() {
        for (file, text) in KERNELS.units.iter().chain(KERNELS.includes) {
            assert_eq!(weft_core::trace::scope_mismatches(text), Vec::<String>::new(), "{file}");
        }
    }
}
