//! The checks of an example call against its device communicator, made on the host without a
//! GPU: the signal and barrier exist, the input and output split as the example needs, and the
//! windows hold what the kernel and the copies around it touch. A passing check yields the
//! kernel's parameters and the window ranges the input is copied into and the output out of.

use weft_gpu::LaunchConfig;
use weft_types::DevCommHandle;

use crate::launch::{AllToAll, Halo, RingAllGather};
use crate::{GinError, GinWindow};

/// Threads of the block-cooperative examples' single block: 512 keep enough 16-byte loads in
/// flight for one SM to copy at its limit (~48 GB/s on an H100; 256 threads reach ~31).
pub const COOP_BLOCK: u32 = 512;

/// The launch of every block-cooperative example: one block of [`COOP_BLOCK`] threads.
const COOP_LAUNCH: LaunchConfig = LaunchConfig { grid: 1, block: COOP_BLOCK, shared_bytes: 0 };

/// The signal a call's puts raise and the world barrier it starts with (the call protocol of
/// `device/kernels/gin/call.cuh`: calls on one signal must not overlap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallSlots {
    /// User signal (< `Requirements::signals`).
    pub signal: u32,
    /// World barrier (< `Requirements::world_barriers`).
    pub barrier: u32,
}

/// The windows of an AllToAll: rank r's input is copied into `send`, the chunks arrive in `recv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllToAllWindows {
    /// Window of the chunks to send.
    pub send: u32,
    /// Window of the chunks received.
    pub recv: u32,
}

/// A byte range of one of this rank's windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindowRange {
    pub window: u32,
    pub offset: u64,
    pub bytes: u64,
}

/// A checked call: its launch, and where its input goes and its output comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan<P> {
    pub params: P,
    pub config: LaunchConfig,
    pub input: WindowRange,
    pub output: WindowRange,
}

/// What the checks see of a device communicator.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry<'a> {
    pub handle: DevCommHandle,
    pub windows: &'a [GinWindow],
}

/// The lengths, in elements, of a call's input and output and the bytes of an element.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Buffers {
    pub element: usize,
    pub input: usize,
    pub output: usize,
}

pub(super) fn fail<T>(what: &str, detail: String) -> Result<T, GinError> {
    Err(GinError::Call(format!("{what}: {detail}")))
}

impl Geometry<'_> {
    pub(super) fn world(&self) -> usize {
        self.handle.world as usize
    }

    pub(super) fn check_slots(&self, what: &str, slots: CallSlots) -> Result<(), GinError> {
        let h = &self.handle;
        if slots.signal >= h.signals {
            return fail(what, format!("signal {} of a DevComm with {} signals", slots.signal, h.signals));
        }
        if slots.barrier >= h.world_barriers {
            return fail(what, format!("world barrier {} of a DevComm with {}", slots.barrier, h.world_barriers));
        }
        Ok(())
    }

    /// `bytes` at `offset` of window `window`, which must hold them.
    pub(super) fn range(&self, what: &str, window: u32, offset: u64, bytes: u64) -> Result<WindowRange, GinError> {
        let Some(w) = self.windows.get(window as usize) else {
            return fail(what, format!("window {window} of a DevComm with {} windows", self.windows.len()));
        };
        if offset + bytes > w.len {
            return fail(
                what,
                format!("needs bytes {offset}..{} of window {window}, which has {}", offset + bytes, w.len),
            );
        }
        Ok(WindowRange { window, offset, bytes })
    }
}

impl Buffers {
    fn bytes(&self, elements: usize) -> u64 {
        (elements * self.element) as u64
    }
}

/// An AllToAll: input and output of `world` chunks each, the same length.
pub(crate) fn alltoall(
    g: &Geometry<'_>,
    windows: AllToAllWindows,
    slots: CallSlots,
    b: Buffers,
) -> Result<Plan<AllToAll>, GinError> {
    let world = g.world();
    if b.input == 0 || !b.input.is_multiple_of(world) {
        return fail("AllToAll", format!("an input of {} elements is not {world} equal, non-empty chunks", b.input));
    }
    if b.output != b.input {
        return fail("AllToAll", format!("an output of {} elements for an input of {}", b.output, b.input));
    }
    alltoall_windows(g, windows, slots, b.bytes(b.input) / world as u64)
}

/// An AllToAll of `chunk` bytes per rank between the windows themselves: the send window holds
/// `world` chunks, the receive window takes them (the ranges copied in and out by a safe call).
pub(crate) fn alltoall_windows(
    g: &Geometry<'_>,
    windows: AllToAllWindows,
    slots: CallSlots,
    chunk: u64,
) -> Result<Plan<AllToAll>, GinError> {
    let what = "AllToAll";
    g.check_slots(what, slots)?;
    if chunk == 0 {
        return fail(what, "chunks of 0 bytes".into());
    }
    if windows.send == windows.recv {
        return fail(what, format!("window {} is both the send and the receive window", windows.send));
    }
    let bytes = chunk * g.world() as u64;
    let input = g.range(what, windows.send, 0, bytes)?;
    let output = g.range(what, windows.recv, 0, bytes)?;
    let params = AllToAll {
        h: g.handle,
        send: windows.send,
        recv: windows.recv,
        chunk,
        signal: slots.signal,
        barrier: slots.barrier,
    };
    Ok(Plan { params, config: COOP_LAUNCH, input, output })
}

/// A ring AllGather: an input of one chunk, an output of `world` chunks.
pub(crate) fn ring_allgather(
    g: &Geometry<'_>,
    data: u32,
    slots: CallSlots,
    b: Buffers,
) -> Result<Plan<RingAllGather>, GinError> {
    let what = "ring AllGather";
    g.check_slots(what, slots)?;
    let world = g.world();
    if b.input == 0 || b.output != world * b.input {
        return fail(what, format!("an output of {} elements for {world} chunks of {}", b.output, b.input));
    }
    let chunk = b.bytes(b.input);
    let input = g.range(what, data, g.handle.rank as u64 * chunk, chunk)?;
    let output = g.range(what, data, 0, b.bytes(b.output))?;
    let params = RingAllGather { h: g.handle, data, chunk, signal: slots.signal, barrier: slots.barrier };
    Ok(Plan { params, config: COOP_LAUNCH, input, output })
}

/// A halo exchange of `halo` elements: the input is the interior (at least `halo` elements),
/// the output the whole field `[left halo | interior | right halo]`.
pub(crate) fn halo(
    g: &Geometry<'_>,
    field: u32,
    halo: usize,
    slots: CallSlots,
    b: Buffers,
) -> Result<Plan<Halo>, GinError> {
    let what = "halo exchange";
    g.check_slots(what, slots)?;
    if halo == 0 || b.input < halo {
        return fail(what, format!("halos of {halo} elements around an interior of {}", b.input));
    }
    if b.output != b.input + 2 * halo {
        return fail(what, format!("an output of {} elements for a field of {}", b.output, b.input + 2 * halo));
    }
    let (halo_bytes, interior) = (b.bytes(halo), b.bytes(b.input));
    let input = g.range(what, field, halo_bytes, interior)?;
    let output = g.range(what, field, 0, b.bytes(b.output))?;
    let params = Halo { h: g.handle, field, halo: halo_bytes, interior, signal: slots.signal, barrier: slots.barrier };
    Ok(Plan { params, config: COOP_LAUNCH, input, output })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    const SLOTS: CallSlots = CallSlots { signal: 1, barrier: 0 };

    fn windows(lens: &[u64]) -> Vec<GinWindow> {
        lens.iter()
            .enumerate()
            .map(|(i, &len)| GinWindow { index: i as u32, ptr: 0x1000 * (i as u64 + 1), len })
            .collect()
    }

    fn geometry(rank: u32, world: u32, windows: &[GinWindow]) -> Geometry<'_> {
        let handle = DevCommHandle { rank, world, signals: 2, world_barriers: 1, ..Default::default() };
        Geometry { handle, windows }
    }

    fn error<P: std::fmt::Debug>(r: Result<Plan<P>, GinError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn an_alltoall_fits_its_windows_and_splits_into_a_chunk_per_rank() {
        let w = windows(&[4 * 12, 4 * 12]);
        let g = geometry(1, 3, &w);
        let b = Buffers { element: 4, input: 12, output: 12 };
        let plan = alltoall(&g, AllToAllWindows { send: 0, recv: 1 }, SLOTS, b).unwrap();
        assert_eq!((plan.params.chunk, plan.config.block), (16, COOP_BLOCK));
        assert_eq!(plan.input, WindowRange { window: 0, offset: 0, bytes: 48 });
        assert_eq!(plan.output, WindowRange { window: 1, offset: 0, bytes: 48 });
        let ok = AllToAllWindows { send: 0, recv: 1 };
        let uneven = Buffers { input: 10, output: 10, ..b };
        assert!(error(alltoall(&g, ok, SLOTS, uneven)).contains("not 3 equal, non-empty chunks"));
        assert!(error(alltoall(&g, ok, SLOTS, Buffers { output: 9, ..b })).contains("an output of 9 elements"));
        let big = Buffers { element: 8, ..b };
        assert!(error(alltoall(&g, ok, SLOTS, big)).contains("needs bytes 0..96 of window 0, which has 48"));
        let same = AllToAllWindows { send: 1, recv: 1 };
        assert!(error(alltoall(&g, same, SLOTS, b)).contains("both the send and the receive window"));
        let missing = AllToAllWindows { send: 0, recv: 2 };
        assert!(error(alltoall(&g, missing, SLOTS, b)).contains("window 2 of a DevComm with 2 windows"));
    }

    #[test]
    fn an_alltoall_between_the_windows_needs_world_chunks_in_each() {
        let w = windows(&[4 * 12, 4 * 12]);
        let g = geometry(1, 3, &w);
        let ok = AllToAllWindows { send: 0, recv: 1 };
        let plan = alltoall_windows(&g, ok, SLOTS, 16).unwrap();
        assert_eq!((plan.params.chunk, plan.params.send, plan.params.recv), (16, 0, 1));
        assert_eq!(plan.output, WindowRange { window: 1, offset: 0, bytes: 48 });
        assert!(error(alltoall_windows(&g, ok, SLOTS, 0)).contains("chunks of 0 bytes"));
        let e = error(alltoall_windows(&g, ok, SLOTS, 17));
        assert!(e.contains("needs bytes 0..51 of window 0, which has 48"), "{e}");
        let e = error(alltoall_windows(&g, AllToAllWindows { send: 1, recv: 1 }, SLOTS, 16));
        assert!(e.contains("both the send and the receive window"), "{e}");
    }

    #[test]
    fn signals_and_barriers_past_the_requirements_are_refused() {
        let w = windows(&[64, 64]);
        let g = geometry(0, 2, &w);
        let b = Buffers { element: 1, input: 2, output: 2 };
        let ok = AllToAllWindows { send: 0, recv: 1 };
        let e = error(alltoall(&g, ok, CallSlots { signal: 2, barrier: 0 }, b));
        assert!(e.contains("signal 2 of a DevComm with 2 signals"), "{e}");
        let e = error(ring_allgather(&g, 0, CallSlots { signal: 0, barrier: 1 }, b));
        assert!(e.contains("world barrier 1 of a DevComm with 1"), "{e}");
    }

    #[test]
    fn a_ring_allgather_copies_the_input_into_this_ranks_chunk() {
        let w = windows(&[40]);
        let g = geometry(2, 4, &w);
        let b = Buffers { element: 2, input: 5, output: 20 };
        let plan = ring_allgather(&g, 0, SLOTS, b).unwrap();
        assert_eq!(plan.input, WindowRange { window: 0, offset: 20, bytes: 10 });
        assert_eq!(plan.output, WindowRange { window: 0, offset: 0, bytes: 40 });
        assert_eq!(plan.params.chunk, 10);
        assert!(error(ring_allgather(&g, 0, SLOTS, Buffers { output: 16, ..b })).contains("for 4 chunks of 5"));
        let e = error(ring_allgather(&g, 0, SLOTS, Buffers { element: 4, ..b }));
        assert!(e.contains("needs bytes 40..60 of window 0, which has 40"), "{e}");
    }

    #[test]
    fn a_halo_exchange_copies_the_interior_between_the_halos() {
        let w = windows(&[64, 4 * 14]);
        let g = geometry(0, 2, &w);
        let b = Buffers { element: 4, input: 10, output: 14 };
        let plan = halo(&g, 1, 2, SLOTS, b).unwrap();
        assert_eq!(plan.input, WindowRange { window: 1, offset: 8, bytes: 40 });
        assert_eq!(plan.output, WindowRange { window: 1, offset: 0, bytes: 56 });
        assert_eq!((plan.params.halo, plan.params.interior), (8, 40));
        assert!(error(halo(&g, 1, 11, SLOTS, b)).contains("halos of 11 elements around an interior of 10"));
        assert!(error(halo(&g, 1, 0, SLOTS, b)).contains("halos of 0 elements"));
        assert!(error(halo(&g, 1, 3, SLOTS, b)).contains("an output of 14 elements for a field of 16"));
        let e = error(halo(&g, 0, 2, SLOTS, Buffers { element: 8, input: 10, output: 14 }));
        assert!(e.contains("needs bytes 16..96 of window 0, which has 64"), "{e}");
    }
}
