//! The EP kernels (`device/kernels/ep/`), embedded here, in the crate that launches them: one
//! translation unit, `ep.cu`, includes every file and is compiled once into one module, with
//! the prototypes generated from the kernels' declared parameter lists (`crate::launch`).

use weft_core::device_code::{KernelSet, compiled_once};

/// The translation unit of every EP kernel.
pub const UNIT: &str = "ep.cu";

/// Every EP kernel source.
pub const KERNELS: KernelSet = KernelSet {
    dir: "device/kernels/ep",
    units: &[(UNIT, include_str!("../../../device/kernels/ep/ep.cu"))],
    includes: &[
        ("common.cuh", include_str!("../../../device/kernels/ep/common.cuh")),
        ("layout.cu", include_str!("../../../device/kernels/ep/layout.cu")),
        ("notify.cu", include_str!("../../../device/kernels/ep/notify.cu")),
        ("dispatch.cu", include_str!("../../../device/kernels/ep/dispatch.cu")),
        ("combine.cu", include_str!("../../../device/kernels/ep/combine.cu")),
        ("sum_rows.cuh", include_str!("../../../device/kernels/ep/sum_rows.cuh")),
        ("rail_arrival.cuh", include_str!("../../../device/kernels/ep/rail_arrival.cuh")),
        ("low_latency.cuh", include_str!("../../../device/kernels/ep/low_latency.cuh")),
        ("ll_dispatch.cu", include_str!("../../../device/kernels/ep/ll_dispatch.cu")),
        ("ll_combine.cu", include_str!("../../../device/kernels/ep/ll_combine.cu")),
        ("rail.cu", include_str!("../../../device/kernels/ep/rail.cu")),
    ],
    variants: compiled_once,
    signatures: crate::launch::signatures,
    prototypes: "weft/generated/kernels/ep.cuh",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ep_source_in_the_tree_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert_eq!(KERNELS.files_on_disk(&root).unwrap(), KERNELS.embedded_files());
    }

    #[test]
    fn the_ep_kernels_match_their_declarations() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert_eq!(KERNELS.prototype_problems(&root), Vec::<String>::new());
    }

    #[test]
    fn the_low_latency_kernels_bounds_match_the_host_checks() {
        let source = include_str!("../../../device/kernels/ep/low_latency.cuh");
        let experts = format!("constexpr uint32_t kLlMaxExperts = {};", crate::region::LL_MAX_EXPERTS);
        let topk = format!("constexpr uint32_t kMaxTopk = {};", crate::raw::MAX_TOPK);
        assert!(source.contains(&experts), "low_latency.cuh lacks `{experts}`");
        assert!(source.contains(&topk), "low_latency.cuh lacks `{topk}`");
    }

    #[test]
    fn the_rail_kernels_constants_match_the_host() {
        use crate::launch::{
            RAIL_AWAIT, RAIL_COMBINE, RAIL_COMBINE_PUTS, RAIL_COMBINE_SIGNAL, RAIL_DISPATCH_PUTS, RAIL_DISPATCH_SIGNAL,
            RAIL_FLUSH, RAIL_PUT,
        };
        let source = include_str!("../../../device/kernels/ep/rail.cu");
        for line in [
            format!(
                "constexpr uint32_t kRailDispatchPuts = {RAIL_DISPATCH_PUTS}, kRailCombinePuts = {RAIL_COMBINE_PUTS};"
            ),
            format!(
                "constexpr uint32_t kRailDispatchSignal = {RAIL_DISPATCH_SIGNAL}, kRailCombineSignal = {RAIL_COMBINE_SIGNAL};"
            ),
            format!("constexpr uint32_t kRailCombine = {RAIL_COMBINE};"),
            format!("constexpr uint32_t kRailPut = {RAIL_PUT};"),
            format!("constexpr uint32_t kRailAwait = {RAIL_AWAIT};"),
            format!("constexpr uint32_t kRailFlush = {RAIL_FLUSH};"),
        ] {
            assert!(source.contains(&line), "rail.cu lacks `{line}`");
        }
    }

    /// The low-latency kernels may be launched early (programmatic dependents): that is sound
    /// only if each waits for the previous grid before anything else.
    #[test]
    fn every_low_latency_kernel_begins_by_waiting_for_the_previous_grid() {
        let header = include_str!("../../../device/kernels/ep/low_latency.cuh");
        let begin = &header[header.find("void ll_kernel_begin() {").expect("ll_kernel_begin is defined")..];
        assert!(begin["void ll_kernel_begin() {".len()..].trim_start().starts_with("ptx::grid_dependency_wait();"));
        let kernels = crate::launch::signatures().into_iter().flat_map(|s| s.kernels.iter().copied());
        let low_latency: Vec<&str> = kernels.filter(|k| k.starts_with("weft_ep_ll_")).collect();
        assert_eq!(low_latency.len(), 8, "{low_latency:?}");
        for name in low_latency {
            let definition = format!(" {name}(");
            let (_, text) = KERNELS.includes.iter().find(|(_, t)| t.contains(&definition)).unwrap();
            let body = &text[text.find(&definition).unwrap()..];
            let statements = &body[body.find('{').unwrap() + 1..];
            // The trace scope (empty untraced) only touches the block's shared memory first.
            let first = statements.split(';').map(str::trim).find(|s| !s.starts_with("WEFT_TRACE_")).unwrap();
            assert_eq!(first, "ll_kernel_begin()", "{name}");
        }
    }

    #[test]
    fn every_ep_kernel_compiles_for_sm_90() {
        let Some(library) = weft_core::device_code::nvrtc_test_library(&KERNELS).unwrap() else { return };
        assert_eq!(library.compile_every_variant("sm_90").unwrap(), 1);
    }

    #[test]
    fn the_traced_ep_kernels_compile_for_sm_90_and_their_marks_compile_away_untraced() {
        let Some(library) = weft_core::device_code::nvrtc_test_library(&KERNELS).unwrap() else { return };
        let traced = [weft_core::trace::TRACE_DEFINE.to_string()];
        assert_eq!(library.compile_every_variant_with("sm_90", &traced).unwrap(), 1);
        assert_eq!(library.check_marks_compile_away("sm_90").unwrap(), 1);
        // The host finds the ring by this name (cuModuleGetGlobal); untraced it is absent.
        let has_ring = |defines: &[String]| {
            let cubin = library.compile_with(UNIT, "sm_90", defines).unwrap().cubin;
            let name = weft_core::trace::RING_GLOBAL.as_bytes();
            cubin.windows(name.len()).any(|w| w == name)
        };
        assert!(has_ring(&traced));
        assert!(!has_ring(&[]));
    }

    /// The dispatch and combine kernels move every byte of a token through registers; a
    /// run-time-indexed array or spill would put local memory on that path. The low-latency send
    /// kernels for a group spanning nodes make the puts to other nodes (`ll_put_dispatch`,
    /// `ll_put_combine`, one thread per such rank after every copy), which keep a `weft::Gin` in
    /// the frame: its handle and the connections it has pending per rank, 400 bytes, off the
    /// byte path; so does the rail hop's exchange between nodes (one thread per node, no
    /// payload through registers). Nothing else may, the one-node kernels included (they hold
    /// no network path).
    #[test]
    fn the_ep_kernels_use_no_local_memory() {
        let Some(library) = weft_core::device_code::nvrtc_test_library(&KERNELS).unwrap() else { return };
        let kernels = library.resources(UNIT, "sm_90", &[]).unwrap();
        let names: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).collect();
        for signature in crate::launch::signatures() {
            for name in signature.kernels {
                assert!(names.contains(name), "{name} missing from {names:?}");
            }
        }
        for k in &kernels {
            let puts_between_nodes = (k.name.starts_with("weft_ep_ll_") && k.name.ends_with("_send_net"))
                || k.name == "weft_ep_rail_exchange";
            let frame = if puts_between_nodes { 400 } else { 0 };
            assert!(k.stack_frame_bytes <= frame && k.spill_store_bytes == 0, "{}: {k:?}", k.name);
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
