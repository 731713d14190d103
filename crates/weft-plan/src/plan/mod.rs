//! The execution plan: a versioned, serde (JSON) description of what every thread block of every
//! rank does, indexed in chunks so that one plan serves every message size.
//!
//! ```text
//! ExecutionPlan { version, name, collective, nranks, size_classes, input_chunks, output_chunks, protocol }
//! └── ranks[r]: RankPlan { rank, scratch: [size class of each scratch chunk] }
//!     └── threadblocks[t]: ThreadBlock { id }
//!         └── ops: [Op]   (executed in order; see `Op` for the semantics)
//! ```
//!
//! Chunk sizes are not stored: [`Geometry`] computes them from the message size with a balanced
//! split. Plans are checked by [`ExecutionPlan::validate`] (every index, peer, channel, limit and
//! the signal/wait pairing), which [`ExecutionPlan::load`] always runs.

mod drawing;
mod geometry;
mod listing;
mod op;
mod packets;
mod validate;

use serde::{Deserialize, Serialize};
use weft_types::Collective;

pub use drawing::{EdgeKind, OpEdge, OpGraph, OpNode};
pub use geometry::{ChunkSplit, Geometry, GeometryError, op_slice, replica_slice};
pub use op::{BufRef, Buffer, Effects, Link, Loc, Op, Part};
pub use packets::packet_input;
pub use validate::{LoadError, Site, limits};

/// The plan format version this crate reads and writes.
pub const PLAN_VERSION: u32 = 1;

/// Which collective a plan computes: one of weft's collectives ([`Collective`], defined once
/// in weft-types) with the data a plan adds to it (broadcast's root), or a user-defined one.
/// Plans express all-reduce, all-gather, reduce-scatter and all-to-all ([`Rootless`]) and
/// broadcast ([`Rooted`]); [`CollectiveKind::new`] refuses any other pairing.
///
/// In JSON: `{"kind": "allreduce"}` (the collective's [`Collective::name`]),
/// `{"kind": "broadcast", "root": 0}`, `{"kind": "custom"}`.
///
/// [`Rootless`]: CollectiveKind::Rootless
/// [`Rooted`]: CollectiveKind::Rooted
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "KindJson", into = "KindJson")]
pub enum CollectiveKind {
    /// A collective without a root: all-reduce, all-gather, reduce-scatter or all-to-all.
    Rootless(Collective),
    /// A collective with a root rank: broadcast.
    Rooted {
        /// The collective.
        collective: Collective,
        /// The rank whose input is broadcast.
        root: u32,
    },
    /// A user-defined collective; its postcondition lives with the program, not in the plan.
    Custom,
}

impl CollectiveKind {
    /// The collectives a plan can compute without a root.
    pub const ROOTLESS: [Collective; 4] =
        [Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter, Collective::AllToAll];
    /// The collectives a plan can compute from a root.
    pub const ROOTED: [Collective; 1] = [Collective::Broadcast];

    /// The plan's kind for `collective`, with `root` where it has one; the error says why
    /// plans cannot express the pairing.
    pub fn new(collective: Collective, root: Option<u32>) -> Result<Self, String> {
        match root {
            None if Self::ROOTLESS.contains(&collective) => Ok(Self::Rootless(collective)),
            Some(root) if Self::ROOTED.contains(&collective) => Ok(Self::Rooted { collective, root }),
            None if Self::ROOTED.contains(&collective) => Err(format!("a {collective} plan needs a root")),
            Some(_) if Self::ROOTLESS.contains(&collective) => Err(format!("a {collective} plan has no root")),
            _ => Err(format!("plans do not express {collective}")),
        }
    }

    /// The collective computed (`None`: a custom one).
    pub fn collective(&self) -> Option<Collective> {
        match *self {
            CollectiveKind::Rootless(collective) | CollectiveKind::Rooted { collective, .. } => Some(collective),
            CollectiveKind::Custom => None,
        }
    }

    /// The root rank, for a rooted collective.
    pub fn root(&self) -> Option<u32> {
        match *self {
            CollectiveKind::Rooted { root, .. } => Some(root),
            CollectiveKind::Rootless(_) | CollectiveKind::Custom => None,
        }
    }

    /// Lower-case name: the collective's [`Collective::name`], or `custom`.
    pub fn name(&self) -> &'static str {
        self.collective().map_or("custom", Collective::name)
    }
}

/// [`CollectiveKind`] as the plan format spells it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KindJson {
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    root: Option<u32>,
}

impl TryFrom<KindJson> for CollectiveKind {
    type Error = String;

    fn try_from(json: KindJson) -> Result<Self, String> {
        match (json.kind.as_str(), json.root) {
            ("custom", None) => Ok(CollectiveKind::Custom),
            ("custom", Some(_)) => Err("a custom plan has no root".into()),
            (name, root) => {
                let collective = Collective::from_name(name).ok_or_else(|| {
                    let known: Vec<&str> =
                        Self::ROOTLESS.iter().chain(&Self::ROOTED).map(|c| c.name()).chain(["custom"]).collect();
                    format!("unknown collective kind `{name}`, expected one of {}", known.join(", "))
                })?;
                CollectiveKind::new(collective, root)
            }
        }
    }
}

impl From<CollectiveKind> for KindJson {
    fn from(kind: CollectiveKind) -> Self {
        KindJson { kind: kind.name().into(), root: kind.root() }
    }
}

/// How data crosses a link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Data is put, then the link's semaphore is signalled; the receiver waits on the
    /// semaphore, then reads. One signal covers every earlier write of the sending thread block.
    #[default]
    Simple,
    /// Low-latency packets (NCCL's and MSCCL++'s LL): every 8 bytes of data travel with a
    /// 4-byte flag twice in one 16-byte store, so the receiver polls the data itself and no
    /// semaphore is touched. A transfer's packets publish only their own data. Rules
    /// ([`ExecutionPlan::validate`]): only `send`, `recv` and the fused receives cross a link;
    /// every transfer lands in a scratch chunk that nothing else writes or reads, scratch holds
    /// nothing but such chunks, and the k-th receive on a link reads exactly what the k-th send
    /// on it wrote.
    Ll,
}

impl Protocol {
    /// Whether this is [`Protocol::Simple`] (the format's default, left out of JSON).
    pub fn is_simple(&self) -> bool {
        *self == Protocol::Simple
    }

    /// Lower-case name.
    pub fn name(&self) -> &'static str {
        match self {
            Protocol::Simple => "simple",
            Protocol::Ll => "ll",
        }
    }
}

/// A complete execution plan for every rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutionPlan {
    /// Format version; must be [`PLAN_VERSION`].
    pub version: u32,
    /// Identity of the algorithm (for caches and listings).
    pub name: String,
    /// The collective computed.
    pub collective: CollectiveKind,
    /// Number of ranks.
    pub nranks: u32,
    /// Number of chunk size classes `K`: a message unit of `m` elements is split into `K`
    /// balanced parts, and input/output chunk `i` has the size of part `i % K`.
    pub size_classes: u32,
    /// Chunks in each rank's input buffer (a multiple of `size_classes`).
    pub input_chunks: u32,
    /// Chunks in each rank's output buffer (a multiple of `size_classes`).
    pub output_chunks: u32,
    /// How transfers cross links (absent in JSON: [`Protocol::Simple`]).
    #[serde(default, skip_serializing_if = "Protocol::is_simple")]
    pub protocol: Protocol,
    /// One entry per rank, in rank order.
    pub ranks: Vec<RankPlan>,
}

/// What one rank runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankPlan {
    /// The rank (equal to its position in [`ExecutionPlan::ranks`]).
    pub rank: u32,
    /// The size class of each scratch chunk; the scratch buffer is their concatenation.
    pub scratch: Vec<u32>,
    /// Thread blocks, in id order.
    pub threadblocks: Vec<ThreadBlock>,
}

/// One thread block: an ordered list of operations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadBlock {
    /// The thread block's id (equal to its position in [`RankPlan::threadblocks`]).
    pub id: u32,
    /// Operations, executed in order.
    pub ops: Vec<Op>,
}

impl ExecutionPlan {
    /// Parses a JSON plan and validates it (see [`ExecutionPlan::validate`]).
    pub fn load(json: &str) -> Result<Self, LoadError> {
        let value: serde_json::Value = serde_json::from_str(json).map_err(LoadError::Json)?;
        // Check the version before the schema, so an old or new plan gets a version error rather
        // than a confusing schema error.
        match value.get("version").and_then(serde_json::Value::as_u64) {
            Some(v) if v == u64::from(PLAN_VERSION) => {}
            Some(found) => {
                return Err(LoadError::UnsupportedVersion { found, supported: PLAN_VERSION });
            }
            None => return Err(LoadError::MissingVersion),
        }
        let plan: ExecutionPlan = serde_json::from_value(value).map_err(LoadError::Json)?;
        plan.validate()?;
        Ok(plan)
    }

    /// Serialises the plan as pretty-printed JSON.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// Total number of operations over all ranks and thread blocks.
    pub fn op_count(&self) -> usize {
        self.ranks.iter().flat_map(|r| &r.threadblocks).map(|t| t.ops.len()).sum()
    }

    /// Chunk count of `buffer` on `rank` (`None` if the rank does not exist).
    pub fn chunks(&self, rank: u32, buffer: Buffer) -> Option<u32> {
        match buffer {
            Buffer::Input => Some(self.input_chunks),
            Buffer::Output => Some(self.output_chunks),
            Buffer::Scratch => {
                let r = self.ranks.get(rank as usize)?;
                u32::try_from(r.scratch.len()).ok()
            }
        }
    }

    /// Size class of chunk `index` of `buffer` on `rank` (`None` when out of range).
    pub fn class_of(&self, rank: u32, buffer: Buffer, index: u32) -> Option<u32> {
        match buffer {
            Buffer::Input | Buffer::Output => {
                (index < self.chunks(rank, buffer)?).then(|| index % self.size_classes.max(1))
            }
            Buffer::Scratch => self.ranks.get(rank as usize)?.scratch.get(index as usize).copied(),
        }
    }

    /// A human-readable listing of the plan (stable; used in snapshot tests and `weft plan`).
    pub fn listing(&self) -> String {
        listing::render(self)
    }

    /// The plan's operation DAG (signal → wait, `wait_tb`, barriers), for drawing as DOT or SVG.
    pub fn graph(&self) -> OpGraph {
        OpGraph::new(self)
    }
}
