//! A CPU model of expert-parallel routing: the layout, the normal-mode dispatch and combine (on one node and
//! between nodes) and the FP8 cast, written plainly so tests and `weft selftest --only ep` can check every element
//! a GPU kernel of this crate writes. Each function states the exact order of its floating-point
//! operations, which the kernels follow, so results compare bit for bit.

mod combine;
mod dispatch;
mod fp8;
mod internode;
mod layout;
mod ll_net;
mod low_latency;
mod random;

pub use combine::{CombineInput, Combined, combine};
pub use dispatch::{DispatchShape, RankRouting, Received, channel_range, dispatch};
pub use fp8::{CHANNELS_PER_SCALE, Fp8Token, dequantize, e4m3_from_f32, e4m3_to_f32, quantize_token};
pub use internode::{Forwarded, InternodeReceived, combine_internode, dispatch_internode};
pub use layout::{Layout, dispatch_layout};
pub use ll_net::{ll_combine_net, ll_dispatch_net};
pub use low_latency::{LlReceived, LlShape, ll_combine, ll_dispatch};
pub use random::{RoutingSpec, SplitMix, random_routing};

#[cfg(test)]
mod tests;
