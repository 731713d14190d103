//! The symbolic state of a traced program and the chunk DAG it builds.
//!
//! Every chunk location (rank, buffer, index) holds a symbolic value: the sorted multiset of
//! input chunks whose reduction it contains. Each traced operation records its dependencies on
//! earlier operations: read-after-write (true data edges) and write-after-read /
//! write-after-write (the "false" edges of reused locations), each tagged with the rank whose
//! memory carries the conflict.

use std::collections::BTreeSet;
use std::rc::Rc;

use super::{Buffer, Collective, DslError, Hints, InputChunk};
use crate::plan::limits;

/// `count` chunks of one buffer of one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ChunkRange {
    pub(crate) rank: u32,
    pub(crate) buffer: Buffer,
    pub(crate) index: u32,
    pub(crate) count: u32,
}

impl ChunkRange {
    pub(crate) fn slots(&self) -> impl Iterator<Item = (u32, Buffer, u32)> + '_ {
        (self.index..self.index + self.count).map(|i| (self.rank, self.buffer, i))
    }

    fn overlaps(&self, other: &ChunkRange) -> bool {
        self.rank == other.rank
            && self.buffer == other.buffer
            && self.index < other.index + other.count
            && other.index < self.index + self.count
    }
}

/// A symbolic chunk value: the sorted multiset of input chunks reduced into it.
pub(crate) type Value = Rc<Vec<InputChunk>>;

/// One chunk location.
#[derive(Clone, Debug, Default)]
pub(crate) struct Slot {
    pub(crate) value: Option<Value>,
    /// Size class: fixed for input/output chunks, set by the first write for scratch chunks.
    pub(crate) class: Option<u32>,
    pub(crate) version: u32,
    pub(crate) writer: Option<usize>,
    /// Operations that read the current version.
    readers: Vec<usize>,
    /// Whether any operation has read or written this location.
    pub(crate) touched: bool,
}

/// What a traced operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TraceKind {
    /// `dst := src`.
    Copy,
    /// `dst := local ⊕ src`, with `local` and `dst` on the same rank.
    Reduce,
}

/// One node of the chunk DAG.
#[derive(Clone, Debug)]
pub(crate) struct TraceOp {
    pub(crate) kind: TraceKind,
    /// Copy source, or the (possibly remote) second operand of a reduce.
    pub(crate) src: ChunkRange,
    /// First operand of a reduce (on the destination rank).
    pub(crate) local: Option<ChunkRange>,
    pub(crate) dst: ChunkRange,
    pub(crate) hints: Hints,
    /// `(earlier op, rank whose memory carries the conflict)`.
    pub(crate) deps: BTreeSet<(usize, u32)>,
    /// No operation touched any destination chunk before this one.
    pub(crate) dst_virgin: bool,
    /// Writer of each `src` chunk when it was read.
    pub(crate) src_writers: Vec<Option<usize>>,
    /// Operations that read the version this operation wrote.
    pub(crate) out_readers: BTreeSet<usize>,
    /// Some output-buffer chunk still holds this operation's version at the end.
    pub(crate) out_final: bool,
}

/// The traced program: symbolic buffers of every rank plus the chunk DAG.
#[derive(Clone, Debug)]
pub(crate) struct Trace {
    pub(crate) nranks: u32,
    pub(crate) input_chunks: u32,
    pub(crate) output_chunks: u32,
    /// `slots[rank][buffer.position()][index]`.
    slots: Vec<[Vec<Slot>; 3]>,
    pub(crate) ops: Vec<TraceOp>,
}

impl Trace {
    /// The initial state: inputs hold their precondition, everything else is uninitialised.
    pub(crate) fn new(c: &Collective) -> Self {
        let k = c.size_classes();
        let slots = (0..c.nranks())
            .map(|rank| {
                let input = (0..c.input_chunks())
                    .map(|i| Slot {
                        value: Some(Rc::new(vec![InputChunk::new(rank, i)])),
                        class: Some(i % k),
                        ..Slot::default()
                    })
                    .collect();
                let output = (0..c.output_chunks()).map(|i| Slot { class: Some(i % k), ..Slot::default() }).collect();
                [input, output, Vec::new()]
            })
            .collect();
        Self {
            nranks: c.nranks(),
            input_chunks: c.input_chunks(),
            output_chunks: c.output_chunks(),
            slots,
            ops: Vec::new(),
        }
    }

    pub(crate) fn slot(&self, rank: u32, buffer: Buffer, index: u32) -> Option<&Slot> {
        self.slots.get(rank as usize)?.get(buffer.position())?.get(index as usize)
    }

    fn slot_mut(&mut self, rank: u32, buffer: Buffer, index: u32) -> Option<&mut Slot> {
        self.slots.get_mut(rank as usize)?.get_mut(buffer.position())?.get_mut(index as usize)
    }

    /// Chunks currently in `rank`'s scratch buffer.
    pub(crate) fn scratch_len(&self, rank: u32) -> u32 {
        self.slots.get(rank as usize).map_or(0, |s| s[Buffer::Scratch.position()].len() as u32)
    }

    /// Checks that `range` exists and every chunk of it holds a value.
    pub(crate) fn check_readable(&self, range: &ChunkRange) -> Result<(), DslError> {
        self.check_rank_count(range)?;
        let fixed = match range.buffer {
            Buffer::Input => Some(self.input_chunks),
            Buffer::Output => Some(self.output_chunks),
            Buffer::Scratch => None,
        };
        if let Some(chunks) = fixed {
            self.check_end(range, chunks)?;
        }
        for (rank, buffer, index) in range.slots() {
            let initialised = self.slot(rank, buffer, index).is_some_and(|s| s.value.is_some());
            if !initialised {
                return Err(DslError::Uninitialized { rank, buffer, index });
            }
        }
        Ok(())
    }

    fn check_rank_count(&self, range: &ChunkRange) -> Result<(), DslError> {
        if range.rank >= self.nranks {
            return Err(DslError::RankOutOfRange { rank: range.rank, nranks: self.nranks });
        }
        if range.count == 0 {
            return Err(DslError::EmptyChunk);
        }
        Ok(())
    }

    fn check_end(&self, range: &ChunkRange, chunks: u32) -> Result<(), DslError> {
        let end = u64::from(range.index) + u64::from(range.count);
        if end > u64::from(chunks) {
            return Err(DslError::IndexOutOfRange {
                rank: range.rank,
                buffer: range.buffer,
                index: range.index,
                end,
                chunks,
            });
        }
        Ok(())
    }

    /// Checks that `range` may be written, growing the scratch buffer as needed.
    fn prepare_write(&mut self, range: &ChunkRange) -> Result<(), DslError> {
        self.check_rank_count(range)?;
        match range.buffer {
            Buffer::Input => Err(DslError::WriteToInput { rank: range.rank, index: range.index }),
            Buffer::Output => self.check_end(range, self.output_chunks),
            Buffer::Scratch => {
                self.check_end(range, limits::MAX_CHUNKS)?;
                let end = (range.index + range.count) as usize;
                let scratch = &mut self.slots[range.rank as usize][Buffer::Scratch.position()];
                if scratch.len() < end {
                    scratch.resize(end, Slot::default());
                }
                Ok(())
            }
        }
    }

    /// Versions of every chunk of `range` (0 for chunks that do not exist).
    pub(crate) fn versions(&self, range: &ChunkRange) -> Vec<u32> {
        range.slots().map(|(r, b, i)| self.slot(r, b, i).map_or(0, |s| s.version)).collect()
    }

    /// Executes one operation symbolically and appends it to the chunk DAG.
    pub(crate) fn apply(
        &mut self,
        kind: TraceKind,
        src: ChunkRange,
        local: Option<ChunkRange>,
        dst: ChunkRange,
        hints: Hints,
    ) -> Result<usize, DslError> {
        let id = self.ops.len();
        self.check_readable(&src)?;
        if let Some(local) = &local {
            self.check_readable(local)?;
            if local.count != src.count {
                return Err(DslError::CountMismatch { left: local.count, right: src.count });
            }
        }
        self.prepare_write(&dst)?;
        check_overlap(kind, &src, local.as_ref(), &dst)?;

        // Values and classes of the result.
        let mut results = Vec::with_capacity(src.count as usize);
        for k in 0..src.count {
            let s = self.read_slot(src.rank, src.buffer, src.index + k)?;
            let (class, value) = match &local {
                None => s,
                Some(l) => {
                    let (lclass, lvalue) = self.read_slot(l.rank, l.buffer, l.index + k)?;
                    if lclass != s.0 {
                        return Err(DslError::SizeClassMismatch {
                            rank: l.rank,
                            buffer: l.buffer,
                            index: l.index + k,
                            expected: lclass,
                            found: s.0,
                        });
                    }
                    let mut merged: Vec<InputChunk> = lvalue.iter().chain(s.1.iter()).copied().collect();
                    merged.sort_unstable();
                    (lclass, Rc::new(merged))
                }
            };
            if let Some(expected) = self.slot(dst.rank, dst.buffer, dst.index + k).and_then(|s| s.class)
                && expected != class
            {
                return Err(DslError::SizeClassMismatch {
                    rank: dst.rank,
                    buffer: dst.buffer,
                    index: dst.index + k,
                    expected,
                    found: class,
                });
            }
            results.push((class, value));
        }

        // Dependencies.
        let mut deps = BTreeSet::new();
        let mut src_writers = Vec::with_capacity(src.count as usize);
        for (r, b, i) in src.slots() {
            let writer = self.slot(r, b, i).and_then(|s| s.writer);
            src_writers.push(writer);
            deps.extend(writer.map(|w| (w, r)));
        }
        for (r, b, i) in local.iter().flat_map(ChunkRange::slots) {
            deps.extend(self.slot(r, b, i).and_then(|s| s.writer).map(|w| (w, r)));
        }
        let mut dst_virgin = true;
        for (r, b, i) in dst.slots() {
            if let Some(s) = self.slot(r, b, i) {
                deps.extend(s.writer.map(|w| (w, r)));
                deps.extend(s.readers.iter().map(|&x| (x, r)));
                dst_virgin &= !s.touched;
            }
        }
        deps.retain(|&(x, _)| x != id);

        // State update: reads first (an in-place reduce reads its destination), then writes.
        let reads: Vec<(u32, Buffer, u32)> = src.slots().chain(local.iter().flat_map(ChunkRange::slots)).collect();
        for (r, b, i) in reads {
            if let Some(s) = self.slot_mut(r, b, i) {
                s.readers.push(id);
                s.touched = true;
                if let Some(w) = s.writer {
                    self.ops[w].out_readers.insert(id);
                }
            }
        }
        for ((r, b, i), (class, value)) in dst.slots().zip(results) {
            if let Some(s) = self.slot_mut(r, b, i) {
                s.value = Some(value);
                s.class = Some(class);
                s.version += 1;
                s.writer = Some(id);
                s.readers.clear();
                s.touched = true;
            }
        }
        self.ops.push(TraceOp {
            kind,
            src,
            local,
            dst,
            hints,
            deps,
            dst_virgin,
            src_writers,
            out_readers: BTreeSet::new(),
            out_final: false,
        });
        Ok(id)
    }

    fn read_slot(&self, rank: u32, buffer: Buffer, index: u32) -> Result<(u32, Value), DslError> {
        let slot = self.slot(rank, buffer, index);
        match slot.and_then(|s| Some((s.class?, s.value.clone()?))) {
            Some(v) => Ok(v),
            None => Err(DslError::Uninitialized { rank, buffer, index }),
        }
    }

    /// Marks the operations whose versions survive in output buffers.
    pub(crate) fn finish(&mut self) {
        let mut finals = Vec::new();
        for rank in &self.slots {
            for slot in &rank[Buffer::Output.position()] {
                finals.extend(slot.writer);
            }
        }
        for w in finals {
            self.ops[w].out_final = true;
        }
    }
}

fn check_overlap(
    kind: TraceKind,
    src: &ChunkRange,
    local: Option<&ChunkRange>,
    dst: &ChunkRange,
) -> Result<(), DslError> {
    let bad = |a: &ChunkRange| {
        let first = a.index.max(dst.index);
        Err(DslError::Overlap { rank: dst.rank, buffer: dst.buffer, index: first })
    };
    match kind {
        // A copy onto (part of) itself is always a mistake.
        TraceKind::Copy if src.overlaps(dst) => bad(src),
        TraceKind::Reduce => {
            for operand in std::iter::once(src).chain(local) {
                if operand.overlaps(dst) && operand != dst {
                    return bad(operand);
                }
            }
            Ok(())
        }
        TraceKind::Copy => Ok(()),
    }
}
