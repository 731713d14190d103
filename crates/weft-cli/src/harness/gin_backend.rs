//! How the ranks of a GIN run reach each other ([`GinBackend`]): the environment of the
//! sub-communicator each backend's device communicators are built on, shared by
//! `weft selftest --only gin` and `weft bench gin`.

use weft_core::{Env, LinkModel, Network};

/// α of the emulated NIC between virtual nodes, µs.
pub const EMULATED_ALPHA_US: f64 = 2.0;
/// β of the emulated NIC between virtual nodes, GB/s.
pub const EMULATED_GBPS: f64 = 50.0;
/// The chaos backend's seed: fixed, so a failure reproduces.
pub const CHAOS_SEED: u64 = 0x61_6e_00;

/// How the ranks reach each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GinBackend {
    /// One node: every peer's window mapped (LSA).
    Lsa,
    /// A virtual node per rank, PortChannels over TCP.
    Tcp,
    /// A virtual node per rank, PortChannels over the emulated NIC
    /// ([`EMULATED_ALPHA_US`], [`EMULATED_GBPS`]).
    EmulatedNic,
    /// The same, with the NIC delivering each connection's writes out of order
    /// (`WEFT_EMU_NET_CHAOS`): signals and flushes must still follow their data.
    Chaos,
}

impl GinBackend {
    /// What the backend is, in words.
    pub fn name(self) -> &'static str {
        match self {
            GinBackend::Lsa => "LSA (one node)",
            GinBackend::Tcp => "proxy over TCP (a virtual node per rank)",
            GinBackend::EmulatedNic => "proxy over the emulated NIC (a virtual node per rank)",
            GinBackend::Chaos => "proxy over the emulated NIC delivering out of order (a virtual node per rank)",
        }
    }

    /// `base` changed to build this backend's sub-communicator (on the bootstrap and device of
    /// the communicator `base` comes from).
    pub fn env(self, base: &Env) -> Env {
        let mut env = base.clone();
        match self {
            GinBackend::Lsa => env.ranks_per_node = None,
            GinBackend::Tcp => {
                env.ranks_per_node = Some(1);
                env.emulated_net = None;
                env.network = Network::Tcp;
            }
            GinBackend::EmulatedNic | GinBackend::Chaos => {
                env.ranks_per_node = Some(1);
                env.emulated_net = Some(LinkModel::new(EMULATED_ALPHA_US, Some(EMULATED_GBPS)));
                if self == GinBackend::Chaos {
                    env.set_var(&weft_core::env::vars::WEFT_EMU_NET_CHAOS, CHAOS_SEED.to_string());
                }
            }
        }
        env
    }
}
