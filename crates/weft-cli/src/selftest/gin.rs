//! `weft selftest --only gin`: the GIN examples (AllToAll, ring AllGather, halo exchange) on
//! every rank, within one node (every peer over LSA) and across virtual nodes of one rank
//! (every peer through the proxy, over TCP, over the emulated NIC, and over the emulated NIC in
//! chaos mode, which lands a connection's writes out of order). Each example runs two
//! eager calls and two replays of one captured call, back to back on the same signal, each
//! with fresh random inputs (every rank derives every rank's from one shared seed) and a
//! poisoned output, and every element is checked against the host reference.

use std::sync::Arc;
use std::time::Duration;

use weft_core::{Communicator, KernelLibrary};
use weft_gin::examples::{AllToAllWindows, CallSlots, CallTarget, GinExamples, GinGraph, reference};
use weft_gin::{DevComm, GinError, Requirements};
use weft_gpu::{DeviceBuffer, DeviceSlice, DeviceSliceMut, Module, Stream};

use super::report::RankReport;
use crate::harness::gin_backend::GinBackend;

/// Elements (`u32`) per chunk: 37 (148 bytes: chunks off 16-byte alignment, copied byte by
/// byte) and 64 Ki (copied in 16-byte words).
const CHUNKS: [usize; 2] = [37, 1 << 16];
const POISON: u8 = 0xA5;
/// Each example has a signal of its own; the calls share one world barrier.
const SLOTS: [CallSlots; 3] =
    [CallSlots { signal: 0, barrier: 0 }, CallSlots { signal: 1, barrier: 0 }, CallSlots { signal: 2, barrier: 0 }];
/// Windows of a case's DevComm: AllToAll send and receive, the AllGather's data, the halo's
/// field (each as large as the case's input or output, whichever it holds).
const SEND: u32 = 0;
const RECV: u32 = 1;
const DATA: u32 = 2;
const FIELD: u32 = 3;
const RUNS: [&str; 4] = ["eager call 1", "eager call 2", "graph replay 1", "graph replay 2"];

#[derive(Clone, Copy, Debug)]
enum Example {
    AllToAll,
    RingAllGather,
    Halo,
}

impl Example {
    const ALL: [Example; 3] = [Example::AllToAll, Example::RingAllGather, Example::Halo];

    fn name(self) -> &'static str {
        match self {
            Example::AllToAll => "AllToAll (block puts, proxy peers first)",
            Example::RingAllGather => "ring AllGather (block puts)",
            Example::Halo => "halo exchange (block puts)",
        }
    }

    fn slots(self) -> CallSlots {
        SLOTS[self as usize]
    }

    /// (input, output) elements for chunks of `chunk` over `world` ranks.
    fn lens(self, chunk: usize, world: usize) -> (usize, usize) {
        match self {
            Example::AllToAll => (world * chunk, world * chunk),
            Example::RingAllGather => (chunk, world * chunk),
            Example::Halo => (chunk, chunk + 2 * halo(chunk)),
        }
    }

    fn reference(self, inputs: &[Vec<u32>], rank: usize, chunk: usize) -> Vec<u32> {
        match self {
            Example::AllToAll => reference::alltoall(inputs, rank),
            Example::RingAllGather => reference::allgather(inputs),
            Example::Halo => reference::halo(inputs, halo(chunk), rank),
        }
    }

    /// Where element `i` of rank `rank`'s output comes from.
    fn source(self, i: usize, chunk: usize, rank: usize, world: usize) -> String {
        match self {
            Example::AllToAll => format!("element {} of the chunk from rank {}", i % chunk, i / chunk),
            Example::RingAllGather => format!("element {} of rank {}'s chunk", i % chunk, i / chunk),
            Example::Halo if i < halo(chunk) => {
                format!("element {i} of the left halo, from rank {}", (rank + world - 1) % world)
            }
            Example::Halo if i < halo(chunk) + chunk => format!("interior element {}", i - halo(chunk)),
            Example::Halo => {
                format!("element {} of the right halo, from rank {}", i - halo(chunk) - chunk, (rank + 1) % world)
            }
        }
    }

    fn call<'scope>(
        self,
        examples: &'scope GinExamples<'_>,
        target: &impl CallTarget<'scope>,
        chunk: usize,
        input: &DeviceSlice<'_, u32>,
        output: &mut DeviceSliceMut<'_, u32>,
    ) -> Result<(), GinError> {
        let slots = self.slots();
        match self {
            Example::AllToAll => {
                examples.alltoall(target, AllToAllWindows { send: SEND, recv: RECV }, slots, input, output)
            }
            Example::RingAllGather => examples.ring_allgather(target, DATA, slots, input, output),
            Example::Halo => examples.halo(target, (FIELD, halo(chunk)), slots, input, output),
        }
    }
}

/// Halo elements around an interior of `chunk`.
fn halo(chunk: usize) -> usize {
    chunk / 8 + 1
}

/// Element `i` of rank `rank`'s input of run `run` (splitmix64 of everything that names it).
fn element(seed: u64, run: usize, rank: usize, i: usize) -> u32 {
    let mut z = seed ^ ((run as u64) << 56) ^ ((rank as u64) << 40) ^ i as u64;
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

/// Runs every example over every backend on this rank (collective).
pub(crate) fn run(comm: &Communicator, label: &str, report: &mut RankReport) {
    let backends: &[GinBackend] = if comm.world_size() > 1 {
        &[GinBackend::Lsa, GinBackend::Tcp, GinBackend::EmulatedNic, GinBackend::Chaos]
    } else {
        &[GinBackend::Lsa]
    };
    for &backend in backends {
        if let Err(e) = run_backend(comm, backend, label, report) {
            report.record(format!("{label}gin {}: set-up", backend.name()), Err(e));
        }
        if let Err(e) = comm.barrier() {
            report.record(format!("{label}gin: barrier after {}", backend.name()), Err(e.to_string()));
            return;
        }
    }
}

fn run_backend(comm: &Communicator, backend: GinBackend, label: &str, report: &mut RankReport) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let env = backend.env(comm.env());
    let library = KernelLibrary::new(env.cache_dir.clone(), &weft_gin::device_code::KERNELS);
    let module = library.load(comm.device(), weft_gin::device_code::UNIT).map_err(|e| err(&e))?.module;
    let sub = Communicator::new(Arc::clone(comm.bootstrap()), comm.device().clone(), env).map_err(|e| err(&e))?;
    let world = sub.world_size();
    let seed = shared_seed(&sub)?;
    for chunk in CHUNKS {
        for example in Example::ALL {
            let result = check_case(&sub, &module, example, chunk, seed);
            let failed = result.is_err();
            let name = format!(
                "{label}gin {}: {} of {chunk} elements per chunk on {world} ranks, 2 eager calls and 2 graph replays",
                backend.name(),
                example.name()
            );
            report.record(name, result);
            // A wait that gave up stays recorded and would end every later wait at once; every
            // rank's kernels have ended (the barrier that ends each case).
            if failed {
                sub.clear_device_failure().map_err(|e| err(&e))?;
            }
        }
    }
    Ok(())
}

/// One example at one size on a device communicator of its own (a failed case leaves signal
/// and barrier counts behind that would fail the next ones).
fn check_case(
    comm: &Communicator,
    module: &Arc<Module>,
    example: Example,
    chunk: usize,
    seed: u64,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("rank {}: {e}", comm.rank());
    let bytes = |elements: usize| (4 * elements.max(1)) as u64;
    let (input, output) = example.lens(chunk, comm.world_size());
    let requirements = Requirements {
        signals: SLOTS.len() as u32,
        world_barriers: 1,
        windows: vec![bytes(input), bytes(output), bytes(output), bytes(output)],
        ..Default::default()
    };
    let dev = DevComm::new(comm, &requirements).map_err(|e| err(&e))?;
    let examples = GinExamples::new(&dev, module).map_err(|e| err(&e))?;
    let checked = Case { comm, dev: &dev, examples: &examples, example, chunk, seed }
        .check()
        .map_err(|e| format!("{e} (inputs of seed {seed:#x})"));
    // No rank frees its heap and proxy while a peer's kernel may still use them.
    let ended = comm.barrier().map_err(|e| err(&e));
    checked.and(ended)
}

/// Rank 0's random seed, on every rank.
fn shared_seed(comm: &Communicator) -> Result<u64, String> {
    let mine = rand::random::<u64>().to_le_bytes();
    let root = comm.bootstrap().broadcast(0, Some(&mine)).map_err(|e| format!("rank {}: {e}", comm.rank()))?;
    let mut word = [0u8; 8];
    word.copy_from_slice(root.get(..8).ok_or("a short seed")?);
    Ok(u64::from_le_bytes(word))
}

struct Case<'a> {
    comm: &'a Communicator,
    dev: &'a DevComm,
    examples: &'a GinExamples<'a>,
    example: Example,
    chunk: usize,
    seed: u64,
}

impl Case<'_> {
    fn check(&self) -> Result<(), String> {
        let (rank, world) = (self.comm.rank(), self.comm.world_size());
        let device = self.comm.device();
        let err = |e: &dyn std::fmt::Display| format!("rank {rank}: {e}");
        let (in_len, out_len) = self.example.lens(self.chunk, world);
        let stream = Stream::new(device).map_err(|e| err(&e))?;
        let mut input = DeviceBuffer::<u32>::new(device, in_len).map_err(|e| err(&e))?;
        let mut output = DeviceBuffer::<u32>::new(device, out_len).map_err(|e| err(&e))?;
        // Captured before any launch: instantiating a graph may wait for the GPU, which a peer's
        // kernel sharing it could hold while it waits for this rank.
        let graph = GinGraph::capture(self.dev, &stream, |capture| {
            self.example.call(self.examples, capture, self.chunk, &input.as_slice(), &mut output.as_mut_slice())
        })
        .map_err(|e| err(&e));
        let graph = self.agree("the capture", graph)?;
        let timeout = self.comm.env().device_timeout + Duration::from_secs(30);
        for (run, how) in RUNS.iter().enumerate() {
            let inputs: Vec<Vec<u32>> =
                (0..world).map(|r| (0..in_len).map(|i| element(self.seed, run, r, i)).collect()).collect();
            input.copy_from_host(&inputs[rank]).map_err(|e| err(&e))?;
            output.as_mut_slice().fill_bytes(POISON).map_err(|e| err(&e))?;
            self.comm.settle_before_launch().map_err(|e| err(&e))?;
            let (called, idle) = stream.launch_scope(timeout, "a GIN example", |scope| {
                if run < 2 {
                    self.example.call(self.examples, scope, self.chunk, &input.as_slice(), &mut output.as_mut_slice())
                } else {
                    graph.replay(scope)
                }
            });
            // On a shared GPU the reads below and the next run's writes serialise the GPU's
            // streams: every rank's kernel ends first.
            self.comm.settle_before_launch().map_err(|e| err(&e))?;
            let launched = called.map_err(|e| err(&e)).and(idle.map_err(|e| err(&e)));
            let checked = output.to_vec().map_err(|e| err(&e)).and_then(|got| {
                let compared = self.compare(&got, &self.example.reference(&inputs, rank, self.chunk));
                match self.comm.device_failure() {
                    Some(f) => Err(format!(
                        "rank {} timed out in {}: index {}, needed {}, saw {}; {}",
                        f.rank,
                        f.op,
                        f.peer,
                        f.expected,
                        f.observed,
                        compared.err().unwrap_or_else(|| "every element right".into())
                    )),
                    None => compared,
                }
            });
            self.agree(how, launched.and(checked).map_err(|e| format!("{how}: {e}")))?;
        }
        Ok(())
    }

    /// `mine`, once every rank has told whether its part passed: all ranks go on or stop
    /// together, so their collective calls stay matched.
    fn agree<T>(&self, what: &str, mine: Result<T, String>) -> Result<T, String> {
        let rank = self.comm.rank();
        let flags =
            self.comm.bootstrap().all_gather(&[u8::from(mine.is_err())]).map_err(|e| format!("rank {rank}: {e}"));
        let failed: Vec<usize> =
            flags?.iter().enumerate().filter(|(_, f)| f.first() != Some(&0)).map(|(r, _)| r).collect();
        match mine {
            Ok(_) if !failed.is_empty() => Err(format!("{what}: stopped, since rank(s) {failed:?} failed")),
            mine => mine,
        }
    }

    /// The first wrong element of rank `rank`'s output, where it comes from, and how many are.
    fn compare(&self, got: &[u32], want: &[u32]) -> Result<(), String> {
        let (rank, world) = (self.comm.rank(), self.comm.world_size());
        let wrong = got.iter().zip(want).filter(|(g, w)| g != w).count();
        match got.iter().zip(want).position(|(g, w)| g != w) {
            None => Ok(()),
            Some(i) => Err(format!(
                "rank {rank}: output element {i} ({}) is {:#010x}, want {:#010x} ({wrong} of {} elements wrong{})",
                self.example.source(i, self.chunk, rank, world),
                got[i],
                want[i],
                want.len(),
                if got[i] == u32::from_ne_bytes([POISON; 4]) { ", the first still poisoned" } else { "" }
            )),
        }
    }
}
