//! The registration cache of user buffers: this rank's allocations registered for the peers
//! (one registration per allocation, keyed by its identity, so a freed-and-reallocated address
//! is a new entry and the stale one is dropped), and the peers' allocations mapped here, keyed
//! by (owner, identity). [`Registry::agree`] runs the exchange of `agreement.rs` for one call.

use std::collections::HashMap;
use std::sync::Mutex;

use weft_core::descriptor::MemoryDescriptor;
use weft_core::{Communicator, RemoteMemory, UserRegistration};
use weft_gpu::{AllocationKey, CaptureModeRelaxed, DevicePtr, UserAllocation};
use weft_types::{MAX_RANKS, PeerBuffers};

use crate::agreement::{Offer, everyone_ready, fits};
use crate::error::CollError;

/// One of this rank's allocations, registered.
struct Local {
    registration: UserRegistration,
    /// Every peer has mapped it (a call that used it ran zero-copy): offers stop carrying the
    /// descriptor.
    published: bool,
}

#[derive(Default)]
struct State {
    local: HashMap<AllocationKey, Local>,
    remote: HashMap<(usize, AllocationKey), RemoteMemory>,
}

/// See the module documentation.
#[derive(Default)]
pub(crate) struct Registry {
    state: Mutex<State>,
}

/// The keys of `known` that overlap `fresh` without being it: allocations the application has
/// freed (the driver handed their addresses to `fresh`), whose registrations are stale.
fn stale<'a>(known: impl Iterator<Item = &'a AllocationKey>, fresh: &AllocationKey) -> Vec<AllocationKey> {
    known.filter(|k| *k != fresh && k.base < fresh.base + fresh.size && fresh.base < k.base + k.size).copied().collect()
}

impl Registry {
    /// Where every rank's buffer of this call lies in this GPU's address space, when every
    /// rank can take part; `None`: the call stages through scratch. `[ptr, ptr + len)` is this
    /// rank's buffer; a rank not `willing` offers nothing (so every rank stages). Collective
    /// and blocking (two host exchanges through the bootstrap): every rank calls it at the
    /// same point of the same collective call.
    pub(crate) fn agree(
        &self,
        comm: &Communicator,
        ptr: DevicePtr,
        len: usize,
        willing: bool,
    ) -> Result<Option<PeerBuffers>, CollError> {
        let (rank, ranks) = (comm.rank(), comm.world_size());
        let bootstrap = |source| CollError::Core(weft_core::Error::Bootstrap { rank, source });
        // Mapping and exporting memory while this thread's stream captures needs a relaxed
        // capture mode; none of the calls below touches the capturing stream. A local failure
        // only makes this rank's answer "no": every rank still takes part in both exchanges.
        let relaxed = CaptureModeRelaxed::new()
            .map_err(|e| tracing::debug!("rank {rank}: cannot relax the capture mode: {e}"))
            .ok();
        // Entries are inserted whole; a poisoned map is still consistent.
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let usable = willing && relaxed.is_some() && ranks <= MAX_RANKS;
        let offer = if usable { state.offer(comm, ptr, len as u64) } else { Offer::Unusable };
        let offers = comm.bootstrap().all_gather(&offer.encode()).map_err(bootstrap)?;
        let mut buffers = PeerBuffers::default();
        let mut ready = offer != Offer::Unusable && offers.len() == ranks;
        for (peer, bytes) in offers.iter().enumerate() {
            if !ready {
                break;
            }
            let resolved = if peer == rank {
                Some(ptr)
            } else {
                match Offer::decode(bytes) {
                    Ok(theirs) => state.resolve(comm, peer, &theirs, len as u64),
                    Err(e) => {
                        tracing::debug!("rank {rank}: malformed zero-copy offer from rank {peer}: {e}");
                        None
                    }
                }
            };
            match resolved {
                Some(p) => buffers.ptr[peer] = p,
                None => ready = false,
            }
        }
        let answers = comm.bootstrap().all_gather(&[u8::from(ready)]).map_err(bootstrap)?;
        if !everyone_ready(&answers) {
            return Ok(None);
        }
        if let Offer::Usable { key, .. } = offer
            && let Some(local) = state.local.get_mut(&key)
        {
            local.published = true;
        }
        Ok(Some(buffers))
    }
}

impl State {
    /// This rank's offer for the buffer `[ptr, ptr + len)`, registering its allocation on
    /// first use.
    fn offer(&mut self, comm: &Communicator, ptr: DevicePtr, len: u64) -> Offer {
        let rank = comm.rank();
        if !ptr.is_multiple_of(16) {
            return Offer::Unusable;
        }
        let allocation = match UserAllocation::containing(comm.device(), ptr) {
            Ok(a) if a.key().contains(ptr, len) => a,
            Ok(_) => return Offer::Unusable,
            Err(e) => {
                tracing::debug!("rank {rank}: buffer {ptr:#x} stages through scratch: {e}");
                return Offer::Unusable;
            }
        };
        let key = allocation.key();
        if !self.local.contains_key(&key) {
            for old in stale(self.local.keys(), &key) {
                self.local.remove(&old);
            }
            match comm.register_user(&allocation) {
                Ok(registration) => {
                    self.local.insert(key, Local { registration, published: false });
                }
                Err(e) => {
                    tracing::debug!("rank {rank}: buffer {ptr:#x} stages through scratch: {e}");
                    return Offer::Unusable;
                }
            }
        }
        let Some(local) = self.local.get(&key) else { return Offer::Unusable };
        let descriptor = if local.published {
            Vec::new()
        } else {
            match local.registration.descriptor().encode() {
                Ok(bytes) => bytes,
                Err(_) => return Offer::Unusable,
            }
        };
        Offer::Usable { key, offset: ptr - key.base, descriptor }
    }

    /// `peer`'s buffer as this rank addresses it, mapping the peer's allocation on first use;
    /// `None` when it cannot take part.
    fn resolve(&mut self, comm: &Communicator, peer: usize, offer: &Offer, len: u64) -> Option<DevicePtr> {
        let Offer::Usable { key, offset, descriptor } = offer else { return None };
        if !fits(key, *offset, len) {
            return None;
        }
        if !self.remote.contains_key(&(peer, *key)) {
            if descriptor.is_empty() {
                return None;
            }
            let theirs = MemoryDescriptor::decode(descriptor).ok()?;
            if theirs.base != key.base || theirs.len != key.size || theirs.offset != 0 {
                return None;
            }
            // The peer freed what overlaps the fresh allocation: drop those mappings first, so
            // the fresh one (possibly at the same base) stays in the communicator's cache.
            let theirs_known: Vec<AllocationKey> =
                self.remote.keys().filter(|(p, _)| *p == peer).map(|(_, k)| *k).collect();
            for old in stale(theirs_known.iter(), key) {
                self.remote.remove(&(peer, old));
                comm.forget_import(peer, old.base);
            }
            let mapped = comm
                .import(peer, &theirs)
                .map_err(|e| tracing::debug!("rank {}: cannot map rank {peer}'s buffer: {e}", comm.rank()))
                .ok()?;
            self.remote.insert((peer, *key), mapped);
        }
        self.remote.get(&(peer, *key)).map(|m| m.ptr() + offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_overlapping_other_allocations_are_stale() {
        let k = |base, size, buffer_id| AllocationKey { base, size, buffer_id };
        let fresh = k(0x1000, 0x1000, 9);
        let known =
            [k(0x1000, 0x1000, 9), k(0x1000, 0x800, 3), k(0x1800, 0x1000, 4), k(0x2000, 0x100, 5), k(0x0, 0x1000, 6)];
        assert_eq!(stale(known.iter(), &fresh), vec![k(0x1000, 0x800, 3), k(0x1800, 0x1000, 4)]);
    }
}
