//! Launch shapes, buffer sizes and the algorithm selector: built-in defaults, an optional
//! tuning table (`WEFT_TUNING_FILE`, written by `weft tune`) and per-collective overrides
//! (`WEFT_ALGO_<COLLECTIVE>`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use weft_core::env::{Variable, vars};
use weft_types::{DataType, ReduceOp};

use crate::algorithm::{Algorithm, Collective, CollectiveAlgorithms};

/// Most worker blocks of a `port_ring` or `port_allpairs` launch (the launch has one more, its
/// driver).
pub(crate) const MAX_PORT_RING_BLOCKS: u32 = 64;

/// Largest `p2p_ll_bytes` (`WEFT_P2P_LL_BYTES`), as `WEFT_LL_SLOT_BYTES`'s limit.
const MAX_P2P_LL_BYTES: usize = 16 << 20;

/// Largest AllReduce across nodes that goes all pairs (`port_allpairs`, one network crossing)
/// rather than around the ring (`port_ring`, 2(n - 1) crossings of 1/n of the message).
pub(crate) const ALLPAIRS_ACROSS_NODES_MAX: u64 = 256 << 10;

/// Largest AllReduce across nodes that goes by NVRAR (`nvrar`: one put of LL packets per step,
/// no signal) where the nodes are of equal size: measured fastest up to 64 KB across 2 and 4
/// virtual nodes over the emulated NIC; its LL packets double the bytes, so all pairs wins above
/// (docs/multinode.md).
pub(crate) const NVRAR_ACROSS_NODES_MAX: u64 = 64 << 10;

/// One rule of the selector: messages up to `max_bytes` (the collective's largest buffer per
/// rank, as `weft bench` sizes it; `None`: any size) use `algorithm`, for calls of element type
/// `dtype` on communicators of `ranks` ranks (each `None`: any).
///
/// The rules of one collective with the same filters form a group, by ascending `max_bytes`; a
/// call follows the most specific group that matches it: type and rank count, then rank count
/// alone (switch points move with the ranks' topology), then type alone, then the unfiltered
/// group (the defaults' unless the table gives one). Built-in groups that a table's groups
/// cover give way to them (`Selector::apply`); a built-in rank-count group outranks a table's
/// type-only group, as a table's own would, so that a selector's table reproduces it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// Only calls of this element type (`bf16`, `f32`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// Only communicators of this many ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<usize>,
    /// Only communicators spanning this many (possibly virtual) nodes, at least 2: the rules
    /// that choose among the AllReduces that reach other nodes (`port_allpairs`, `port_ring`,
    /// plans such as `plan:nvrar_allreduce`), which rules without it never name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<usize>,
    /// Upper bound in bytes, inclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// Algorithm name within the collective (`ll`, `ll2`, `hb`, `p2p`).
    pub algorithm: String,
}

impl Rule {
    /// A rule for any type and rank count.
    pub fn any(max_bytes: Option<u64>, algorithm: &str) -> Self {
        Self { dtype: None, ranks: None, nodes: None, max_bytes, algorithm: algorithm.into() }
    }
}

/// The tuning table: per collective name, rules by ascending `max_bytes`. Collectives it does
/// not name keep the defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TuningTable {
    /// Where the numbers were measured (free text, e.g. "4xH200, NCCL 2.28.9").
    #[serde(default)]
    pub machine: String,
    /// Ranks of the communicator it was measured on (a table applied to another rank count
    /// still works, with a warning: the switch points of its rules without a rank count may
    /// not fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<usize>,
    /// HB blocks per launch that measured best (`WEFT_HB_BLOCKS` still wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hb_blocks: Option<u32>,
    /// Rules per collective name.
    pub collectives: BTreeMap<String, Vec<Rule>>,
}

impl TuningTable {
    /// Parses a tuning-table file (JSON, as `weft tune` writes it); [`Selector::apply`] checks
    /// its names and rules.
    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

/// The size rules of one collective for calls of one element type and rank count (`None`:
/// any), by ascending upper bound.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RuleGroup {
    dtype: Option<DataType>,
    ranks: Option<usize>,
    /// `Some(n)`: a group for communicators spanning `n` nodes, consulted only across nodes.
    nodes: Option<usize>,
    sizes: Vec<(u64, Algorithm)>,
    /// One of weft's defaults, not a tuning table's: a table's group replaces the built-in
    /// groups it covers (see [`RuleGroup::covers`]).
    built_in: bool,
}

impl RuleGroup {
    fn any(sizes: Vec<(u64, Algorithm)>) -> Self {
        Self { dtype: None, ranks: None, nodes: None, sizes, built_in: false }
    }

    fn built_in(self) -> Self {
        Self { built_in: true, ..self }
    }

    /// Whether the group serves a call of `dtype` on `ranks` ranks in `nodes` nodes (`None`:
    /// within one node, where groups for a node count never apply).
    fn matches(&self, dtype: DataType, ranks: usize, nodes: Option<usize>) -> bool {
        self.dtype.is_none_or(|t| t == dtype) && self.ranks.is_none_or(|r| r == ranks) && self.nodes == nodes
    }

    /// How narrowly it applies (see [`Rule`]).
    fn specificity(&self) -> u8 {
        2 * u8::from(self.ranks.is_some()) + u8::from(self.dtype.is_some())
    }

    /// Whether every call `other` serves, this group serves too (same node scope, filters
    /// no narrower).
    fn covers(&self, other: &RuleGroup) -> bool {
        self.nodes == other.nodes
            && self.dtype.is_none_or(|t| other.dtype == Some(t))
            && self.ranks.is_none_or(|r| other.ranks == Some(r))
    }

    fn same_filters(&self, other: &RuleGroup) -> bool {
        (self.dtype, self.ranks, self.nodes) == (other.dtype, other.ranks, other.nodes)
    }

    /// The first rule covering `bytes`, else the last (largest) one.
    fn pick(&self, bytes: u64) -> Option<Algorithm> {
        self.sizes.iter().find(|(max, _)| bytes <= *max).or(self.sizes.last()).map(|&(_, a)| a)
    }
}

/// Which algorithm each collective uses at each size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    rules: BTreeMap<Collective, Vec<RuleGroup>>,
    force: BTreeMap<Collective, Algorithm>,
}

impl Default for Selector {
    /// Measured on a 4×H200 machine (docs/perf/collectives.md).
    fn default() -> Self {
        use Algorithm::*;
        let rules = [
            // HB to 256 MiB (zero-copy when captured), the ring above: on 4xH200 the ring
            // measured 0.99x NCCL at 1 GiB against HB's 0.97x, and the same as HB on 2xH200.
            (
                Collective::AllReduce,
                vec![
                    (64 << 10, AllReduceLl),
                    (1 << 20, AllReduceLl2),
                    (256 << 20, AllReduceHb),
                    (u64::MAX, AllReduceRing),
                ],
            ),
            (Collective::AllGather, vec![(1 << 20, AllGatherLl), (u64::MAX, AllGatherHb)]),
            (Collective::ReduceScatter, vec![(1 << 20, ReduceScatterLl), (u64::MAX, ReduceScatterHb)]),
            (Collective::Broadcast, vec![(256 << 10, BroadcastLl), (u64::MAX, BroadcastHb)]),
            (Collective::Reduce, vec![(256 << 10, ReduceLl), (u64::MAX, ReduceHb)]),
            // `ll` (every direction of up to `p2p_ll_bytes` over packets, larger ones through
            // scratch as p2p): on 4×H100, 2.9-3.8 µs against p2p's 8.9-10.4 µs from 1 to 64 KiB
            // at 2, 3 and 4 ranks, every element checked; AllToAll at 256 KiB (64 KiB a
            // direction at 4 ranks) 4.7 against 10.3 µs. Above, p2p.
            (Collective::AllToAll, vec![(256 << 10, AllToAllLl), (u64::MAX, AllToAllP2p)]),
            // Send/receive groups choose at 0 bytes (their directions differ between ranks), so
            // one rule: `ll`, whose directions above `p2p_ll_bytes` go through scratch as p2p.
            (Collective::SendRecv, vec![(u64::MAX, SendRecvLl)]),
        ];
        let mut rules: BTreeMap<_, _> =
            rules.into_iter().map(|(c, sizes)| (c, vec![RuleGroup::any(sizes).built_in()])).collect();
        // Above LL, the chain at 3 and 4 ranks: on 4×H100 faster than HB at every size from
        // 256 KiB to 1 GiB at 2 and 4 ranks (Broadcast 8-43%, Reduce 1.5-48%;
        // docs/perf/collectives.md). A longer chain fills for n - 2 steps, unmeasured: HB there.
        for ranks in 3..=4 {
            for (collective, ll, chain) in
                [(Collective::Broadcast, BroadcastLl, BroadcastChain), (Collective::Reduce, ReduceLl, ReduceChain)]
            {
                let group =
                    RuleGroup { ranks: Some(ranks), ..RuleGroup::any(vec![(256 << 10, ll), (u64::MAX, chain)]) };
                rules.entry(collective).or_default().push(group.built_in());
            }
        }
        // At 2 ranks, where each beat what ran there before, every element checked (2×H200,
        // docs/perf/collectives.md, "2×H200, build of 2026-11-27"): the one-shot LL AllReduce
        // to 256 KiB (4.74 µs there against the two-shot's 6.01: at 2 ranks both move the same
        // bytes each way, and the one-shot has one phase); LL128 lines above LL16 to 1 MiB for
        // AllReduce, AllGather and ReduceScatter (at 512 KiB 3.9-7.7% under), and for Broadcast to
        // 16 MiB and Reduce to 32 MiB in rounds of a half (Broadcast 16 MiB 55.0 µs against the
        // chain's 60.1, 32 MiB 106.9 against 104.5; Reduce 32 MiB 113.0 against 117.2, 64 MiB
        // 224.9 against 215.4). Lines run only where every pair of ranks is NVLink-connected:
        // elsewhere each gives way to the algorithm of its sizes before
        // (`Algorithm::without_ll128`: `ll2`, `ll`, the chain).
        let two_ranks = [
            (
                Collective::AllReduce,
                vec![
                    (256 << 10, AllReduceLl),
                    (1 << 20, AllReduceLl128),
                    (256 << 20, AllReduceHb),
                    (u64::MAX, AllReduceRing),
                ],
            ),
            (Collective::AllGather, vec![(256 << 10, AllGatherLl), (1 << 20, AllGatherLl128), (u64::MAX, AllGatherHb)]),
            (
                Collective::ReduceScatter,
                vec![(256 << 10, ReduceScatterLl), (1 << 20, ReduceScatterLl128), (u64::MAX, ReduceScatterHb)],
            ),
            (
                Collective::Broadcast,
                vec![(256 << 10, BroadcastLl), (16 << 20, BroadcastLl128), (u64::MAX, BroadcastChain)],
            ),
            (Collective::Reduce, vec![(256 << 10, ReduceLl), (32 << 20, ReduceLl128), (u64::MAX, ReduceChain)]),
        ];
        for (collective, sizes) in two_ranks {
            let group = RuleGroup { ranks: Some(2), ..RuleGroup::any(sizes) };
            rules.entry(collective).or_default().push(group.built_in());
        }
        Self { rules, force: BTreeMap::new() }
    }
}

impl Selector {
    /// The algorithm for a `collective` of `bytes` (see [`Rule::max_bytes`]) in `dtype` on a
    /// communicator of `ranks` ranks: the override if any, else the most specific matching
    /// group of rules (see [`Rule`]).
    pub fn select(&self, collective: Collective, dtype: DataType, bytes: u64, ranks: usize) -> Algorithm {
        if let Some(&a) = self.force.get(&collective) {
            return a;
        }
        let groups = self.rules.get(&collective).map(Vec::as_slice).unwrap_or_default();
        groups
            .iter()
            .filter(|g| g.matches(dtype, ranks, None))
            .max_by_key(|g| g.specificity())
            .and_then(|g| g.pick(bytes))
            .or_else(|| collective.algorithms().next())
            .unwrap_or(Algorithm::SendRecvP2p)
    }

    /// Whether `collective`'s algorithm is forced (an override, not a size-based choice).
    pub fn forced(&self, collective: Collective) -> bool {
        self.force.contains_key(&collective)
    }

    /// The algorithm for a communicator whose kernels cannot map some peers (other hosts, or
    /// other virtual nodes): only the AllReduces that cross nodes reach them (through the
    /// proxy), `nvrar` up to `NVRAR_ACROSS_NODES_MAX` bytes where the nodes are of equal size
    /// (not FP8: it carries partials in the element type), then
    /// `port_allpairs` for messages up to `ALLPAIRS_ACROSS_NODES_MAX` bytes (one network
    /// crossing) and in FP8 (the ring carries partials in the element type), `port_ring` above
    /// and at every size beyond [`weft_types::MAX_RANKS`] ranks, where `port_allpairs` does not
    /// run (so FP8 is refused there), unless one of them or an AllReduce plan (`plan:nvrar_allreduce`, `plan:hier2ph_allreduce`,
    /// ...; whether its memory channels stay within nodes is checked when it is set up) is
    /// forced, or the tuning table has rules for `ranks` ranks in `nodes` nodes (see
    /// [`Rule::nodes`]); only where it supports the type and operator. The error says what is
    /// missing.
    pub fn across_nodes(&self, call: AcrossNodes) -> Result<Algorithm, String> {
        let AcrossNodes { collective, bytes, dtype, op, ranks, nodes, equal_nodes } = call;
        let (ring, pairs) = (Algorithm::AllReducePortRing, Algorithm::AllReducePortAllPairs);
        let nvrar = Algorithm::AllReduceNvrar;
        if collective != Collective::AllReduce {
            return Err(format!(
                "{collective} has no algorithm across nodes (only AllReduce: port_allpairs, port_ring, nvrar, 2ph)"
            ));
        }
        let chosen = match self.force.get(&collective).copied() {
            // A forced plan is checked against the nodes when it is set up (`Nodes::check`).
            Some(a) if a.may_cross_nodes() => a,
            Some(other) => {
                return Err(format!(
                    "{other} cannot reach peers of other nodes (port_allpairs, port_ring, nvrar, 2ph and plans whose memory channels stay within nodes can)"
                ));
            }
            None => {
                // A table's pick that cannot run here (all pairs beyond 8 ranks; nvrar or 2ph on nodes
                // of different sizes or in a type whose partials it would round) is no pick:
                // the built-in choice then.
                let runs = |tuned: &Algorithm| {
                    (matches!(tuned, Algorithm::Plan(_)) || tuned.available(ranks))
                        && (!matches!(tuned, Algorithm::AllReduceNvrar | Algorithm::AllReduce2ph)
                            || (equal_nodes && tuned.supports(dtype)))
                };
                match self.tuned_across(collective, dtype, bytes, ranks, nodes).filter(runs) {
                    Some(tuned) => tuned,
                    None if bytes <= NVRAR_ACROSS_NODES_MAX
                        && equal_nodes
                        && nvrar.available(ranks)
                        && nvrar.supports(dtype) =>
                    {
                        nvrar
                    }
                    // All pairs keeps a slot per rank in fixed arrays: the ring beyond them.
                    None if (bytes <= ALLPAIRS_ACROSS_NODES_MAX || !ring.supports(dtype)) && pairs.available(ranks) => {
                        pairs
                    }
                    None => ring,
                }
            }
        };
        // (A plan is checked against the nodes when it is set up.)
        if !matches!(chosen, Algorithm::Plan(_)) && !chosen.available(ranks) {
            return Err(format!("{chosen} does not run on {ranks} ranks"));
        }
        if !(chosen.supports(dtype) && chosen.supports_op(op)) {
            return Err(format!(
                "{chosen}, an algorithm across nodes, does not support {} with {}",
                dtype.name(),
                op.name()
            ));
        }
        Ok(chosen)
    }

    /// The tuning table's pick for `bytes` of `dtype` on `ranks` ranks in `nodes` nodes, if its
    /// rules cover that node count.
    fn tuned_across(
        &self,
        collective: Collective,
        dtype: DataType,
        bytes: u64,
        ranks: usize,
        nodes: usize,
    ) -> Option<Algorithm> {
        let groups = self.rules.get(&collective)?;
        groups.iter().filter(|g| g.matches(dtype, ranks, Some(nodes))).max_by_key(|g| g.specificity())?.pick(bytes)
    }

    /// Makes `algorithm` the size rule of its collective at every size without forcing it:
    /// an LL algorithm still falls back to HB where its packet slot is too small.
    pub fn prefer(&mut self, algorithm: Algorithm) {
        self.rules.insert(algorithm.collective(), vec![RuleGroup::any(vec![(u64::MAX, algorithm)])]);
    }

    /// Forces `algorithm` for its collective.
    pub fn force(&mut self, algorithm: Algorithm) {
        self.force.insert(algorithm.collective(), algorithm);
    }

    /// Replaces, for every collective the table names, the groups of rules with the filters
    /// its rules give (see [`Rule`]) and weft's built-in groups those cover; the other groups
    /// stay (a table of only unfiltered rules, as tables before the filters were, replaces the
    /// collective's rules within one node).
    pub fn apply(&mut self, table: &TuningTable) -> Result<(), String> {
        for (name, rules) in &table.collectives {
            let collective = Collective::from_name(name).ok_or_else(|| format!("unknown collective {name:?}"))?;
            let groups = self.rules.entry(collective).or_default();
            let parsed = parse_groups(collective, rules).map_err(|e| format!("{name}: {e}"))?;
            groups.retain(|g| !g.built_in || !parsed.iter().any(|p| p.covers(g)));
            for group in parsed {
                match groups.iter_mut().find(|g| g.same_filters(&group)) {
                    Some(existing) => *existing = group,
                    None => groups.push(group),
                }
            }
        }
        Ok(())
    }

    /// The rules in force as a table (for `weft tune` and diagnostics).
    pub fn table(&self) -> TuningTable {
        let collectives = self
            .rules
            .iter()
            .map(|(c, groups)| {
                let rules = groups
                    .iter()
                    .flat_map(|g| {
                        g.sizes.iter().map(|&(max, a)| Rule {
                            dtype: g.dtype.map(|t| t.name().to_string()),
                            ranks: g.ranks,
                            nodes: g.nodes,
                            max_bytes: (max != u64::MAX).then_some(max),
                            algorithm: a.name().into(),
                        })
                    })
                    .collect();
                (c.name().to_string(), rules)
            })
            .collect();
        TuningTable { collectives, ..TuningTable::default() }
    }
}

/// Whether `algorithm` can run on a communicator spanning nodes (a plan: when its memory
/// channels stay within nodes, checked when it is set up).
fn reaches_other_nodes(algorithm: Algorithm) -> bool {
    algorithm.may_cross_nodes()
}

/// One call as [`Selector::across_nodes`] chooses for it.
#[derive(Clone, Copy, Debug)]
pub struct AcrossNodes {
    /// The collective.
    pub collective: Collective,
    /// The selector's size key of the call (see [`Rule::max_bytes`]).
    pub bytes: u64,
    /// Its element type.
    pub dtype: DataType,
    /// Its operator.
    pub op: ReduceOp,
    /// Ranks of the communicator.
    pub ranks: usize,
    /// (Virtual) nodes the ranks are in.
    pub nodes: usize,
    /// Whether every node has the same number of ranks (`nvrar` needs it).
    pub equal_nodes: bool,
}

/// The rules of one collective as groups by filters, in order of first appearance; each must
/// ascend in `max_bytes`.
fn parse_groups(collective: Collective, rules: &[Rule]) -> Result<Vec<RuleGroup>, String> {
    if rules.is_empty() {
        return Err("rules must be non-empty".into());
    }
    let mut groups: Vec<RuleGroup> = Vec::new();
    for rule in rules {
        let algorithm = Algorithm::from_name(collective, &rule.algorithm)
            .ok_or_else(|| format!("unknown algorithm {:?}", rule.algorithm))?;
        let dtype =
            rule.dtype.as_deref().map(|n| DataType::from_name(n).ok_or(format!("unknown dtype {n:?}"))).transpose()?;
        if rule.ranks == Some(0) {
            return Err("a rule's ranks must be at least 1".into());
        }
        if let Some(nodes) = rule.nodes {
            if nodes < 2 {
                return Err(format!(
                    "a rule's nodes must be at least 2 (rules without nodes serve one node), not {nodes}"
                ));
            }
            if !reaches_other_nodes(algorithm) {
                return Err(format!(
                    "{algorithm} cannot reach other nodes: a rule for {nodes} nodes names port_allpairs, port_ring, nvrar or a plan"
                ));
            }
        }
        let group = RuleGroup { dtype, ranks: rule.ranks, nodes: rule.nodes, ..RuleGroup::any(Vec::new()) };
        let index = match groups.iter().position(|g| g.same_filters(&group)) {
            Some(i) => i,
            None => {
                groups.push(group);
                groups.len() - 1
            }
        };
        groups[index].sizes.push((rule.max_bytes.unwrap_or(u64::MAX), algorithm));
    }
    if groups.iter().any(|g| g.sizes.windows(2).any(|w| w[0].0 >= w[1].0)) {
        return Err("the rules of each type, rank count and node count must have ascending max_bytes".into());
    }
    Ok(groups)
}

/// Launch shapes, buffer sizes and the selector of a communicator's collectives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollConfig {
    /// Blocks of every LL16 launch (fixed: per-block flags advance in lockstep on every rank).
    pub ll_blocks: u32,
    /// Blocks of every LL128 launch (fixed, as `ll_blocks`; the LL128 launches' flags and
    /// tokens are lanes of their own, so the two grids need not match).
    pub ll128_blocks: u32,
    /// Threads per LL block: a positive multiple of 32 (the LL128 kernels vote per warp).
    pub ll_threads: u32,
    /// Blocks of every HB and send/receive launch (fixed: one semaphore per peer and block).
    pub hb_blocks: u32,
    /// Threads per HB block.
    pub hb_threads: u32,
    /// Worker blocks of an AllReduce `port_ring` or `port_allpairs` launch (`hb_threads` each), which reduce and
    /// copy out; the launch has one more block, the driver of its PortChannels. At most
    /// `MAX_PORT_RING_BLOCKS`.
    pub port_ring_blocks: u32,
    /// PortChannels per ring edge of `port_ring` (1..=16; a large step crosses in one piece per
    /// channel); `None`: 2, or 4 when the ring crosses TCP.
    pub port_ring_channels: Option<u32>,
    /// Bytes an HB round moves; the scratch is twice this.
    pub chunk_bytes: usize,
    /// Payload bytes of one LL packet slot: the most one rank sends one peer in one LL launch.
    pub ll_slot_bytes: usize,
    /// Largest direction (bytes one rank sends one peer in one launch: an AllToAll block, a
    /// send) that the `ll` algorithm of AllToAll and send/receive carries over LL packets; the
    /// larger ones go through scratch with credits. Sizes the pairs' packet slots (LL16 packets
    /// take twice the payload, in two halves: `4 * ranks * p2p_ll_bytes` per rank). 0: none.
    /// 256 KiB: on 2×H100 a 256 KiB send took 5.0 µs over packets against 9.8 through scratch,
    /// and an AllToAll of 128 KiB directions 4.2 against 9.1 (docs/perf/collectives.md).
    pub p2p_ll_bytes: usize,
    /// Smallest direction of a `weft_p2p` launch that runs on twice the blocks (`0`: never):
    /// a long stream through scratch needs more SMs than a direction's share of the HB grid.
    pub p2p_wide_bytes: usize,
    /// Which algorithm runs.
    pub selector: Selector,
    /// Ranks the tuning table in force was measured with, if it says.
    pub tuned_ranks: Option<usize>,
    /// Smallest input (bytes per rank) a plan executor is set up for; a larger call sets the
    /// plan up again for the next power of two.
    pub plan_capacity: usize,
    /// Replicas of every plan thread block (`WEFT_PLAN_REPLICAS`; `None`: as many as the SMs
    /// hold, see `weft_exec::replicas_for`).
    pub plan_replicas: Option<u32>,
    /// Compile each rank's plan operations into its executor kernel (`WEFT_PLAN_SPECIALIZE`, on
    /// by default; see `weft_exec::specialize`) instead of running them on the interpreter
    /// kernel every plan shares. Measured with 2 ranks sharing one H200 (CUDA graph, 1 KB):
    /// all-pairs LL plan 7.1 against 9.7 µs, ring plan 11.1 against 12.6 µs; the cost is a
    /// compilation per plan, rank, type and operator on first use (cached on disk).
    pub plan_specialize: bool,
    /// A plan launch runs one replica per this many bytes of its largest chunk
    /// (`WEFT_PLAN_SLICE_BYTES`; 0: every replica at every size; see `weft_exec::active_replicas`).
    pub plan_slice_bytes: usize,
    /// Largest captured HB AllReduce (bytes) that stores its results straight into the peers'
    /// registered outputs; 0: never. Faster than staging at every size measured on 4×H200 and
    /// 2×H200 machines (4×H200: 4 MB 36.4 vs 39.4 µs, 256 MB 1187 vs 1204 µs), so it covers
    /// every size HB is chosen for.
    pub zero_copy_allreduce_max: usize,
    /// Whether a zero-copy HB AllReduce whose inputs are mapped here (windows, or a captured
    /// call's agreement) reads them in place (the direct two-shot: two barriers, no scratch)
    /// instead of pushing them through scratch (`WEFT_DIRECT_ALLREDUCE`, 0 or 1).
    pub direct_allreduce: bool,
    /// Largest AllReduce (bytes) that runs the direct two-shot when `direct_allreduce` allows
    /// it (`WEFT_DIRECT_ALLREDUCE_MAX`). Measured on a 2×H100 machine, captured, against the
    /// two-shot through scratch: 4 MB 20.9 vs 31.0 µs, 16 MB 58.7 vs 68.7, 64 MB 207.3 vs
    /// 211.7, but 256 MB 804.8 vs 773.8.
    pub direct_allreduce_max: usize,
    /// Smallest Reduce (bytes) on two NVLink-connected ranks that runs direct
    /// (`weft_reduce_direct`: the root pulls the peer's input through NVLink between two
    /// barriers) when `chain`, or an unforced `ll128`, is chosen and every rank's input is
    /// mapped here (windows, or a captured call's agreement) (`WEFT_DIRECT_REDUCE_MIN`).
    /// Measured on a 2×H100 machine, captured, bf16 sum, against what the size rules ran
    /// before: 4 MB 21.2 against lines' 18.0 µs, 16 MB 55.8 against 62.8, 64 MB 191.7 against
    /// the chain's 209.6, 1 GB 2888 against 2942 (NCCL 2882).
    pub direct_reduce_min: usize,
    /// Largest ReduceScatter (input bytes) on NVLink-connected ranks taken by `hb` that runs
    /// direct (`weft_reduce_scatter_direct`: rank r pulls block r of every input straight
    /// through NVLink between two barriers) when every rank's input is mapped here (windows, or
    /// a captured call's agreement) (`WEFT_DIRECT_REDUCE_SCATTER_MAX`; 0: never). Faster than
    /// HB through scratch at every size measured on a 2×H100 machine, captured, bf16 sum
    /// (4 MB 16.5 against 19.5 µs, 16 MB 35.5 against 53.9, 256 MB 417 against 542, 1 GB 1612
    /// against 1893), so it has no limit by default.
    pub direct_reduce_scatter_max: usize,
    /// Whether LL kernels are launched as programmatic dependents of the previous kernel on
    /// the stream (`WEFT_EARLY_LAUNCH`, 0 or 1): their blocks are scheduled while it finishes
    /// and wait for it on the GPU (`griddepcontrol.wait`), which hides the launch gap between
    /// back-to-back small collectives.
    pub early_launch: bool,
    /// Largest captured HB AllGather (output bytes) that pushes straight into the peers'
    /// registered outputs; 0: never. Measured on a 2×H200 machine: faster up to 64 MB (4 MB
    /// 14.0 vs 15.9 µs, 64 MB 109 vs 126 µs), slower from 256 MB (its one round is not
    /// pipelined).
    pub zero_copy_allgather_max: usize,
    /// Smallest captured plan launch (output bytes per rank) that runs into the ranks'
    /// registered user outputs instead of the executor's output stage (no copy-out, but an
    /// entry fence with every peer); `usize::MAX`: never. Direct was faster at every size
    /// measured (ring all-reduce plan, 2 ranks sharing one H200: 1 KB 20.3 against 25.8 µs,
    /// 64 MB 192.8 against 296.5 µs), so every launch that can goes direct.
    pub zero_copy_plan_min: usize,
    /// Before each collective, exchange the call on the host and compare it with every rank's
    /// (`WEFT_CHECK_CALLS`, 0 or 1; see `call_check.rs`): a mismatch is an error naming both
    /// calls on every rank, and nothing is launched. Off by default: one bootstrap all-gather
    /// per call.
    pub check_calls: bool,
}

impl Default for CollConfig {
    fn default() -> Self {
        Self {
            // 64 LL blocks and 128 HB blocks of 1024 threads with 32 MiB rounds were the best
            // measured on a 4×H200 machine (docs/perf/collectives.md).
            ll_blocks: 64,
            // LL128 lines at 1 - 4 MB: 128 blocks beat 64 by 5-15% on a 2×H100 machine, while
            // the LL16 rows (1 - 256 KB) are 3-7% slower at 128 (docs/perf/collectives.md).
            ll128_blocks: 128,
            ll_threads: 512,
            hb_blocks: 128,
            hb_threads: 1024,
            port_ring_blocks: 32,
            port_ring_channels: None,
            chunk_bytes: 32 << 20,
            ll_slot_bytes: 512 << 10,
            p2p_ll_bytes: 256 << 10,
            // A 1 GiB direction: SendRecv 1 GB 3012 -> 2974 µs on a 2×H200 machine. Not lower: an
            // AllToAll's wide directions and its local copy need more blocks than the SMs hold
            // (192 of 1024 threads on 132 SMs at 2 ranks), 1516 -> 1684 µs at 1 GB.
            p2p_wide_bytes: 1 << 30,
            selector: Selector::default(),
            tuned_ranks: None,
            plan_capacity: 1 << 20,
            plan_replicas: None,
            plan_specialize: true,
            plan_slice_bytes: weft_exec::PLAN_SLICE_BYTES as usize,
            zero_copy_allreduce_max: 256 << 20,
            direct_allreduce: true,
            direct_allreduce_max: 64 << 20,
            direct_reduce_min: 16 << 20,
            direct_reduce_scatter_max: usize::MAX,
            early_launch: true,
            zero_copy_allgather_max: 64 << 20,
            zero_copy_plan_min: 0,
            check_calls: false,
        }
    }
}

impl CollConfig {
    /// Defaults overridden by the communicator's environment: `WEFT_PLAN_DIR` (user plans,
    /// loaded once per process, see [`crate::load_user_plans`]), `WEFT_TUNING_FILE` (a JSON
    /// [`TuningTable`]), `WEFT_ALGO_<COLLECTIVE>` (an algorithm name or `auto`),
    /// `WEFT_CHUNK_BYTES`, `WEFT_LL_SLOT_BYTES`, `WEFT_P2P_LL_BYTES` (0 for none, up to 16 MiB),
    /// `WEFT_HB_BLOCKS`, `WEFT_LL_BLOCKS`, `WEFT_LL128_BLOCKS`,
    /// `WEFT_PORT_RING_BLOCKS` (1..=64), `WEFT_PORT_RING_CHANNELS` (1..=16), `WEFT_PLAN_REPLICAS`,
    /// `WEFT_ZERO_COPY_ALLREDUCE`, `WEFT_ZERO_COPY_ALLGATHER` (largest zero-copy call in bytes,
    /// 0 for never), `WEFT_ZERO_COPY_PLAN_MIN` (smallest zero-copy plan launch in bytes), `WEFT_DIRECT_ALLREDUCE`, `WEFT_EARLY_LAUNCH`, `WEFT_CHECK_CALLS` (0 or 1). The
    /// zero-copy limits decide whether a call takes part in a collective exchange: every rank
    /// must set them alike.
    pub fn from_env(env: &weft_core::Env) -> Result<Self, String> {
        Self::from_lookup(|variable| env.var(variable).map(str::to_string))
    }

    /// [`CollConfig::from_env`] through a lookup function (tests).
    pub fn from_lookup(lookup: impl Fn(&Variable) -> Option<String>) -> Result<Self, String> {
        let mut c = Self::default();
        let number = |variable: &Variable, max: usize| -> Result<Option<usize>, String> {
            lookup(variable)
                .map(|v| {
                    v.trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|&n| n > 0 && n <= max)
                        .ok_or(format!("{}={v:?}: expected 1..={max}", variable.name))
                })
                .transpose()
        };
        if let Some(dir) = lookup(&vars::WEFT_PLAN_DIR).filter(|p| !p.is_empty()) {
            crate::plans::load_user_plans(std::path::Path::new(&dir))?;
        }
        if let Some(path) = lookup(&vars::WEFT_TUNING_FILE).filter(|p| !p.is_empty()) {
            let bytes = std::fs::read(&path).map_err(|e| format!("WEFT_TUNING_FILE={path}: {e}"))?;
            let table = TuningTable::from_json(&bytes).map_err(|e| format!("WEFT_TUNING_FILE={path}: {e}"))?;
            c.selector.apply(&table).map_err(|e| format!("WEFT_TUNING_FILE={path}: {e}"))?;
            c.tuned_ranks = table.ranks;
            if let Some(blocks) = table.hb_blocks {
                c.hb_blocks = blocks;
            }
        }
        for collective in Collective::ALL {
            let var = collective.override_var();
            match lookup(var).as_deref().map(str::trim) {
                None | Some("" | "auto") => {}
                Some(name) => {
                    let algorithm = Algorithm::from_name(collective, name).ok_or_else(|| {
                        let known: Vec<_> = collective.algorithms().map(Algorithm::name).collect();
                        format!("{}={name:?}: expected {} or auto", var.name, known.join(", "))
                    })?;
                    c.selector.force(algorithm);
                }
            }
        }
        if let Some(n) = number(&vars::WEFT_CHUNK_BYTES, 1 << 30)? {
            c.chunk_bytes = n;
        }
        if let Some(n) = number(&vars::WEFT_LL_SLOT_BYTES, 16 << 20)? {
            c.ll_slot_bytes = n;
        }
        if let Some(n) = number(&vars::WEFT_HB_BLOCKS, 1024)? {
            c.hb_blocks = n as u32;
        }
        if let Some(n) = number(&vars::WEFT_LL_BLOCKS, 1024)? {
            c.ll_blocks = n as u32;
        }
        if let Some(n) = number(&vars::WEFT_LL128_BLOCKS, 1024)? {
            c.ll128_blocks = n as u32;
        }
        if let Some(n) = number(&vars::WEFT_PORT_RING_BLOCKS, MAX_PORT_RING_BLOCKS as usize)? {
            c.port_ring_blocks = n as u32;
        }
        if let Some(n) = number(&vars::WEFT_PORT_RING_CHANNELS, crate::port_ring::MAX_LANES as usize)? {
            c.port_ring_channels = Some(n as u32);
        }
        if let Some(n) = number(&vars::WEFT_PLAN_REPLICAS, 1024)? {
            c.plan_replicas = Some(n as u32);
        }
        for (variable, field) in [
            (&vars::WEFT_PLAN_SPECIALIZE, &mut c.plan_specialize),
            (&vars::WEFT_DIRECT_ALLREDUCE, &mut c.direct_allreduce),
            (&vars::WEFT_EARLY_LAUNCH, &mut c.early_launch),
            (&vars::WEFT_CHECK_CALLS, &mut c.check_calls),
        ] {
            if let Some(v) = lookup(variable) {
                *field = match v.trim() {
                    "1" => true,
                    "0" => false,
                    _ => return Err(format!("{}={v:?}: expected 0 or 1", variable.name)),
                };
            }
        }
        for (variable, field, meaning) in [
            (&vars::WEFT_ZERO_COPY_ALLREDUCE, &mut c.zero_copy_allreduce_max, "0: never"),
            (&vars::WEFT_ZERO_COPY_ALLGATHER, &mut c.zero_copy_allgather_max, "0: never"),
            (&vars::WEFT_ZERO_COPY_PLAN_MIN, &mut c.zero_copy_plan_min, "0: always"),
            (&vars::WEFT_DIRECT_REDUCE_MIN, &mut c.direct_reduce_min, "0: every size"),
            (&vars::WEFT_DIRECT_REDUCE_SCATTER_MAX, &mut c.direct_reduce_scatter_max, "0: never"),
            (&vars::WEFT_DIRECT_ALLREDUCE_MAX, &mut c.direct_allreduce_max, "0: never"),
            (&vars::WEFT_PLAN_SLICE_BYTES, &mut c.plan_slice_bytes, "0: every replica"),
            (&vars::WEFT_P2P_LL_BYTES, &mut c.p2p_ll_bytes, "0: none"),
            (&vars::WEFT_P2P_WIDE_BYTES, &mut c.p2p_wide_bytes, "0: never"),
        ] {
            if let Some(v) = lookup(variable) {
                let name = variable.name;
                *field = v.trim().parse().map_err(|_| format!("{name}={v:?}: expected a byte count ({meaning})"))?;
            }
        }
        if c.p2p_ll_bytes > MAX_P2P_LL_BYTES {
            return Err(format!("WEFT_P2P_LL_BYTES={}: expected at most {MAX_P2P_LL_BYTES} (0: none)", c.p2p_ll_bytes));
        }
        Ok(c)
    }
}

/// The first difference between this rank's configuration (`mine`, its `Debug` form) and
/// another rank's in `all` (every rank's, in rank order), as an error message; `None` when all
/// are the same. Ranks that disagree on an algorithm, a grid or a zero-copy limit would launch
/// kernels that wait for each other forever, or take part in different exchanges.
pub(crate) fn config_mismatch(mine: &str, all: &[Vec<u8>]) -> Option<String> {
    let (peer, theirs) = all.iter().enumerate().find(|(_, b)| b.as_slice() != mine.as_bytes())?;
    let theirs = String::from_utf8_lossy(theirs);
    let mut pairs = mine.split(", ").zip(theirs.split(", "));
    let (a, b) = pairs.find(|(a, b)| a != b).unwrap_or((mine, &theirs));
    Some(format!(
        "rank {peer}'s collective configuration differs from this rank's (`{b}` against `{a}`): every rank must \
         set the WEFT_* variables alike"
    ))
}

impl CollConfig {
    /// Applies a communicator's limits on the thread blocks of one launch (NCCL's
    /// `ncclConfig_t.minCTAs` and `maxCTAs`): the LL, HB and `port_ring` grids (workers and
    /// driver) are raised to `min` and capped at `max`, `max` winning. Two limits stay: HB
    /// keeps at least 2 blocks (send/receive takes a semaphore per peer and direction, and a
    /// send/receive launch still runs at least `2 * ranks` blocks, one per direction), and the
    /// plans keep the shape their executor was set up with (`plan_replicas` is capped at `max`
    /// too). Returns what changed, for the log; `None` when nothing did.
    pub fn limit_blocks(&mut self, min: Option<u32>, max: Option<u32>) -> Option<String> {
        let before = format!(
            "LL {}, LL128 {}, HB {}, port ring {} + 1, plan replicas {:?}",
            self.ll_blocks, self.ll128_blocks, self.hb_blocks, self.port_ring_blocks, self.plan_replicas
        );
        let clamp = |blocks: u32, floor: u32| {
            let raised = min.map_or(blocks, |m| blocks.max(m));
            max.map_or(raised, |m| raised.min(m)).max(floor)
        };
        self.ll_blocks = clamp(self.ll_blocks, 1);
        self.ll128_blocks = clamp(self.ll128_blocks, 1);
        self.hb_blocks = clamp(self.hb_blocks, 2);
        // The port ring's launch has a driver block besides its workers.
        let ring = clamp(self.port_ring_blocks + 1, 2) - 1;
        self.port_ring_blocks = ring.min(MAX_PORT_RING_BLOCKS);
        if let Some(m) = max {
            self.plan_replicas = Some(self.plan_replicas.map_or(m, |r| r.min(m)).max(1));
            // A wide send/receive launch runs twice the HB grid, past the cap.
            self.p2p_wide_bytes = 0;
        }
        let after = format!(
            "LL {}, LL128 {}, HB {}, port ring {} + 1, plan replicas {:?}",
            self.ll_blocks, self.ll128_blocks, self.hb_blocks, self.port_ring_blocks, self.plan_replicas
        );
        (before != after).then(|| format!("{before} -> {after}"))
    }

    /// Shrinks every grid to `sms` blocks: the blocks of one launch wait for each other and for
    /// the peers' blocks, so all must be resident at once, at one block per SM (an HB block
    /// may take a whole SM). `Collectives::new` applies it only when ranks share a GPU
    /// (`WEFT_SHARE_GPUS`); with a GPU per rank the configured grids stay as they are.
    pub fn fit_resident(&mut self, sms: u32) {
        let sms = sms.max(1);
        let before = (self.ll_blocks, self.hb_blocks, self.port_ring_blocks, self.ll128_blocks);
        self.ll_blocks = self.ll_blocks.min(sms);
        self.ll128_blocks = self.ll128_blocks.min(sms);
        // A wide send/receive launch runs twice the HB grid: more blocks than stay resident.
        self.p2p_wide_bytes = 0;
        self.hb_blocks = self.hb_blocks.min(sms);
        // The port ring's launch has a driver block besides its workers.
        self.port_ring_blocks = self.port_ring_blocks.min(sms - 1).max(1);
        if before != (self.ll_blocks, self.hb_blocks, self.port_ring_blocks, self.ll128_blocks) {
            tracing::info!(
                "{sms} resident SMs per rank: LL {} -> {}, LL128 {} -> {}, HB {} -> {}, port ring {} -> {} blocks",
                before.0,
                self.ll_blocks,
                before.3,
                self.ll128_blocks,
                before.1,
                self.hb_blocks,
                before.2,
                self.port_ring_blocks
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_specialized_unless_the_environment_says_0() {
        let with = |v: Option<&str>| {
            CollConfig::from_lookup(|k| (k.name == "WEFT_PLAN_SPECIALIZE").then_some(v).flatten().map(String::from))
        };
        assert!(with(None).unwrap().plan_specialize);
        assert!(with(Some("1")).unwrap().plan_specialize);
        assert!(!with(Some("0")).unwrap().plan_specialize);
        let bad = with(Some("yes")).unwrap_err();
        assert!(bad.contains("WEFT_PLAN_SPECIALIZE=\"yes\": expected 0 or 1"), "{bad}");
    }

    #[test]
    fn block_limits_raise_and_cap_every_grid() {
        let mut c = CollConfig::default();
        assert_eq!(c.limit_blocks(None, None), None);
        // Limits the defaults already meet change nothing.
        assert_eq!(c.limit_blocks(Some(4), None), None);
        assert_eq!(c, CollConfig::default());
        let mut c = CollConfig::default();
        let changed = c.limit_blocks(Some(4), Some(32)).unwrap();
        assert_eq!((c.ll_blocks, c.hb_blocks, c.port_ring_blocks, c.plan_replicas), (32, 32, 31, Some(32)));
        assert_eq!((c.ll128_blocks, c.p2p_wide_bytes), (32, 0));
        assert!(changed.contains("HB 128") && changed.contains("-> LL 32, LL128 32"), "{changed}");
        // A floor above the defaults raises them; the cap still wins.
        let mut c = CollConfig::default();
        c.limit_blocks(Some(200), None);
        assert_eq!((c.ll_blocks, c.hb_blocks, c.port_ring_blocks), (200, 200, MAX_PORT_RING_BLOCKS));
        let mut c = CollConfig::default();
        c.limit_blocks(Some(1), Some(1));
        // HB keeps the 2 blocks send/receive needs; the port ring its driver and one worker.
        assert_eq!((c.ll_blocks, c.hb_blocks, c.port_ring_blocks, c.plan_replicas), (1, 2, 1, Some(1)));
    }

    #[test]
    fn grids_shrink_to_the_resident_sms() {
        let mut c = CollConfig::default();
        c.fit_resident(132);
        // Only the wide send/receive directions go: their doubled grid would not stay resident.
        assert_eq!(c, CollConfig { p2p_wide_bytes: 0, ..CollConfig::default() });
        c.fit_resident(100);
        assert_eq!((c.ll_blocks, c.ll128_blocks, c.hb_blocks), (64, 100, 100));
        c.fit_resident(33);
        assert_eq!((c.ll_blocks, c.hb_blocks, c.port_ring_blocks), (33, 33, 32));
        assert_eq!(c.ll128_blocks, 33);
        c.fit_resident(20);
        assert_eq!((c.ll_blocks, c.hb_blocks, c.port_ring_blocks), (20, 20, 19));
        c.fit_resident(0);
        assert_eq!((c.ll_blocks, c.hb_blocks, c.port_ring_blocks), (1, 1, 1));
    }

    /// A call on 4 ranks in 2 nodes.
    fn across(collective: Collective, bytes: u64, dtype: DataType, op: ReduceOp) -> AcrossNodes {
        AcrossNodes { collective, bytes, dtype, op, ranks: 4, nodes: 2, equal_nodes: true }
    }

    #[test]
    fn across_nodes_beyond_8_ranks_the_ring_runs_at_every_size() {
        let mut s = Selector::default();
        let (ring, pairs) = (Algorithm::AllReducePortRing, Algorithm::AllReducePortAllPairs);
        let at = |s: &Selector, bytes, dtype, ranks| {
            s.across_nodes(AcrossNodes {
                ranks,
                nodes: 2,
                ..across(Collective::AllReduce, bytes, dtype, ReduceOp::Sum)
            })
        };
        assert_eq!(at(&s, 8, DataType::Bf16, 8), Ok(Algorithm::AllReduceNvrar));
        assert_eq!(at(&s, 128 << 10, DataType::Bf16, 8), Ok(pairs));
        for ranks in [9, 16, 32] {
            assert_eq!(at(&s, 8, DataType::Bf16, ranks), Ok(Algorithm::AllReduceNvrar), "{ranks} ranks");
            assert_eq!(at(&s, 128 << 10, DataType::Bf16, ranks), Ok(ring), "{ranks} ranks");
            assert_eq!(at(&s, 1 << 30, DataType::Bf16, ranks), Ok(ring), "{ranks} ranks");
            // FP8 has only all pairs across nodes: refused, not run out of bounds.
            let fp8 = at(&s, 8, DataType::F8E4M3, ranks).unwrap_err();
            assert!(fp8.contains("does not support"), "{fp8}");
        }
        s.force(pairs);
        let forced = at(&s, 8, DataType::Bf16, 16).unwrap_err();
        assert!(forced.contains("does not run on 16 ranks"), "{forced}");
    }

    #[test]
    fn across_nodes_only_the_port_channel_allreduces_run_all_pairs_when_small() {
        let mut s = Selector::default();
        let (ring, pairs) = (Algorithm::AllReducePortRing, Algorithm::AllReducePortAllPairs);
        let (small, large) = (ALLPAIRS_ACROSS_NODES_MAX, ALLPAIRS_ACROSS_NODES_MAX + 1);
        assert_eq!(s.across_nodes(across(Collective::AllReduce, small, DataType::Bf16, ReduceOp::Sum)), Ok(pairs));
        assert_eq!(s.across_nodes(across(Collective::AllReduce, large, DataType::Bf16, ReduceOp::Sum)), Ok(ring));
        assert_eq!(s.across_nodes(across(Collective::AllReduce, large, DataType::F32, ReduceOp::Avg)), Ok(ring));
        // FP8 partials cannot travel the ring: all pairs at every size.
        assert_eq!(s.across_nodes(across(Collective::AllReduce, large, DataType::F8E4M3, ReduceOp::Sum)), Ok(pairs));
        let gather = s.across_nodes(across(Collective::AllGather, 8, DataType::Bf16, ReduceOp::Sum)).unwrap_err();
        assert!(gather.contains("allgather has no algorithm across nodes"), "{gather}");
        s.force(ring);
        assert_eq!(s.across_nodes(across(Collective::AllReduce, 8, DataType::Bf16, ReduceOp::Sum)), Ok(ring));
        let fp8 = s.across_nodes(across(Collective::AllReduce, 8, DataType::F8E4M3, ReduceOp::Sum)).unwrap_err();
        assert!(fp8.contains("does not support"), "{fp8}");
        s.force(pairs);
        assert_eq!(s.across_nodes(across(Collective::AllReduce, large, DataType::Bf16, ReduceOp::Sum)), Ok(pairs));
        s.force(Algorithm::AllReduceLl);
        let forced = s.across_nodes(across(Collective::AllReduce, 8, DataType::Bf16, ReduceOp::Sum)).unwrap_err();
        assert!(forced.contains("cannot reach peers of other nodes"), "{forced}");
        // A forced plan goes on to its set-up, which checks it against the nodes.
        let nvrar = Algorithm::from_name(Collective::AllReduce, "plan:nvrar_allreduce").unwrap();
        s.force(nvrar);
        assert_eq!(s.across_nodes(across(Collective::AllReduce, 8, DataType::Bf16, ReduceOp::Sum)), Ok(nvrar));
        let avg = s.across_nodes(across(Collective::AllReduce, 8, DataType::Bf16, ReduceOp::Avg)).unwrap_err();
        assert!(avg.contains("does not support"), "{avg}");
    }

    #[test]
    fn a_tuned_nvrar_gives_way_where_it_cannot_run() {
        let json = br#"{"collectives": {"allreduce": [{"nodes": 2, "algorithm": "nvrar"}]}}"#;
        let mut s = Selector::default();
        s.apply(&TuningTable::from_json(json).unwrap()).unwrap();
        let pick = |bytes: u64, dtype, equal_nodes| {
            s.across_nodes(AcrossNodes { equal_nodes, ..across(Collective::AllReduce, bytes, dtype, ReduceOp::Sum) })
        };
        assert_eq!(pick(1 << 20, DataType::Bf16, true), Ok(Algorithm::AllReduceNvrar));
        // Nodes of different sizes, or FP8 (partials in the type): the built-in choice.
        assert_eq!(pick(1 << 20, DataType::Bf16, false), Ok(Algorithm::AllReducePortRing));
        assert_eq!(pick(1024, DataType::Bf16, false), Ok(Algorithm::AllReducePortAllPairs));
        assert_eq!(pick(1024, DataType::F8E4M3, true), Ok(Algorithm::AllReducePortAllPairs));
    }

    #[test]
    fn rules_for_a_node_count_choose_across_those_nodes_only() {
        let json = br#"{"collectives": {"allreduce": [
            {"nodes": 2, "max_bytes": 65536, "algorithm": "port_allpairs"},
            {"nodes": 2, "max_bytes": 4194304, "algorithm": "plan:nvrar_allreduce"},
            {"nodes": 2, "algorithm": "port_ring"},
            {"nodes": 4, "ranks": 4, "algorithm": "plan:hier2ph_allreduce"},
            {"max_bytes": 1024, "algorithm": "hb"}, {"algorithm": "ring"}]}}"#;
        let mut s = Selector::default();
        s.apply(&TuningTable::from_json(json).unwrap()).unwrap();
        let nvrar = Algorithm::from_name(Collective::AllReduce, "plan:nvrar_allreduce").unwrap();
        let hier = Algorithm::from_name(Collective::AllReduce, "plan:hier2ph_allreduce").unwrap();
        let pick = |bytes: u64, ranks: usize, nodes: usize| {
            s.across_nodes(AcrossNodes {
                bytes,
                ranks,
                nodes,
                ..across(Collective::AllReduce, 0, DataType::Bf16, ReduceOp::Sum)
            })
        };
        assert_eq!(pick(1024, 4, 2), Ok(Algorithm::AllReducePortAllPairs));
        assert_eq!(pick(1 << 20, 4, 2), Ok(nvrar));
        assert_eq!(pick(64 << 20, 4, 2), Ok(Algorithm::AllReducePortRing));
        assert_eq!(pick(64 << 20, 4, 4), Ok(hier));
        // No rule for 8 ranks in 4 nodes, nor for 3 nodes: the built-in choice.
        assert_eq!(pick(64 << 20, 8, 4), Ok(Algorithm::AllReducePortRing));
        assert_eq!(pick(1024, 6, 3), Ok(Algorithm::AllReduceNvrar));
        // The table's all pairs cannot run beyond 8 ranks: no pick, so the built-in choice.
        assert_eq!(pick(1024, 16, 2), Ok(Algorithm::AllReduceNvrar));
        // Within one node the rules for node counts never apply.
        assert_eq!(s.select(Collective::AllReduce, DataType::Bf16, 1024, 4), Algorithm::AllReduceHb);
        assert_eq!(s.select(Collective::AllReduce, DataType::Bf16, 1 << 20, 4), Algorithm::AllReduceRing);
        // The table the selector writes keeps them.
        let mut again = Selector::default();
        again.apply(&s.table()).unwrap();
        assert_eq!(again.table(), s.table());
        for (rule, expected) in [
            (r#"{"nodes": 1, "algorithm": "port_ring"}"#, "at least 2"),
            (r#"{"nodes": 2, "algorithm": "hb"}"#, "cannot reach other nodes"),
        ] {
            let json = format!(r#"{{"collectives": {{"allreduce": [{rule}]}}}}"#);
            let err = Selector::default().apply(&TuningTable::from_json(json.as_bytes()).unwrap()).unwrap_err();
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn a_rank_with_another_configuration_is_named_with_the_first_difference() {
        let base = format!("{:?}", CollConfig::default());
        let other = CollConfig { zero_copy_plan_min: 4096, ..CollConfig::default() };
        let all = vec![base.clone().into_bytes(), format!("{other:?}").into_bytes()];
        assert_eq!(config_mismatch(&base, &all[..1]), None);
        let err = config_mismatch(&base, &all).unwrap();
        assert!(err.starts_with("rank 1's collective configuration differs"), "{err}");
        assert!(err.contains("zero_copy_plan_min: 4096"), "{err}");
        let mut forced = CollConfig::default();
        forced.selector.force(Algorithm::AllReduceRing);
        let err = config_mismatch(&format!("{forced:?}"), &[base.into_bytes()]).unwrap();
        assert!(err.contains("rank 0's"), "{err}");
    }

    #[test]
    fn zero_copy_and_direct_limits_default_to_the_measured_rules_and_read_the_environment() {
        type Field = fn(&CollConfig) -> usize;
        // (variable, field, default, a value from the environment)
        let limits: [(&str, Field, usize, usize); 6] = [
            ("WEFT_ZERO_COPY_ALLREDUCE", |c| c.zero_copy_allreduce_max, 256 << 20, 1 << 30),
            ("WEFT_ZERO_COPY_ALLGATHER", |c| c.zero_copy_allgather_max, 64 << 20, 0),
            ("WEFT_ZERO_COPY_PLAN_MIN", |c| c.zero_copy_plan_min, 0, 4096),
            ("WEFT_DIRECT_ALLREDUCE_MAX", |c| c.direct_allreduce_max, 64 << 20, 0),
            ("WEFT_DIRECT_REDUCE_MIN", |c| c.direct_reduce_min, 16 << 20, 4 << 20),
            ("WEFT_DIRECT_REDUCE_SCATTER_MAX", |c| c.direct_reduce_scatter_max, usize::MAX, 0),
        ];
        let d = CollConfig::default();
        let c = CollConfig::from_lookup(|k| {
            limits.iter().find(|(name, ..)| *name == k.name).map(|(_, _, _, set)| set.to_string())
        })
        .unwrap();
        for (name, field, default, set) in limits {
            assert_eq!((field(&d), field(&c)), (default, set), "{name}");
            let bad = CollConfig::from_lookup(|k| (k.name == name).then(|| "lots".into()));
            assert!(bad.unwrap_err().contains(name), "{name}");
        }
    }

    #[test]
    fn the_p2p_ll_limit_is_256_kib_unless_the_environment_says_otherwise() {
        assert_eq!(CollConfig::default().p2p_ll_bytes, 256 << 10);
        assert_eq!(with(&[("WEFT_P2P_LL_BYTES", "0")]).unwrap().p2p_ll_bytes, 0);
        assert_eq!(with(&[("WEFT_P2P_LL_BYTES", " 4096 ")]).unwrap().p2p_ll_bytes, 4096);
        assert_eq!(with(&[("WEFT_P2P_LL_BYTES", "16777216")]).unwrap().p2p_ll_bytes, 16 << 20);
        for bad in
            [&[("WEFT_P2P_LL_BYTES", "16777217")][..], &[("WEFT_P2P_LL_BYTES", "-1")], &[("WEFT_P2P_LL_BYTES", "x")]]
        {
            assert!(with(bad).unwrap_err().contains("WEFT_P2P_LL_BYTES"), "{bad:?}");
        }
    }

    fn with(pairs: &'static [(&'static str, &'static str)]) -> Result<CollConfig, String> {
        CollConfig::from_lookup(|k| pairs.iter().find(|(n, _)| *n == k.name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn defaults_pick_by_size_and_overrides_force() {
        let c = CollConfig::default();
        assert_eq!(c.selector.select(Collective::AllReduce, DataType::Bf16, 1024, 4), Algorithm::AllReduceLl);
        assert_eq!(c.selector.select(Collective::AllReduce, DataType::Bf16, 512 << 10, 4), Algorithm::AllReduceLl2);
        assert_eq!(c.selector.select(Collective::AllReduce, DataType::Bf16, 256 << 20, 4), Algorithm::AllReduceHb);
        assert_eq!(c.selector.select(Collective::AllReduce, DataType::Bf16, 1 << 30, 4), Algorithm::AllReduceRing);
        // Above LL, the chain at 3 and 4 ranks, HB beyond.
        for ranks in [3, 4, 5, 8] {
            let (broadcast, reduce) = if ranks <= 4 {
                (Algorithm::BroadcastChain, Algorithm::ReduceChain)
            } else {
                (Algorithm::BroadcastHb, Algorithm::ReduceHb)
            };
            for (bytes, large) in [(256 << 10, false), ((256 << 10) + 1, true), (1 << 30, true)] {
                let b = c.selector.select(Collective::Broadcast, DataType::Bf16, bytes, ranks);
                let r = c.selector.select(Collective::Reduce, DataType::Bf16, bytes, ranks);
                let want = if large { (broadcast, reduce) } else { (Algorithm::BroadcastLl, Algorithm::ReduceLl) };
                assert_eq!((b, r), want, "{bytes} bytes, {ranks} ranks");
            }
        }
        // At 2 ranks, LL128 lines between LL16 and what ran above it (where every pair is
        // NVLink-connected; the chooser applies `without_ll128` elsewhere).
        let two = |collective, bytes| c.selector.select(collective, DataType::Bf16, bytes, 2);
        for (collective, sizes) in [
            (
                Collective::AllReduce,
                vec![
                    (256 << 10, Algorithm::AllReduceLl),
                    ((256 << 10) + 1, Algorithm::AllReduceLl128),
                    (1 << 20, Algorithm::AllReduceLl128),
                    ((1 << 20) + 1, Algorithm::AllReduceHb),
                ],
            ),
            (
                Collective::AllGather,
                vec![
                    (256 << 10, Algorithm::AllGatherLl),
                    ((256 << 10) + 1, Algorithm::AllGatherLl128),
                    ((1 << 20) + 1, Algorithm::AllGatherHb),
                ],
            ),
            (
                Collective::ReduceScatter,
                vec![(256 << 10, Algorithm::ReduceScatterLl), (1 << 20, Algorithm::ReduceScatterLl128)],
            ),
            (
                Collective::Broadcast,
                vec![
                    (256 << 10, Algorithm::BroadcastLl),
                    (16 << 20, Algorithm::BroadcastLl128),
                    ((16 << 20) + 1, Algorithm::BroadcastChain),
                ],
            ),
            (
                Collective::Reduce,
                vec![
                    (256 << 10, Algorithm::ReduceLl),
                    ((256 << 10) + 1, Algorithm::ReduceLl128),
                    (32 << 20, Algorithm::ReduceLl128),
                    ((32 << 20) + 1, Algorithm::ReduceChain),
                    (1 << 30, Algorithm::ReduceChain),
                ],
            ),
        ] {
            for (bytes, want) in sizes {
                assert_eq!(two(collective, bytes), want, "{collective} at {bytes} bytes on 2 ranks");
                // Where lines give way, the algorithm of those sizes before them: the one the
                // rules still pick at 3 ranks, where the 2-rank rules were the same before.
                if want.is_ll128() {
                    let at_three = c.selector.select(collective, DataType::Bf16, bytes, 3);
                    assert_eq!(want.without_ll128(), at_three, "{collective} at {bytes} bytes");
                }
            }
        }
        // LL packets: AllToAll up to 256 KiB, p2p above; send/receive always (it asks at 0 bytes).
        for ranks in [2, 3, 4, 8] {
            for bytes in [0, 1, 64 << 10, 256 << 10, (256 << 10) + 1, 1 << 30] {
                let alltoall = if bytes <= 256 << 10 { Algorithm::AllToAllLl } else { Algorithm::AllToAllP2p };
                assert_eq!(c.selector.select(Collective::AllToAll, DataType::Bf16, bytes, ranks), alltoall, "{bytes}");
                assert_eq!(c.selector.select(Collective::SendRecv, DataType::U8, bytes, ranks), Algorithm::SendRecvLl);
            }
        }
        let p2p = with(&[("WEFT_ALGO_ALLTOALL", "p2p"), ("WEFT_ALGO_SENDRECV", "p2p")]).unwrap();
        assert_eq!(p2p.selector.select(Collective::AllToAll, DataType::Bf16, 1, 4), Algorithm::AllToAllP2p);
        assert_eq!(p2p.selector.select(Collective::SendRecv, DataType::U8, 1, 4), Algorithm::SendRecvP2p);
        let ll = with(&[("WEFT_ALGO_ALLTOALL", "ll"), ("WEFT_ALGO_SENDRECV", "ll")]).unwrap();
        assert!(ll.selector.forced(Collective::AllToAll) && ll.selector.forced(Collective::SendRecv));
        assert_eq!(ll.selector.select(Collective::SendRecv, DataType::U8, 0, 2), Algorithm::SendRecvLl);
        let forced = with(&[("WEFT_ALGO_ALLREDUCE", "hb"), ("WEFT_ALGO_ALLGATHER", "auto")]).unwrap();
        assert_eq!(forced.selector.select(Collective::AllReduce, DataType::Bf16, 8, 4), Algorithm::AllReduceHb);
        assert!(forced.selector.forced(Collective::AllReduce) && !forced.selector.forced(Collective::AllGather));
        assert_eq!(
            with(&[("WEFT_ALGO_ALLREDUCE", "ring")]).unwrap().selector.select(
                Collective::AllReduce,
                DataType::Bf16,
                8,
                4
            ),
            Algorithm::AllReduceRing
        );
        assert!(with(&[("WEFT_ALGO_ALLREDUCE", "tree")]).unwrap_err().contains("ll, ll2, ll128, hb, ring"));
        assert!(with(&[("WEFT_ALGO_BROADCAST", "ll2")]).is_err());
        assert!(with(&[("WEFT_CHUNK_BYTES", "0")]).is_err());
        assert_eq!(with(&[("WEFT_HB_BLOCKS", "64")]).unwrap().hb_blocks, 64);
        assert_eq!(with(&[("WEFT_PORT_RING_BLOCKS", "4")]).unwrap().port_ring_blocks, 4);
        assert!(with(&[("WEFT_PORT_RING_BLOCKS", "65")]).is_err());
        assert_eq!(with(&[("WEFT_PORT_RING_CHANNELS", "4")]).unwrap().port_ring_channels, Some(4));
        assert!(with(&[("WEFT_PORT_RING_CHANNELS", "17")]).is_err());
        assert!(with(&[("WEFT_PORT_RING_CHANNELS", "0")]).is_err());
        let port = with(&[("WEFT_ALGO_ALLREDUCE", "port_ring")]).unwrap();
        assert_eq!(port.selector.select(Collective::AllReduce, DataType::Bf16, 8, 4), Algorithm::AllReducePortRing);
        for bytes in [0, 1 << 10, 1 << 20, 1 << 30, u64::MAX] {
            assert_ne!(
                c.selector.select(Collective::AllReduce, DataType::Bf16, bytes, 4),
                Algorithm::AllReducePortRing
            );
        }
        let plan = with(&[("WEFT_ALGO_ALLREDUCE", "plan:ring_allreduce")]).unwrap();
        assert_eq!(
            plan.selector.select(Collective::AllReduce, DataType::Bf16, 1 << 30, 4).name(),
            "plan:ring_allreduce"
        );
        assert!(with(&[("WEFT_ALGO_ALLGATHER", "plan:ring_allreduce")]).unwrap_err().contains("plan:ring_allgather"));
    }

    #[test]
    fn a_tuning_table_round_trips_and_bad_tables_are_rejected() {
        let mut s = Selector::default();
        let table = s.table();
        let text = serde_json::to_string(&table).unwrap();
        let mut again = Selector::default();
        again.apply(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(again.table(), s.table());
        let custom: TuningTable = serde_json::from_str(
            r#"{"collectives": {"allgather": [{"max_bytes": 4096, "algorithm": "ll"}, {"algorithm": "hb"}]}}"#,
        )
        .unwrap();
        s.apply(&custom).unwrap();
        assert_eq!(s.select(Collective::AllGather, DataType::Bf16, 4096, 4), Algorithm::AllGatherLl);
        assert_eq!(s.select(Collective::AllGather, DataType::Bf16, 4097, 4), Algorithm::AllGatherHb);
        let descending: TuningTable = serde_json::from_str(
            r#"{"collectives": {"allgather": [{"max_bytes": 4096, "algorithm": "ll"}, {"max_bytes": 1, "algorithm": "hb"}]}}"#,
        )
        .unwrap();
        assert!(s.apply(&descending).is_err());
        let unknown: TuningTable =
            serde_json::from_str(r#"{"collectives": {"allgather": [{"algorithm": "ll2"}]}}"#).unwrap();
        assert!(s.apply(&unknown).is_err());
    }

    /// A table as `weft tune` wrote them before rules had filters.
    const UNFILTERED_TABLE: &str = r#"{
  "machine": "4 x NVIDIA H200",
  "ranks": 4,
  "hb_blocks": 64,
  "collectives": {
    "allreduce": [
      {"max_bytes": 4096, "algorithm": "ll"},
      {"max_bytes": 1048576, "algorithm": "ll2"},
      {"algorithm": "hb"}
    ]
  }
}"#;

    #[test]
    fn tables_without_filters_load_and_apply_to_every_type_and_rank_count() {
        let table: TuningTable = serde_json::from_str(UNFILTERED_TABLE).unwrap();
        assert!(table.collectives["allreduce"].iter().all(|r| r.dtype.is_none() && r.ranks.is_none()));
        let c = CollConfig::default();
        let mut s = c.selector.clone();
        s.apply(&table).unwrap();
        for (dtype, ranks) in [(DataType::Bf16, 4), (DataType::F32, 2), (DataType::F8E4M3, 8)] {
            assert_eq!(s.select(Collective::AllReduce, dtype, 4096, ranks), Algorithm::AllReduceLl);
            assert_eq!(s.select(Collective::AllReduce, dtype, 4097, ranks), Algorithm::AllReduceLl2);
            assert_eq!(s.select(Collective::AllReduce, dtype, 1 << 30, ranks), Algorithm::AllReduceHb);
            // Collectives the table does not name keep the defaults.
            for bytes in [1, 1 << 20, (1 << 20) + 1, u64::MAX] {
                let (ours, default) = (&s, &c.selector);
                assert_eq!(
                    ours.select(Collective::AllGather, dtype, bytes, ranks),
                    default.select(Collective::AllGather, DataType::Bf16, bytes, ranks)
                );
            }
        }
        // Unfiltered rules still serialise without filter keys (the defaults' 2-rank groups of
        // AllToAll and SendRecv keep theirs).
        let text = serde_json::to_string(&s.table().collectives["allreduce"]).unwrap();
        assert!(!text.contains("dtype") && !text.contains("\"ranks\""), "{text}");
    }

    #[test]
    fn the_published_tables_still_load() {
        for text in [
            include_str!("../../../docs/perf/data/collectives-4xh200/tuning-4xh200.json"),
            include_str!("../../../docs/perf/data/collectives-2xh200/tuning-2xh200.json"),
        ] {
            let table: TuningTable = serde_json::from_str(text).unwrap();
            let mut s = Selector::default();
            s.apply(&table).unwrap();
            let rules = &table.collectives["allreduce"];
            let first = Algorithm::from_name(Collective::AllReduce, &rules[0].algorithm).unwrap();
            for (dtype, ranks) in [(DataType::Bf16, table.ranks.unwrap()), (DataType::F32, 8)] {
                assert_eq!(s.select(Collective::AllReduce, dtype, 1, ranks), first);
            }
        }
    }

    #[test]
    fn rules_select_by_type_and_rank_count_most_specific_first() {
        let table: TuningTable = serde_json::from_str(
            r#"{"collectives": {"allreduce": [
                {"ranks": 8, "max_bytes": 1024, "algorithm": "ll"},
                {"ranks": 8, "algorithm": "ring"},
                {"dtype": "f32", "algorithm": "ll2"},
                {"dtype": "f32", "ranks": 8, "algorithm": "hb"}
            ]}}"#,
        )
        .unwrap();
        let mut s = Selector::default();
        s.apply(&table).unwrap();
        let pick = |dtype, bytes, ranks| s.select(Collective::AllReduce, dtype, bytes, ranks);
        // Type and rank count, then rank count, then type, then the defaults.
        assert_eq!(pick(DataType::F32, 8, 8), Algorithm::AllReduceHb);
        assert_eq!(pick(DataType::Bf16, 1024, 8), Algorithm::AllReduceLl);
        assert_eq!(pick(DataType::Bf16, 1025, 8), Algorithm::AllReduceRing);
        assert_eq!(pick(DataType::F32, 1 << 30, 4), Algorithm::AllReduceLl2);
        assert_eq!(pick(DataType::Bf16, 1024, 4), Algorithm::AllReduceLl);
        assert_eq!(pick(DataType::Bf16, 1 << 30, 4), Algorithm::AllReduceRing);
        // The built-in 2-rank group is more specific than the table's type-only one.
        assert_eq!(pick(DataType::F32, 512 << 10, 2), Algorithm::AllReduceLl128);
        assert_eq!(pick(DataType::Bf16, 512 << 10, 2), Algorithm::AllReduceLl128);
        // The table round-trips, filters included.
        let text = serde_json::to_string(&s.table()).unwrap();
        let mut again = Selector::default();
        again.apply(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(again.table(), s.table());
        // A later table replaces only the groups with its filters.
        let other: TuningTable =
            serde_json::from_str(r#"{"collectives": {"allreduce": [{"ranks": 8, "algorithm": "hb"}]}}"#).unwrap();
        s.apply(&other).unwrap();
        assert_eq!(s.select(Collective::AllReduce, DataType::Bf16, 8, 8), Algorithm::AllReduceHb);
        assert_eq!(s.select(Collective::AllReduce, DataType::F32, 8, 8), Algorithm::AllReduceHb);
        assert_eq!(s.select(Collective::AllReduce, DataType::F32, 8, 3), Algorithm::AllReduceLl2);
        // Preferring an algorithm drops every group.
        s.prefer(Algorithm::AllReduceLl);
        assert_eq!(s.select(Collective::AllReduce, DataType::F32, 1 << 30, 8), Algorithm::AllReduceLl);
    }

    #[test]
    fn filtered_rules_are_checked() {
        let apply = |json: &str| Selector::default().apply(&serde_json::from_str(json).unwrap());
        let bad_type = apply(r#"{"collectives": {"allreduce": [{"dtype": "f128", "algorithm": "ll"}]}}"#);
        assert!(bad_type.unwrap_err().contains("unknown dtype \"f128\""));
        let no_ranks = apply(r#"{"collectives": {"allreduce": [{"ranks": 0, "algorithm": "ll"}]}}"#);
        assert!(no_ranks.unwrap_err().contains("at least 1"));
        // Ascending per group: interleaved groups are fine, a descending group is not.
        let interleaved = r#"{"collectives": {"allreduce": [
            {"dtype": "f32", "max_bytes": 4096, "algorithm": "ll"}, {"max_bytes": 1024, "algorithm": "ll"},
            {"dtype": "f32", "algorithm": "hb"}, {"algorithm": "hb"}]}}"#;
        assert_eq!(apply(interleaved), Ok(()));
        let descending = r#"{"collectives": {"allreduce": [
            {"ranks": 4, "max_bytes": 4096, "algorithm": "ll"}, {"ranks": 4, "max_bytes": 1024, "algorithm": "hb"}]}}"#;
        assert!(apply(descending).unwrap_err().contains("ascending"));
        assert!(apply(r#"{"collectives": {"allreduce": []}}"#).is_err());
    }
}
