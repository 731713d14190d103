//! Collectives: buffer shapes, preconditions and postconditions.

use std::fmt;
use std::sync::Arc;

use super::DslError;
use weft_types::Collective as Kind;

use crate::plan::CollectiveKind;

/// One chunk of one rank's input: the unit every chunk value is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InputChunk {
    /// The rank whose input it is.
    pub rank: u32,
    /// The input chunk index.
    pub index: u32,
}

impl InputChunk {
    /// Input chunk `index` of `rank`.
    pub fn new(rank: u32, index: u32) -> Self {
        Self { rank, index }
    }
}

impl fmt::Display for InputChunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in{}@r{}", self.index, self.rank)
    }
}

/// A user postcondition: the input chunks whose reduction rank `r`'s output chunk `i` must hold,
/// or `None` when that chunk is unconstrained.
pub type Postcondition = dyn Fn(u32, u32) -> Option<Vec<InputChunk>> + Send + Sync;

/// A collective: how many ranks, the shape of each rank's buffers and what the output must hold.
///
/// Precondition (all collectives): input chunk `i` of rank `r` holds `InputChunk { r, i }`.
/// The output buffer starts uninitialised. Chunks are grouped in blocks of `size_classes`
/// chunks whose sizes come from one balanced split (see [`Geometry`](crate::plan::Geometry)).
#[derive(Clone)]
pub struct Collective {
    kind: CollectiveKind,
    nranks: u32,
    input_chunks: u32,
    output_chunks: u32,
    size_classes: u32,
    custom: Option<Arc<Postcondition>>,
}

impl fmt::Debug for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Collective")
            .field("kind", &self.kind)
            .field("nranks", &self.nranks)
            .field("input_chunks", &self.input_chunks)
            .field("output_chunks", &self.output_chunks)
            .field("size_classes", &self.size_classes)
            .finish_non_exhaustive()
    }
}

impl Collective {
    fn new(
        kind: CollectiveKind,
        nranks: u32,
        input_chunks: u32,
        output_chunks: u32,
        size_classes: u32,
    ) -> Result<Self, DslError> {
        let shape_ok = nranks >= 1
            && size_classes >= 1
            && input_chunks >= size_classes
            && input_chunks.is_multiple_of(size_classes)
            && output_chunks.is_multiple_of(size_classes);
        let limits_ok = nranks <= crate::plan::limits::MAX_RANKS
            && input_chunks <= crate::plan::limits::MAX_CHUNKS
            && output_chunks <= crate::plan::limits::MAX_CHUNKS;
        if !shape_ok || !limits_ok {
            return Err(DslError::BadCollective { nranks, input_chunks, output_chunks, size_classes });
        }
        if let Some(collective) = kind.collective() {
            // A kind built by hand may pair a collective with a root wrongly: refuse what a
            // plan cannot express, so every kind below has its postcondition.
            CollectiveKind::new(collective, kind.root())
                .map_err(|reason| DslError::Constraint { algorithm: "collective", reason })?;
        }
        Ok(Self { kind, nranks, input_chunks, output_chunks, size_classes, custom: None })
    }

    /// AllReduce with `chunks` chunks per buffer: output chunk `i` of every rank is the
    /// reduction of input chunk `i` of all ranks.
    pub fn all_reduce(nranks: u32, chunks: u32) -> Result<Self, DslError> {
        Self::new(CollectiveKind::Rootless(Kind::AllReduce), nranks, chunks, chunks, chunks)
    }

    /// AllGather with `chunks` input chunks per rank: output chunk `q * chunks + j` of every
    /// rank is input chunk `j` of rank `q`.
    pub fn all_gather(nranks: u32, chunks: u32) -> Result<Self, DslError> {
        let out = nranks.saturating_mul(chunks);
        Self::new(CollectiveKind::Rootless(Kind::AllGather), nranks, chunks, out, chunks)
    }

    /// ReduceScatter with `chunks` output chunks per rank: output chunk `j` of rank `r` is the
    /// reduction of input chunk `r * chunks + j` of all ranks.
    pub fn reduce_scatter(nranks: u32, chunks: u32) -> Result<Self, DslError> {
        let input = nranks.saturating_mul(chunks);
        Self::new(CollectiveKind::Rootless(Kind::ReduceScatter), nranks, input, chunks, chunks)
    }

    /// AllToAll with `chunks` chunks per pair: output chunk `q * chunks + j` of rank `r` is
    /// input chunk `r * chunks + j` of rank `q`.
    pub fn all_to_all(nranks: u32, chunks: u32) -> Result<Self, DslError> {
        let n = nranks.saturating_mul(chunks);
        Self::new(CollectiveKind::Rootless(Kind::AllToAll), nranks, n, n, chunks)
    }

    /// Broadcast of `root`'s `chunks` input chunks to every rank's output.
    pub fn broadcast(nranks: u32, root: u32, chunks: u32) -> Result<Self, DslError> {
        if root >= nranks {
            return Err(DslError::RankOutOfRange { rank: root, nranks });
        }
        Self::new(CollectiveKind::Rooted { collective: Kind::Broadcast, root }, nranks, chunks, chunks, chunks)
    }

    /// The built-in collective a plan says it computes, with the plan's buffer shapes, so a plan
    /// loaded from disk can be verified. Custom collectives keep their postcondition with the
    /// program, not in the plan, so they cannot be rebuilt.
    pub fn from_plan(plan: &crate::plan::ExecutionPlan) -> Result<Self, DslError> {
        if plan.collective == CollectiveKind::Custom {
            return Err(DslError::Constraint {
                algorithm: "plan verification",
                reason: "a custom collective's postcondition is not stored in its plan".into(),
            });
        }
        Self::new(plan.collective, plan.nranks, plan.input_chunks, plan.output_chunks, plan.size_classes)
    }

    /// A user-defined collective with the given buffer shapes and postcondition.
    pub fn custom(
        nranks: u32,
        input_chunks: u32,
        output_chunks: u32,
        size_classes: u32,
        postcondition: impl Fn(u32, u32) -> Option<Vec<InputChunk>> + Send + Sync + 'static,
    ) -> Result<Self, DslError> {
        let mut c = Self::new(CollectiveKind::Custom, nranks, input_chunks, output_chunks, size_classes)?;
        c.custom = Some(Arc::new(postcondition));
        Ok(c)
    }

    /// Which collective this is.
    pub fn kind(&self) -> CollectiveKind {
        self.kind
    }

    /// Number of ranks.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// Chunks in each rank's input buffer.
    pub fn input_chunks(&self) -> u32 {
        self.input_chunks
    }

    /// Chunks in each rank's output buffer.
    pub fn output_chunks(&self) -> u32 {
        self.output_chunks
    }

    /// Chunks per block (the number of chunk size classes).
    pub fn size_classes(&self) -> u32 {
        self.size_classes
    }

    /// The input chunks whose reduction output chunk `index` of `rank` must hold (sorted), or
    /// `None` when it is unconstrained.
    pub fn postcondition(&self, rank: u32, index: u32) -> Option<Vec<InputChunk>> {
        let n = self.nranks;
        let k = self.size_classes;
        let all = |i: u32| (0..n).map(|q| InputChunk::new(q, i)).collect::<Vec<_>>();
        let mut chunks = match self.kind {
            CollectiveKind::Rootless(Kind::AllReduce) => all(index),
            CollectiveKind::Rootless(Kind::AllGather) => vec![InputChunk::new(index / k, index % k)],
            CollectiveKind::Rootless(Kind::ReduceScatter) => all(rank * k + index),
            CollectiveKind::Rootless(Kind::AllToAll) => vec![InputChunk::new(index / k, rank * k + index % k)],
            CollectiveKind::Rooted { collective: Kind::Broadcast, root } => vec![InputChunk::new(root, index)],
            // `Collective::new` refuses every other pairing.
            CollectiveKind::Rootless(_) | CollectiveKind::Rooted { .. } => return None,
            CollectiveKind::Custom => self.custom.as_ref().and_then(|f| f(rank, index))?,
        };
        chunks.sort_unstable();
        Some(chunks)
    }

    /// The same collective with every chunk split into `instances` consecutive sub-chunks:
    /// chunk `i` becomes sub-chunks `i * instances .. (i + 1) * instances`.
    ///
    /// The standard postconditions are formulas in `size_classes`, so scaling the shape is
    /// enough for them; a custom postcondition is wrapped to map indices.
    pub(crate) fn replicated(&self, instances: u32) -> Self {
        let mut c = self.clone();
        c.input_chunks *= instances;
        c.output_chunks *= instances;
        c.size_classes *= instances;
        if let (Some(inner), true) = (self.custom.clone(), instances > 1) {
            c.custom = Some(Arc::new(move |rank, index| {
                let (orig, part) = (index / instances, index % instances);
                let chunks = inner(rank, orig)?;
                Some(chunks.into_iter().map(|c| InputChunk::new(c.rank, c.index * instances + part)).collect())
            }));
        }
        c
    }
}
