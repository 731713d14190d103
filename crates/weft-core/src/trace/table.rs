//! The phases a kernel marks and the kernels that are traced: declared once here, generated
//! into `device/include/weft/generated/trace.cuh` (see [`super::header`]) for the device, and
//! read back by the trace writer (see [`super::chrome`]) to name the records.

/// One phase boundary a kernel marks with `WEFT_TRACE_MARK(name)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phase {
    /// The name, in the device macro (`WEFT_TRACE_MARK(ll_begin)`) and in the trace.
    pub name: &'static str,
    /// What has just finished when a warp records it.
    pub meaning: &'static str,
}

/// Every phase, indexed by its id: the id a record carries is the index here.
/// `entry` and `exit` are recorded by the kernel's `WEFT_TRACE_SCOPE`, never marked.
pub const PHASES: &[Phase] = &[
    Phase { name: "entry", meaning: "the block entered the kernel (after its first barrier)" },
    Phase { name: "exit", meaning: "the block's last warp left the kernel (any return)" },
    Phase {
        name: "ll_begin",
        meaning: "LL round begun: the previous grid waited for, the flag taken, every reader's token of the launch before last seen",
    },
    Phase { name: "ll_puts", meaning: "this block's LL packets stored into the peers" },
    Phase { name: "ll_reduce", meaning: "the peers' LL packets received and folded (or copied) into the output" },
    Phase {
        name: "ll_gets",
        meaning: "the peers' LL packets received into the output (all-gather, send/receive, the second half of a two-shot)",
    },
    Phase { name: "barrier", meaning: "an HB barrier with the same block of every peer passed" },
    Phase { name: "push", meaning: "this block's shards of the round pushed into their owners" },
    Phase { name: "reduce", meaning: "this block's share of the owned shard reduced and stored" },
    Phase { name: "copy", meaning: "results copied out (or this block's share of a copy done)" },
    Phase { name: "send", meaning: "EP: the warp's messages stored into the peers" },
    Phase { name: "finish", meaning: "EP: the block arrived at the launch's end (finish_phase)" },
    Phase { name: "publish", meaning: "EP: the launch's last block published the counts or flags" },
    Phase { name: "wait", meaning: "EP: the signals the warp waits for seen" },
    Phase { name: "grid_wait", meaning: "EP low latency: the previous grid on the stream waited for" },
    Phase { name: "route", meaning: "EP low-latency dispatch: the block's first window of tokens routed" },
    Phase {
        name: "reduce_scatter",
        meaning: "NVRAR, 2PH: the node's pieces of this rank's shard folded (this block's range)",
    },
    Phase { name: "across_nodes", meaning: "NVRAR, 2PH: the steps across nodes done (this block's range)" },
    Phase { name: "all_gather", meaning: "NVRAR, 2PH: the node's finished shards in the output (this block's range)" },
];

/// Every kernel with a `WEFT_TRACE_SCOPE`, indexed by its id (the index here). A kernel's scope
/// names it (`WEFT_TRACE_SCOPE(weft_allreduce_ll)`); a name missing here fails the traced
/// compile.
pub const KERNELS: &[&str] = &[
    "weft_allreduce_ll",
    "weft_allreduce_ll2",
    "weft_allreduce_hb",
    "weft_allreduce_hb_direct",
    "weft_reduce_scatter_ll",
    "weft_reduce_scatter_hb",
    "weft_reduce_ll",
    "weft_reduce_hb",
    "weft_allgather_ll",
    "weft_allgather_hb",
    "weft_broadcast_ll",
    "weft_broadcast_hb",
    "weft_allreduce_ring",
    "weft_allreduce_nvrar",
    "weft_p2p",
    "weft_ep_dispatch",
    "weft_ep_combine",
    "weft_ep_ll_dispatch_send",
    "weft_ep_ll_dispatch_recv",
    "weft_ep_ll_combine_send",
    "weft_ep_ll_combine_recv",
    "weft_p2p_ll",
    "weft_broadcast_chain",
    "weft_reduce_chain",
    "weft_broadcast_ll128",
    "weft_reduce_ll128",
    "weft_allreduce_ll128",
    "weft_allgather_ll128",
    "weft_reduce_scatter_ll128",
    "weft_reduce_direct",
    "weft_reduce_scatter_direct",
    "weft_ep_ll_dispatch_send_net",
    "weft_ep_ll_dispatch_recv_net",
    "weft_ep_ll_combine_send_net",
    "weft_ep_ll_combine_recv_net",
    "weft_allreduce_2ph",
];

/// The name of phase `id`, `phase<id>` past the table.
pub fn phase_name(id: u16) -> String {
    PHASES.get(usize::from(id)).map_or_else(|| format!("phase{id}"), |p| p.name.to_string())
}

/// The name of kernel `id`, `kernel<id>` past the table.
pub fn kernel_name(id: u16) -> String {
    KERNELS.get(usize::from(id)).map_or_else(|| format!("kernel{id}"), |k| (*k).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_identifiers_and_fit_their_fields() {
        for names in [PHASES.iter().map(|p| p.name).collect::<Vec<_>>(), KERNELS.to_vec()] {
            let unique: std::collections::HashSet<_> = names.iter().collect();
            assert_eq!(unique.len(), names.len(), "{names:?}");
            for name in &names {
                assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{name}");
            }
        }
        // Phases share a byte with the warp in a block's log (header.rs: the tag).
        assert!(PHASES.len() <= 256);
        assert!(KERNELS.len() <= usize::from(u16::MAX));
        assert_eq!((PHASES[0].name, PHASES[1].name), ("entry", "exit"));
        assert_eq!(phase_name(2), "ll_begin");
        assert_eq!(phase_name(999), "phase999");
        assert_eq!(kernel_name(0), "weft_allreduce_ll");
    }
}
