//! What links two GPUs, as NVML reports it. The CUDA driver says whether one GPU can map
//! another's memory, not whether the path is NVLink or PCIe; protocols that rely on a 128-byte
//! store arriving whole (LL128 lines) need to know. NVML (`libnvidia-ml.so.1`, part of the
//! driver) is loaded at run time, once, and sees every GPU of the host whatever
//! `CUDA_VISIBLE_DEVICES` hides from this process.

use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::OnceLock;

type NvmlReturn = c_int;
type NvmlDevice = *mut c_void;
type Init = unsafe extern "C" fn() -> NvmlReturn;
type HandleByBusId = unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> NvmlReturn;
type P2pStatus = unsafe extern "C" fn(NvmlDevice, NvmlDevice, c_int, *mut c_int) -> NvmlReturn;

const NVML_SUCCESS: NvmlReturn = 0;
/// `NVML_P2P_CAPS_INDEX_NVLINK` of `nvmlGpuP2PCapsIndex_t`.
const P2P_CAPS_INDEX_NVLINK: c_int = 2;
/// `NVML_P2P_STATUS_OK` of `nvmlGpuP2PStatus_t`.
const P2P_STATUS_OK: c_int = 0;

/// NVML, initialised, with the two queries weft makes. Kept for the life of the process (NVML's
/// initialisation is reference-counted; weft never shuts it down).
struct Nvml {
    _library: libloading::Library,
    handle_by_bus_id: HandleByBusId,
    p2p_status: P2pStatus,
}

// SAFETY: NVML's entry points are thread-safe (NVML's documentation); the struct holds only the
// library and function pointers into it.
unsafe impl Send for Nvml {}
// SAFETY: as above.
unsafe impl Sync for Nvml {}

impl Nvml {
    fn load() -> Option<Self> {
        // SAFETY: loading the driver's NVML runs no initialisers with preconditions.
        let library = unsafe { libloading::Library::new("libnvidia-ml.so.1") }
            .map_err(|e| tracing::debug!("NVML not loaded: {e}"))
            .ok()?;
        // SAFETY: the symbols have these C signatures (nvml.h); the pointers stay valid while
        // `library` is loaded, which is as long as `Self` lives.
        let (init, handle_by_bus_id, p2p_status) = unsafe {
            (
                *library.get::<Init>(b"nvmlInit_v2\0").ok()?,
                *library.get::<HandleByBusId>(b"nvmlDeviceGetHandleByPciBusId_v2\0").ok()?,
                *library.get::<P2pStatus>(b"nvmlDeviceGetP2PStatus\0").ok()?,
            )
        };
        // SAFETY: takes no arguments.
        let status = unsafe { init() };
        if status != NVML_SUCCESS {
            tracing::debug!("nvmlInit_v2 returned {status}");
            return None;
        }
        Some(Self { _library: library, handle_by_bus_id, p2p_status })
    }

    fn device(&self, pci_bus_id: &str) -> Option<NvmlDevice> {
        let id = CString::new(pci_bus_id).ok()?;
        let mut device: NvmlDevice = std::ptr::null_mut();
        // SAFETY: a NUL-terminated string and one handle to write.
        let status = unsafe { (self.handle_by_bus_id)(id.as_ptr(), &mut device) };
        (status == NVML_SUCCESS).then_some(device)
    }
}

fn nvml() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(Nvml::load).as_ref()
}

/// Whether NVML reports an NVLink path between the GPUs at PCI bus ids `a` and `b` (the form
/// of [`crate::Device::pci_bus_id`], e.g. `0000:18:00.0`). `None` when NVML cannot say: it is
/// not installed, it does not know a GPU, or the query fails. Callers treat `None` as "not
/// known to be NVLink".
pub fn nvlink_between(a: &str, b: &str) -> Option<bool> {
    let nvml = nvml()?;
    let (a, b) = (nvml.device(a)?, nvml.device(b)?);
    let mut status: c_int = -1;
    // SAFETY: two handles NVML returned and one status to write.
    let result = unsafe { (nvml.p2p_status)(a, b, P2P_CAPS_INDEX_NVLINK, &mut status) };
    (result == NVML_SUCCESS).then_some(status == P2P_STATUS_OK)
}

/// Whether the GPU at `own` reaches every GPU of `peers` over NVLink as NVML reports it (a
/// peer on `own` itself, a rank sharing the GPU, needs no link; an unknown answer is no).
pub fn nvlink_to_all<'a>(own: &str, peers: impl IntoIterator<Item = &'a str>) -> bool {
    every_link(own, peers, nvlink_between)
}

/// Whether `link(own, bus)` is `Some(true)` for every `bus` of `peers` other than `own`.
fn every_link<'a>(
    own: &str,
    peers: impl IntoIterator<Item = &'a str>,
    link: impl Fn(&str, &str) -> Option<bool>,
) -> bool {
    peers.into_iter().filter(|&bus| bus != own).all(|bus| link(own, bus) == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_other_gpu_must_be_known_to_be_nvlink() {
        let nvlink = |a: &str, b: &str| Some(a.starts_with('n') && b.starts_with('n'));
        assert!(every_link("n0", ["n1", "n2", "n0"], nvlink));
        assert!(every_link("p0", ["p0", "p0"], nvlink), "ranks sharing one GPU need no link");
        assert!(!every_link("n0", ["n1", "p2"], nvlink), "one PCIe peer");
        assert!(!every_link("n0", ["n1"], |_: &str, _: &str| None), "NVML cannot say");
        assert!(every_link("n0", [], |_: &str, _: &str| None), "no peer");
        assert!(!nvlink_to_all("0000:00:00.0", ["0000:01:00.0"]), "no NVML or no such GPU here");
    }

    /// No GPU here: NVML is absent, or knows no such bus, and says nothing rather than failing.
    #[test]
    fn an_unknown_gpu_is_not_known_to_be_nvlink() {
        assert_eq!(nvlink_between("not a bus id", "0000:00:00.0"), None);
        assert_eq!(nvlink_between("bus\0id", "0000:00:00.0"), None);
    }
}
