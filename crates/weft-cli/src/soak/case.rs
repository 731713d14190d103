//! The calls of a soak. Call `k` of seed `s` is a pure function of `(s, k)` ([`case`]): every
//! rank draws the same call without exchanging anything, and `--seed s --only-call k` replays
//! one call alone, at the same root (Broadcast and Reduce draw theirs). Every drawn call is
//! valid: the operator suits the collective, the forced algorithm (if any) runs on this rank
//! count at the drawn root and supports the type and operator, an LL
//! algorithm's message fits its packet slot, and no buffer exceeds the soak's largest message.

use weft_coll::{Algorithm, CollConfig, CollectiveAlgorithms, Protocol};
use weft_types::{DataType, ReduceOp};

use weft_coll::Nodes;

use crate::harness::op_case::OpCase;
use crate::harness::rank::{Launch, Placement};
use crate::harness::roots::roots;
use crate::harness::{Collective, NcclTests, Shape};

/// What bounds the calls of a soak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Limits {
    /// Ranks of the communicator.
    pub(crate) ranks: usize,
    /// Largest buffer of a call, in bytes (nccl-tests' size: the larger of input and output);
    /// a call of one element per block exceeds it where that alone does
    /// ([`Limits::buffer_bytes`]).
    pub(crate) max_bytes: usize,
    /// The LL packet slot's payload (`CollConfig::ll_slot_bytes`): a forced LL algorithm gets
    /// messages of at most this many bytes, which it always carries.
    pub(crate) ll_slot_bytes: usize,
}

impl Limits {
    /// Bytes each of a rank's two buffers needs for every call these limits draw: the largest
    /// message, or one element of the widest type per rank block.
    pub(crate) fn buffer_bytes(&self) -> usize {
        self.max_bytes.max(8 * self.ranks.max(1))
    }
}

/// The collectives' round and packet-slot sizes a call runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Rounds {
    /// The configuration from the environment (the shipped sizes unless set).
    Shipped,
    /// The self-test matrix's small HB rounds and LL slots, so that messages of a few KiB
    /// already take the multi-round paths of every kernel.
    Small,
}

/// HB round and LL slot payload of [`Rounds::Small`].
const SMALL_CHUNK_BYTES: usize = 64 << 10;
const SMALL_LL_SLOT_BYTES: usize = 16 << 10;

impl Rounds {
    /// The collectives' configuration: `shipped`, or it with small rounds and slots.
    pub(crate) fn config(self, shipped: &CollConfig) -> CollConfig {
        match self {
            Rounds::Shipped => shipped.clone(),
            Rounds::Small => {
                CollConfig { chunk_bytes: SMALL_CHUNK_BYTES, ll_slot_bytes: SMALL_LL_SLOT_BYTES, ..shipped.clone() }
            }
        }
    }

    /// The LL slot payload under these rounds (`shipped`: the environment's).
    fn ll_slot_bytes(self, shipped: usize) -> usize {
        match self {
            Rounds::Shipped => shipped,
            Rounds::Small => SMALL_LL_SLOT_BYTES.min(shipped),
        }
    }
}

/// One call of a soak.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Case {
    /// Its place in the soak (`--only-call`).
    pub(crate) index: u64,
    pub(crate) collective: Collective,
    pub(crate) dtype: DataType,
    pub(crate) op: OpCase,
    /// Buffer lengths, the call's count (per rank block where nccl-tests counts so) and root.
    pub(crate) shape: Shape,
    pub(crate) placement: Placement,
    pub(crate) launch: Launch,
    pub(crate) rounds: Rounds,
    /// The algorithm forced through the selector, or `None`: the selector's own pick.
    pub(crate) algorithm: Option<Algorithm>,
    /// Seed of the call's inputs (the same on every rank).
    pub(crate) data_seed: u32,
}

impl Case {
    /// Launches of the call whose outputs are checked: a captured call's replays follow one
    /// eager launch (the warm-up an application runs before it captures).
    pub(crate) fn launches(&self) -> u32 {
        match self.launch {
            Launch::Eager => 1,
            Launch::Graph { replays } => 1 + replays,
        }
    }

    /// Bytes the call's checked launches moved, by nccl-tests' size (the larger buffer).
    pub(crate) fn bytes(&self) -> u64 {
        self.shape.bytes as u64 * u64::from(self.launches())
    }

    /// A one-line description: collective, algorithm, type, operator, count, root, placement,
    /// launch.
    pub(crate) fn describe(&self) -> String {
        let algorithm = self.algorithm.map_or("selector's pick".to_string(), |a| a.name().to_string());
        let placement = match self.placement {
            Placement::OutOfPlace => "out of place",
            Placement::InPlace => "in place",
        };
        let launch = match self.launch {
            Launch::Eager => "eager".to_string(),
            Launch::Graph { replays } => format!("eager, then graph, {replays} replays"),
        };
        let rounds = match self.rounds {
            Rounds::Shipped => "",
            Rounds::Small => ", small rounds",
        };
        self.describe_as(&algorithm, &format!("{placement}, {launch}{rounds}"))
    }

    /// The description with `algorithm` and `how` (placement, launch) as given.
    pub(crate) fn describe_as(&self, algorithm: &str, how: &str) -> String {
        let op = if self.collective.reduces() { format!(" {}", self.op.name()) } else { String::new() };
        let root = self.collective.at_root(self.shape.root);
        let (name, dtype, count) = (self.collective.name(), self.dtype.name(), self.shape.count);
        format!("{name} [{algorithm}] {dtype}{op} count {count}{root}, {how}")
    }
}

/// A small, stable generator (SplitMix64): the same draws on every machine and every release,
/// which a replay by seed needs (`rand`'s generators promise no such stability).
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0; the modulo bias is irrelevant here).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability 1 / `n`.
    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// An algorithm that runs on a soak's rank count, with the roots it runs at.
type Runnable = (Algorithm, Vec<u32>);

/// Draws the calls of soaks within some limits.
pub(crate) struct Generator {
    limits: Limits,
    /// Every algorithm that runs on this rank count, with the roots it runs at (a plan's
    /// availability takes building it: done once here, not per call).
    available: Vec<Runnable>,
}

impl Generator {
    pub(crate) fn new(limits: Limits) -> Self {
        let nodes = Nodes::one(limits.ranks);
        let available = Collective::ALL
            .into_iter()
            .flat_map(|c| c.algorithms())
            .filter(|a| a.available(limits.ranks))
            .map(|a| (a, roots(a, limits.ranks, &nodes)))
            .collect();
        Self { limits, available }
    }

    /// Call `index` of the soak of `seed`.
    pub(crate) fn case(&self, seed: u64, index: u64) -> Case {
        case(seed, index, &self.limits, &self.available)
    }
}

/// Call `index` of the soak of `seed` within `limits`, forcing only algorithms of `available`
/// (each with the roots it runs at).
fn case(seed: u64, index: u64, limits: &Limits, available: &[Runnable]) -> Case {
    let mut draw = Draw(seed ^ index.wrapping_mul(0xd6e8_feb8_6659_fd93));
    let collective = draw.pick(&Collective::ALL);
    let dtype = draw.pick(&DataType::ALL);
    let op = if collective.reduces() {
        draw.pick(&[
            OpCase::Plain(ReduceOp::Sum),
            OpCase::Plain(ReduceOp::Prod),
            OpCase::Plain(ReduceOp::Max),
            OpCase::Plain(ReduceOp::Min),
            OpCase::Plain(ReduceOp::Avg),
            OpCase::PreMulSumValue,
            OpCase::PreMulSumDevice,
        ])
    } else {
        OpCase::Plain(ReduceOp::Sum)
    };
    // One call in four leaves the choice to the selector; the others force an algorithm that
    // can run the call.
    let candidates: Vec<&Runnable> = available
        .iter()
        .filter(|(a, _)| a.collective() == collective && a.supports(dtype) && a.supports_op(op.op()))
        .collect();
    let forced = if candidates.is_empty() || draw.one_in(4) { None } else { Some(draw.pick(&candidates)) };
    let rounds = draw.pick(&[Rounds::Shipped, Rounds::Small]);
    let slot = rounds.ll_slot_bytes(limits.ll_slot_bytes);
    // An LL algorithm whose slot cannot hold one element per block is not forced.
    let forced =
        forced.filter(|(a, _)| a.protocol() != Protocol::Ll || slot >= dtype.size() * blocks(collective, limits));
    let algorithm = forced.map(|(a, _)| *a);
    let ll_slot = algorithm.filter(|a| a.protocol() == Protocol::Ll).map(|_| slot);
    let count = draw_count(&mut draw, collective, dtype, limits, ll_slot);
    let placement = draw.pick(&[Placement::OutOfPlace, Placement::InPlace]);
    let launch = if draw.one_in(2) { Launch::Eager } else { Launch::Graph { replays: 2 + draw.below(2) as u32 } };
    let data_seed = draw.next() as u32;
    // Drawn last, so that the calls without a root are those the same seed drew before roots
    // were: any rank, or one of those the forced algorithm runs at.
    let every_rank: Vec<u32> = collective.roots(limits.ranks as u32).collect();
    let root = if collective.rooted() { draw.pick(forced.map_or(&every_rank, |(_, roots)| roots)) } else { 0 };
    let shape = shape_of(collective, dtype, limits, count, root);
    Case { index, collective, dtype, op, shape, placement, launch, rounds, algorithm, data_seed }
}

/// The count per block of a call: drawn log-uniformly up to what the limits allow (a forced LL
/// algorithm: a message within its packet slot, `ll_slot`), odd counts as likely as even ones,
/// and one call in eight of a single element.
fn draw_count(
    draw: &mut Draw,
    collective: Collective,
    dtype: DataType,
    limits: &Limits,
    ll_slot: Option<usize>,
) -> usize {
    let (elt, blocks) = (dtype.size(), blocks(collective, limits));
    let largest = ll_slot.map_or(limits.max_bytes, |slot| slot.min(limits.max_bytes));
    let max_count = (largest / (elt * blocks)).max(1);
    if draw.one_in(8) {
        1
    } else {
        let octaves = usize::BITS - max_count.leading_zeros(); // 1 ..= log2(max_count) + 1
        let low = 1usize << draw.below(octaves as usize);
        (low + draw.below(low)).min(max_count)
    }
}

/// The shape of a call of `count` elements per block at `root`.
fn shape_of(collective: Collective, dtype: DataType, limits: &Limits, count: usize, root: u32) -> Shape {
    let (elt, ranks) = (dtype.size(), limits.ranks.max(1));
    let bytes = count * blocks(collective, limits) * elt;
    // A count of at least one per block always has a shape.
    collective.shape(bytes, elt, ranks, root).unwrap_or(Shape {
        send_count: 0,
        recv_count: 0,
        count: 0,
        bytes: 0,
        root,
    })
}

/// Blocks of the call's count in its larger buffer: one per rank where nccl-tests counts per
/// rank block (allgather, reducescatter, alltoall), else one.
fn blocks(collective: Collective, limits: &Limits) -> usize {
    match collective {
        Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => limits.ranks.max(1),
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(ranks: usize) -> Limits {
        Limits { ranks, max_bytes: 4 << 20, ll_slot_bytes: 512 << 10 }
    }

    fn generator(ranks: usize) -> Generator {
        Generator::new(limits(ranks))
    }

    #[test]
    fn every_rank_draws_the_same_sequence_and_a_replay_draws_the_same_call() {
        for seed in [0u64, 1, 0xdead_beef, u64::MAX] {
            let g = generator(4);
            let run: Vec<Case> = (0..500).map(|k| g.case(seed, k)).collect();
            // Another rank (thread, with a generator of its own) draws the same calls.
            let other = std::thread::spawn(move || {
                let g = generator(4);
                (0..500).map(|k| g.case(seed, k)).collect::<Vec<_>>()
            });
            assert_eq!(other.join().unwrap(), run);
            // Call k alone, as --only-call k draws it.
            for k in [0u64, 1, 77, 499] {
                assert_eq!(generator(4).case(seed, k), run[k as usize]);
            }
        }
        assert_ne!(generator(4).case(1, 5), generator(4).case(2, 5));
    }

    #[test]
    fn every_drawn_call_is_valid() {
        for ranks in [1usize, 2, 3, 4, 8] {
            let (l, g) = (limits(ranks), generator(ranks));
            for k in 0..3000 {
                let c = g.case(42, k);
                let what = c.describe();
                assert!(c.shape.count >= 1, "{what}: no element");
                assert!(c.shape.bytes <= l.max_bytes, "{what}: {} bytes", c.shape.bytes);
                let root = c.shape.root;
                assert_eq!(Some(c.shape), c.collective.shape(c.shape.bytes, c.dtype.size(), ranks, root), "{what}");
                assert!((root as usize) < ranks && (c.collective.rooted() || root == 0), "{what}");
                if !c.collective.reduces() {
                    assert_eq!(c.op, OpCase::Plain(ReduceOp::Sum), "{what}");
                }
                if let Some(a) = c.algorithm {
                    assert_eq!(a.collective(), c.collective, "{what}");
                    assert!(a.available(ranks) && a.supports(c.dtype) && a.supports_op(c.op.op()), "{what}");
                    if a.protocol() == Protocol::Ll {
                        let slot =
                            c.rounds.config(&CollConfig { ll_slot_bytes: l.ll_slot_bytes, ..CollConfig::default() });
                        assert!(c.shape.bytes <= slot.ll_slot_bytes, "{what}: past the LL slot");
                    }
                }
                if let Launch::Graph { replays } = c.launch {
                    assert!(replays >= 2, "{what}");
                }
            }
        }
    }

    /// Every algorithm available at each rank count from 1 to 8 (building the plans once).
    fn available() -> &'static [Vec<Runnable>] {
        static AVAILABLE: std::sync::OnceLock<Vec<Vec<Runnable>>> = std::sync::OnceLock::new();
        AVAILABLE.get_or_init(|| (1..=8).map(|ranks| Generator::new(limits(ranks)).available).collect())
    }

    proptest::proptest! {
        /// Any seed, rank count, largest message and slot: every call is valid, and call k
        /// drawn alone is call k of the sequence.
        #[test]
        fn any_soak_draws_valid_calls_and_replays_them(
            seed: u64,
            ranks in 1usize..=8,
            max_bytes in 1usize..=(16 << 20),
            slot_words in 1usize..=(1 << 16),
            first in 0u64..1_000_000,
        ) {
            let limits = Limits { ranks, max_bytes, ll_slot_bytes: slot_words * 8 };
            let g = Generator { limits, available: available()[ranks - 1].clone() };
            let run: Vec<Case> = (first..first + 64).map(|k| g.case(seed, k)).collect();
            for (k, c) in (first..).zip(&run) {
                proptest::prop_assert_eq!(&g.case(seed, k), c);
                proptest::prop_assert_eq!(c.index, k);
                let one_per_block = c.dtype.size() * blocks(c.collective, &limits);
                // At least one element per block; within the limit unless one element per block
                // already exceeds it, and always within the buffers.
                proptest::prop_assert!(c.shape.count >= 1);
                proptest::prop_assert!(c.shape.bytes <= max_bytes.max(one_per_block), "{}", c.describe());
                proptest::prop_assert!(c.shape.bytes <= limits.buffer_bytes(), "{}", c.describe());
                if let Some(a) = c.algorithm {
                    proptest::prop_assert!(a.supports(c.dtype) && a.supports_op(c.op.op()) && a.available(ranks));
                    if a.protocol() == Protocol::Ll {
                        let slot = c.rounds.ll_slot_bytes(limits.ll_slot_bytes);
                        proptest::prop_assert!(c.shape.bytes <= slot, "{}: past the LL slot", c.describe());
                    }
                }
            }
        }
    }

    #[test]
    fn a_long_soak_covers_every_dimension() {
        let (l, g) = (limits(2), generator(2));
        let cases: Vec<Case> = (0..20_000).map(|k| g.case(7, k)).collect();
        for c in Collective::ALL {
            assert!(cases.iter().any(|x| x.collective == c), "{c} never drawn");
            for a in c.algorithms().filter(|a| a.available(2)) {
                assert!(cases.iter().any(|x| x.algorithm == Some(a)), "{a} never forced");
            }
        }
        for t in DataType::ALL {
            assert!(cases.iter().any(|x| x.dtype == t), "{} never drawn", t.name());
        }
        for op in [OpCase::PreMulSumDevice, OpCase::PreMulSumValue, OpCase::Plain(ReduceOp::Avg)] {
            assert!(cases.iter().any(|x| x.op == op), "{op:?} never drawn");
        }
        assert!(cases.iter().any(|x| x.algorithm.is_none()));
        assert!(cases.iter().any(|x| x.placement == Placement::InPlace));
        assert!(cases.iter().any(|x| x.placement == Placement::OutOfPlace));
        assert!(cases.iter().any(|x| x.launch == Launch::Eager));
        assert!(cases.iter().any(|x| x.rounds == Rounds::Small) && cases.iter().any(|x| x.rounds == Rounds::Shipped));
        assert!(cases.iter().any(|x| x.launch == Launch::Graph { replays: 3 }));
        let odd = cases.iter().filter(|x| x.shape.count % 2 == 1 && x.shape.count > 1).count();
        assert!(odd > cases.len() / 5, "only {odd} odd counts");
        assert!(cases.iter().any(|x| x.shape.count == 1));
        assert!(cases.iter().any(|x| x.shape.bytes > l.max_bytes / 2), "no large message");
    }

    /// At every rank count, Broadcast and Reduce calls come at every root; a replay of a call
    /// draws its root again, and its description names it.
    #[test]
    fn rooted_calls_come_at_every_root_and_replay_at_theirs() {
        for ranks in 1..=8usize {
            let (g, replay) = (generator(ranks), generator(ranks));
            let cases: Vec<Case> = (0..3000).map(|k| g.case(5, k)).collect();
            for c in [Collective::Broadcast, Collective::Reduce] {
                let mut roots: Vec<u32> = cases.iter().filter(|x| x.collective == c).map(|x| x.shape.root).collect();
                roots.sort_unstable();
                roots.dedup();
                assert_eq!(roots, (0..ranks as u32).collect::<Vec<_>>(), "{c} on {ranks} ranks");
            }
            for x in cases.iter().filter(|x| x.collective.rooted()) {
                assert_eq!(replay.case(5, x.index).shape.root, x.shape.root);
                assert!(x.describe().contains(&format!(" root {}, ", x.shape.root)), "{}", x.describe());
            }
        }
    }
}
