//! One rank of `weft bench allreduce`: set up weft (and NCCL), then for every size check and
//! time both.

use std::sync::Arc;

use weft_bootstrap::{Bootstrap, TcpBootstrap, TorchrunEnv};
use weft_coll::nccl::{Nccl, NcclComm};
use weft_coll::{AllReduce, AllReduceConfig};
use weft_core::{Communicator, Env};
use weft_gpu::{AllocKind, Device, DeviceMemory, Event, Stream};

use super::data;
use super::{BenchOptions, Row, sizes};

type BoxError = Box<dyn std::error::Error>;

/// Calls per timed batch: enough to dwarf launch and event noise, few for huge messages.
fn calls_for(bytes: usize) -> u32 {
    match bytes {
        b if b >= 256 << 20 => 5,
        b if b >= 16 << 20 => 10,
        _ => 20,
    }
}

struct Rank {
    comm: Communicator,
    stream: Stream,
    send: DeviceMemory,
    recv: DeviceMemory,
}

impl Rank {
    fn barrier(&self) -> Result<(), BoxError> {
        Ok(self.comm.barrier()?)
    }

    fn idle(&self) -> Result<(), BoxError> {
        Ok(self.stream.wait_idle(std::time::Duration::from_secs(120), "benchmark")?)
    }

    /// Microseconds per call of `call`, eager or captured in a CUDA graph.
    fn time(&self, graph: bool, bytes: usize, call: &dyn Fn() -> Result<(), BoxError>) -> Result<f64, BoxError> {
        let device = self.comm.device();
        let calls = calls_for(bytes);
        let (start, end) = (Event::new(device)?, Event::new(device)?);
        if graph {
            self.stream.begin_capture()?;
            let mut captured = Ok(());
            for _ in 0..calls {
                captured = call();
                if captured.is_err() {
                    break;
                }
            }
            let g = self.stream.end_capture()?;
            captured?;
            g.launch(&self.stream)?;
            self.idle()?;
            self.barrier()?;
            let replays = 3;
            start.record(&self.stream)?;
            for _ in 0..replays {
                g.launch(&self.stream)?;
            }
            end.record(&self.stream)?;
            self.idle()?;
            Ok(f64::from(start.elapsed_ms(&end)?) * 1e3 / f64::from(replays * calls))
        } else {
            for _ in 0..3 {
                call()?;
            }
            self.idle()?;
            self.barrier()?;
            start.record(&self.stream)?;
            for _ in 0..calls {
                call()?;
            }
            end.record(&self.stream)?;
            self.idle()?;
            Ok(f64::from(start.elapsed_ms(&end)?) * 1e3 / f64::from(calls))
        }
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

pub(super) fn run(options: &BenchOptions, torchrun: &TorchrunEnv) -> Result<Vec<Row>, BoxError> {
    let env = Env::from_process()?;
    let device = Device::new(torchrun.local_rank.unwrap_or(torchrun.rank))?;
    let bootstrap: Arc<dyn Bootstrap> = Arc::new(TcpBootstrap::builder().from_env()?);
    let comm = Communicator::new(Arc::clone(&bootstrap), device.clone(), env.clone())?;
    let rank = comm.rank();
    let ranks = comm.world_size() as u32;
    let allreduce = AllReduce::new(&comm, AllReduceConfig::from_env(&env)?)?;
    allreduce.prepare(options.dtype, options.op)?;
    let nccl = if options.nccl { Some(Nccl::load(&env)?) } else { None };
    let nccl_comm: Option<NcclComm<'_>> = match &nccl {
        Some(lib) => {
            let id = if rank == 0 { lib.unique_id()?.to_vec() } else { Vec::new() };
            let id = bootstrap.broadcast(0, (rank == 0).then_some(id.as_slice()))?;
            let id: [u8; 128] = id.try_into().map_err(|_| "bad NCCL unique id")?;
            device.bind()?;
            Some(lib.init_rank(id, rank, ranks as usize)?)
        }
        None => None,
    };
    let size = options.dtype.size();
    let max = options.max_bytes.max(size);
    let me = Rank {
        stream: Stream::new(&device)?,
        send: DeviceMemory::alloc(&device, max, AllocKind::Legacy)?,
        recv: DeviceMemory::alloc(&device, max, AllocKind::Legacy)?,
        comm,
    };
    let (dtype, op) = (options.dtype, options.op);
    let mut rows = Vec::new();
    for bytes in sizes(options) {
        let count = bytes / size;
        if count == 0 {
            continue;
        }
        let bytes = count * size;
        let (send, recv) = (me.send.ptr(), me.recv.ptr());
        let weft_call = |from: u64, to: u64| -> Result<String, BoxError> {
            // SAFETY: `from`/`to` are send/recv, which hold `max` >= bytes bytes on this GPU and
            // outlive every launch (each measurement waits for the stream before returning);
            // every rank makes the same calls in the same order.
            Ok(unsafe { allreduce.all_reduce(from, to, count, dtype, op, &me.stream) }?.name().to_string())
        };
        let mut row = Row { bytes, count, identical: true, ..Row::default() };
        if options.check {
            let seed_bytes = bootstrap.broadcast(0, Some(&rand::random::<u32>().to_le_bytes()))?;
            let seed = u32::from_le_bytes(seed_bytes.get(..4).and_then(|b| b.try_into().ok()).unwrap_or([0; 4]));
            let input = data::input(dtype, seed, rank as u32, count);
            let mut result = vec![0u8; bytes];
            let mut check = |result: &mut Vec<u8>| -> Result<(), BoxError> {
                me.idle()?;
                me.recv.read(0, result)?;
                row.wrong += data::count_wrong(dtype, op, seed, ranks, result);
                Ok(())
            };
            // Out of place, recv poisoned.
            me.send.write(0, &input)?;
            me.recv.fill(0, bytes, 0x7f)?;
            me.barrier()?;
            weft_call(send, recv)?;
            check(&mut result)?;
            // In place.
            me.recv.write(0, &input)?;
            me.barrier()?;
            weft_call(recv, recv)?;
            check(&mut result)?;
            // Captured once, replayed twice, poisoned before each replay.
            if options.graph {
                me.stream.begin_capture()?;
                let captured = weft_call(send, recv);
                let g = me.stream.end_capture()?;
                captured?;
                for poison in [0xa5u8, 0x5a] {
                    me.recv.fill(0, bytes, poison)?;
                    me.barrier()?;
                    g.launch(&me.stream)?;
                    check(&mut result)?;
                }
            }
            let hashes = bootstrap.all_gather(&fnv(&result).to_le_bytes())?;
            row.identical = hashes.iter().all(|h| *h == hashes[0]);
        }
        row.algorithm = weft_call(send, recv)?;
        me.idle()?;
        row.weft_us = me.time(options.graph, bytes, &|| weft_call(send, recv).map(|_| ()))?;
        if let Some(nc) = &nccl_comm {
            let call = || -> Result<(), BoxError> {
                // SAFETY: as for weft above.
                let result = unsafe { nc.all_reduce(send, recv, count, dtype, op, &me.stream) };
                Ok(result?)
            };
            row.nccl_us = Some(me.time(options.graph, bytes, &call)?);
        }
        rows.push(row);
    }
    me.barrier()?;
    Ok(rows)
}
