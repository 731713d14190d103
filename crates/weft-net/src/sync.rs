//! The atomics the FIFO host side and the proxy flow control use, swapped for loom's when the
//! crate's unit tests are built with `--cfg weft_loom` (model checking; see docs/proxy.md).

#[cfg(all(test, weft_loom))]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(not(all(test, weft_loom)))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering, fence};

/// Called in every spin iteration: a CPU hint normally, a yield to the model checker under loom
/// (loom must see each spinning thread give way, or it explores the spin forever).
pub(crate) fn spin_hint() {
    #[cfg(all(test, weft_loom))]
    loom::thread::yield_now();
    #[cfg(not(all(test, weft_loom)))]
    std::hint::spin_loop();
}
