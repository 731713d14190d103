//! The benchmark's probe kernels as safe calls ([`GinProbes`]): a put + signal ping-pong between
//! ranks 0 and 1 (latency) and a stream of puts + signal from rank 0 to rank 1 (bandwidth),
//! each checked against the device communicator on the host before it is enqueued. They move
//! window contents only: no copies in or out.

use std::sync::Arc;

use weft_gpu::{Kernel, KernelParams, LaunchConfig, Module};

use super::plan::{CallSlots, Geometry, fail};
use super::target::CallTarget;
use crate::launch::{PingPong, PutStream};
use crate::{DevComm, GinError};

/// Threads of each of the put stream's blocks (its puts are block-cooperative).
pub const STREAM_BLOCK: u32 = super::plan::COOP_BLOCK;
/// Blocks of a put stream over LSA: one SM copies ~45 GB/s over NVLink, 16 reach ~330 GB/s of
/// an H100's ~360 (8: ~300). Through the proxy one block: a command per message.
pub const STREAM_LSA_BLOCKS: u32 = 16;

/// The probe kernels, loaded on the GPU of the device communicator they run on.
#[derive(Debug)]
pub struct GinProbes<'d> {
    dev: &'d DevComm,
    ping_pong: Kernel,
    put_stream: Kernel,
}

impl<'d> GinProbes<'d> {
    /// The kernels of `module` (the `device_code::UNIT` of `device_code::KERNELS`, loaded on
    /// `dev`'s GPU), to run on `dev`.
    pub fn new(dev: &'d DevComm, module: &Arc<Module>) -> Result<Self, GinError> {
        let kernel = |name| module.kernel(name).map_err(|source| dev.gpu_error(source));
        Ok(Self { dev, ping_pong: kernel("weft_gin_ping_pong")?, put_stream: kernel("weft_gin_put_stream")? })
    }

    /// `rounds` round trips of a put of `bytes` with a signal between ranks 0 and 1
    /// (`device/kernels/gin/ping_pong.cu`), in window `data` of at least `2 * bytes`.
    pub fn ping_pong<'scope>(
        &'scope self,
        target: &impl CallTarget<'scope>,
        (data, bytes): (u32, u64),
        rounds: u32,
        slots: CallSlots,
    ) -> Result<(), GinError> {
        let params = ping_pong(&self.geometry(), data, bytes, rounds, slots)?;
        self.enqueue(target, &self.ping_pong, LaunchConfig { grid: 1, block: 1, shared_bytes: 0 }, &params)
    }

    /// `messages` puts of `bytes` with a signal each from rank 0 to rank 1
    /// (`device/kernels/gin/put_stream.cu`), in window `data` of at least `bytes`, each message
    /// split over `blocks` blocks: block b's slice raises signal `slots.signal + b` and its call
    /// starts with world barrier `slots.barrier + b`, which must exist. Every rank passes the
    /// same `blocks`.
    pub fn put_stream<'scope>(
        &'scope self,
        target: &impl CallTarget<'scope>,
        (data, bytes): (u32, u64),
        messages: u32,
        slots: CallSlots,
        blocks: u32,
    ) -> Result<(), GinError> {
        let params = put_stream(&self.geometry(), data, bytes, messages, slots, blocks)?;
        let config = LaunchConfig { grid: blocks, block: STREAM_BLOCK, shared_bytes: 0 };
        self.enqueue(target, &self.put_stream, config, &params)
    }

    fn geometry(&self) -> Geometry<'_> {
        Geometry { handle: self.dev.handle(), windows: self.dev.windows() }
    }

    fn enqueue<'scope, P: KernelParams>(
        &'scope self,
        target: &impl CallTarget<'scope>,
        kernel: &'scope Kernel,
        config: LaunchConfig,
        params: &P,
    ) -> Result<(), GinError> {
        // SAFETY: the checks below (`ping_pong`, `put_stream`) placed every access inside
        // windows of `self.dev`; the kernel only touches the DevComm's heap, tables and proxy
        // FIFOs, all held by the DevComm, borrowed for 'scope, which the target's work does not
        // outlive (CallTarget), and its communicator's error record.
        unsafe { kernel.launch(target.stream(), config, params) }.map_err(|source| self.dev.gpu_error(source))
    }
}

/// The checks shared by both probes: ranks 0 and 1 exist, the slots exist, a put moves bytes,
/// and window `data` holds `span` bytes.
fn check(g: &Geometry<'_>, what: &str, slots: CallSlots, (data, bytes, span): (u32, u64, u64)) -> Result<(), GinError> {
    if g.world() < 2 {
        return fail(what, format!("needs ranks 0 and 1, the DevComm has {} rank(s)", g.world()));
    }
    if bytes == 0 {
        return fail(what, "puts of 0 bytes".into());
    }
    g.check_slots(what, slots)?;
    g.range(what, data, 0, span).map(|_| ())
}

fn ping_pong(g: &Geometry<'_>, data: u32, bytes: u64, rounds: u32, slots: CallSlots) -> Result<PingPong, GinError> {
    check(g, "ping-pong", slots, (data, bytes, 2 * bytes))?;
    Ok(PingPong { h: g.handle, data, bytes, rounds, signal: slots.signal, barrier: slots.barrier })
}

fn put_stream(
    g: &Geometry<'_>,
    data: u32,
    bytes: u64,
    messages: u32,
    slots: CallSlots,
    blocks: u32,
) -> Result<PutStream, GinError> {
    let what = "put stream";
    let Some(last) = blocks.checked_sub(1) else { return fail(what, "0 blocks".into()) };
    // The last block's signal and barrier exist, so every block's do.
    let last_slots = slots.signal.checked_add(last).zip(slots.barrier.checked_add(last));
    let Some((signal, barrier)) = last_slots else {
        return fail(what, format!("{blocks} blocks from signal {} and barrier {}", slots.signal, slots.barrier));
    };
    g.check_slots(what, CallSlots { signal, barrier })?;
    check(g, what, slots, (data, bytes, bytes))?;
    Ok(PutStream { h: g.handle, data, bytes, messages, signal: slots.signal, barrier: slots.barrier })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use weft_types::DevCommHandle;

    use super::*;
    use crate::GinWindow;

    const SLOTS: CallSlots = CallSlots { signal: 1, barrier: 0 };

    fn geometry(world: u32, windows: &[GinWindow]) -> Geometry<'_> {
        let handle = DevCommHandle { rank: 0, world, signals: 2, world_barriers: 1, ..Default::default() };
        Geometry { handle, windows }
    }

    #[test]
    fn a_ping_pong_needs_two_ranks_and_twice_its_bytes() {
        let w = [GinWindow { index: 0, ptr: 0x1000, len: 16 }];
        let p = ping_pong(&geometry(2, &w), 0, 8, 100, SLOTS).unwrap();
        assert_eq!((p.data, p.bytes, p.rounds, p.signal, p.barrier), (0, 8, 100, 1, 0));
        let err = |r: Result<PingPong, GinError>| r.unwrap_err().to_string();
        assert!(err(ping_pong(&geometry(1, &w), 0, 8, 1, SLOTS)).contains("needs ranks 0 and 1"));
        assert!(err(ping_pong(&geometry(2, &w), 0, 16, 1, SLOTS)).contains("needs bytes 0..32 of window 0"));
        assert!(err(ping_pong(&geometry(2, &w), 0, 0, 1, SLOTS)).contains("puts of 0 bytes"));
        assert!(err(ping_pong(&geometry(2, &w), 1, 8, 1, SLOTS)).contains("window 1 of a DevComm with 1"));
        let no_signal = CallSlots { signal: 2, barrier: 0 };
        assert!(err(ping_pong(&geometry(2, &w), 0, 8, 1, no_signal)).contains("signal 2 of a DevComm with 2"));
    }

    #[test]
    fn a_put_stream_needs_its_bytes_once() {
        let w = [GinWindow { index: 0, ptr: 0x1000, len: 16 }];
        let s = put_stream(&geometry(3, &w), 0, 16, 8, SLOTS, 1).unwrap();
        assert_eq!((s.bytes, s.messages), (16, 8));
        assert!(put_stream(&geometry(2, &w), 0, 17, 8, SLOTS, 1).is_err());
        let no_barrier = CallSlots { signal: 0, barrier: 1 };
        let e = put_stream(&geometry(2, &w), 0, 8, 8, no_barrier, 1).unwrap_err().to_string();
        assert!(e.contains("world barrier 1"), "{e}");
    }

    #[test]
    fn a_put_stream_of_several_blocks_needs_a_signal_and_a_barrier_per_block() {
        let w = [GinWindow { index: 0, ptr: 0x1000, len: 16 }];
        let handle = DevCommHandle { rank: 0, world: 2, signals: 4, world_barriers: 4, ..Default::default() };
        let g = Geometry { handle, windows: &w };
        let first = CallSlots { signal: 0, barrier: 0 };
        assert_eq!(put_stream(&g, 0, 16, 8, first, 4).unwrap().signal, 0);
        let e = put_stream(&g, 0, 16, 8, CallSlots { signal: 1, barrier: 0 }, 4).unwrap_err().to_string();
        assert!(e.contains("signal 4 of a DevComm with 4 signals"), "{e}");
        let e = put_stream(&g, 0, 16, 8, CallSlots { signal: 0, barrier: 2 }, 3).unwrap_err().to_string();
        assert!(e.contains("world barrier 4 of a DevComm with 4"), "{e}");
        assert!(put_stream(&g, 0, 16, 8, first, 0).unwrap_err().to_string().contains("0 blocks"));
    }
}
