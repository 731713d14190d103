// Generated from the device_kernels! declarations of device/kernels/ep; do not edit.
// A kernel definition whose parameter list differs from its prototype here is a second
// extern "C" function of the same name, which NVRTC rejects.
#pragma once
#include "weft/generated/types.cuh"
#include "weft/impl/kernel_params.cuh"

// Layout: The per-expert and per-rank token counts of a dispatch.
extern "C" __global__ void weft_ep_layout(weft::EpLayoutArgs a);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_layout)>) == 48 && alignof(weft::kernel_param_t<0, decltype(weft_ep_layout)>) == 8, "weft_ep_layout: a is 48 bytes aligned to 8 in Rust");

// Notify: The exchange of the counts and the receive layout of a dispatch.
extern "C" __global__ void weft_ep_notify(weft::EpContext c, weft::EpNotifyArgs a);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_notify)>) == 176 && alignof(weft::kernel_param_t<0, decltype(weft_ep_notify)>) == 8, "weft_ep_notify: c is 176 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_notify)>) == 64 && alignof(weft::kernel_param_t<1, decltype(weft_ep_notify)>) == 8, "weft_ep_notify: a is 64 bytes aligned to 8 in Rust");

// Prologue: The reset of the dispatch counters or the combine tails.
extern "C" __global__ void weft_ep_prologue(weft::EpContext c, uint32_t dispatch);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_prologue)>) == 176 && alignof(weft::kernel_param_t<0, decltype(weft_ep_prologue)>) == 8, "weft_ep_prologue: c is 176 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_prologue)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_ep_prologue)>) == 4, "weft_ep_prologue: dispatch is 4 bytes aligned to 4 in Rust");

// Dispatch: The normal dispatch.
extern "C" __global__ void weft_ep_dispatch(weft::EpContext c, weft::EpDispatchArgs a);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_dispatch)>) == 176 && alignof(weft::kernel_param_t<0, decltype(weft_ep_dispatch)>) == 8, "weft_ep_dispatch: c is 176 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_dispatch)>) == 456 && alignof(weft::kernel_param_t<1, decltype(weft_ep_dispatch)>) == 8, "weft_ep_dispatch: a is 456 bytes aligned to 8 in Rust");

// Combine: The normal combine.
extern "C" __global__ void weft_ep_combine(weft::EpContext c, weft::EpCombineArgs a);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_combine)>) == 176 && alignof(weft::kernel_param_t<0, decltype(weft_ep_combine)>) == 8, "weft_ep_combine: c is 176 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_combine)>) == 112 && alignof(weft::kernel_param_t<1, decltype(weft_ep_combine)>) == 8, "weft_ep_combine: a is 112 bytes aligned to 8 in Rust");

// RailLayout: The rail hop's layout: `rail_send_head` and the counts the host exchanges.
extern "C" __global__ void weft_ep_rail_layout(weft::EpRailArgs a);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_rail_layout)>) == 696 && alignof(weft::kernel_param_t<0, decltype(weft_ep_rail_layout)>) == 8, "weft_ep_rail_layout: a is 696 bytes aligned to 8 in Rust");

// Rail: The rail hop's packing of a dispatch's rows by destination node, and its sum of the
extern "C" __global__ void weft_ep_rail_pack(weft::EpRailArgs a);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_rail_pack)>) == 696 && alignof(weft::kernel_param_t<0, decltype(weft_ep_rail_pack)>) == 8, "weft_ep_rail_pack: a is 696 bytes aligned to 8 in Rust");

// Rail: The rail hop's packing of a dispatch's rows by destination node, and its sum of the
extern "C" __global__ void weft_ep_rail_sum(weft::EpRailArgs a);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_rail_sum)>) == 696 && alignof(weft::kernel_param_t<0, decltype(weft_ep_rail_sum)>) == 8, "weft_ep_rail_sum: a is 696 bytes aligned to 8 in Rust");

// RailUnpack: The NVL hop of a node of one rank: the forwarded rows copied into the received rows as
extern "C" __global__ void weft_ep_rail_unpack(weft::EpDispatchArgs d);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_rail_unpack)>) == 456 && alignof(weft::kernel_param_t<0, decltype(weft_ep_rail_unpack)>) == 8, "weft_ep_rail_unpack: d is 456 bytes aligned to 8 in Rust");

// RailExchange: The rail hop's puts to the rank of this rail on every other node, and the waits for
extern "C" __global__ void weft_ep_rail_exchange(weft::EpRailArgs a, weft::DevCommHandle h, uint32_t flags);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_rail_exchange)>) == 696 && alignof(weft::kernel_param_t<0, decltype(weft_ep_rail_exchange)>) == 8, "weft_ep_rail_exchange: a is 696 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_rail_exchange)>) == 144 && alignof(weft::kernel_param_t<1, decltype(weft_ep_rail_exchange)>) == 8, "weft_ep_rail_exchange: h is 144 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_ep_rail_exchange)>) == 4 && alignof(weft::kernel_param_t<2, decltype(weft_ep_rail_exchange)>) == 4, "weft_ep_rail_exchange: flags is 4 bytes aligned to 4 in Rust");

// LlDispatch: The kernels of a low-latency dispatch: send and receive, each on one node and `_net`.
extern "C" __global__ void weft_ep_ll_dispatch_send(weft::EpContext c, weft::EpLlDispatchArgs a, weft::EpLlNet n);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_ll_dispatch_send)>) == 176 && alignof(weft::kernel_param_t<0, decltype(weft_ep_ll_dispatch_send)>) == 8, "weft_ep_ll_dispatch_send: c is 176 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_ll_dispatch_send)>) == 136 && alignof(weft::kernel_param_t<1, decltype(weft_ep_ll_dispatch_send)>) == 8, "weft_ep_ll_dispatch_send: a is 136 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_ep_ll_dispatch_send)>) == 176 && alignof(weft::kernel_param_t<2, decltype(weft_ep_ll_dispatch_send)>) == 8, "weft_ep_ll_dispatch_send: n is 176 bytes aligned to 8 in Rust");

// LlDispatch: The kernels of a low-latency dispatch: send and receive, each on one node and `_net`.
extern "C" __global__ void weft_ep_ll_dispatch_recv(weft::EpContext c, weft::EpLlDispatchArgs a, weft::EpLlNet n);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_ll_dispatch_recv)>) == 176 && alignof(weft::kernel_param_t<0, decltype(weft_ep_ll_dispatch_recv)>) == 8, "weft_ep_ll_dispatch_recv: c is 176 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_ll_dispatch_recv)>) == 136 && alignof(weft::kernel_param_t<1, decltype(weft_ep_ll_dispatch_recv)>) == 8, "weft_ep_ll_dispatch_recv: a is 136 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_ep_ll_dispatch_recv)>) == 176 && alignof(weft::kernel_param_t<2, decltype(weft_ep_ll_dispatch_recv)>) == 8, "weft_ep_ll_dispatch_recv: n is 176 bytes aligned to 8 in Rust");

// LlDispatch: The kernels of a low-latency dispatch: send and receive, each on one node and `_net`.
extern "C" __global__ void weft_ep_ll_dispatch_send_net(weft::EpContext c, weft::EpLlDispatchArgs a, weft::EpLlNet n);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_ll_dispatch_send_net)>) == 176 && alignof(weft::kernel_param_t<0, decltype(weft_ep_ll_dispatch_send_net)>) == 8, "weft_ep_ll_dispatch_send_net: c is 176 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_ll_dispatch_send_net)>) == 136 && alignof(weft::kernel_param_t<1, decltype(weft_ep_ll_dispatch_send_net)>) == 8, "weft_ep_ll_dispatch_send_net: a is 136 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_ep_ll_dispatch_send_net)>) == 176 && alignof(weft::kernel_param_t<2, decltype(weft_ep_ll_dispatch_send_net)>) == 8, "weft_ep_ll_dispatch_send_net: n is 176 bytes aligned to 8 in Rust");

// LlDispatch: The kernels of a low-latency dispatch: send and receive, each on one node and `_net`.
extern "C" __global__ void weft_ep_ll_dispatch_recv_net(weft::EpContext c, weft::EpLlDispatchArgs a, weft::EpLlNet n);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_ll_dispatch_recv_net)>) == 176 && alignof(weft::kernel_param_t<0, decltype(weft_ep_ll_dispatch_recv_net)>) == 8, "weft_ep_ll_dispatch_recv_net: c is 176 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_ll_dispatch_recv_net)>) == 136 && alignof(weft::kernel_param_t<1, decltype(weft_ep_ll_dispatch_recv_net)>) == 8, "weft_ep_ll_dispatch_recv_net: a is 136 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_ep_ll_dispatch_recv_net)>) == 176 && alignof(weft::kernel_param_t<2, decltype(weft_ep_ll_dispatch_recv_net)>) == 8, "weft_ep_ll_dispatch_recv_net: n is 176 bytes aligned to 8 in Rust");

// LlCombine: The kernels of a low-latency combine: send and receive, each on one node and `_net`.
extern "C" __global__ void weft_ep_ll_combine_send(weft::EpContext c, weft::EpLlCombineArgs a, weft::EpLlNet n);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_ll_combine_send)>) == 176 && alignof(weft::kernel_param_t<0, decltype(weft_ep_ll_combine_send)>) == 8, "weft_ep_ll_combine_send: c is 176 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_ll_combine_send)>) == 104 && alignof(weft::kernel_param_t<1, decltype(weft_ep_ll_combine_send)>) == 8, "weft_ep_ll_combine_send: a is 104 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_ep_ll_combine_send)>) == 176 && alignof(weft::kernel_param_t<2, decltype(weft_ep_ll_combine_send)>) == 8, "weft_ep_ll_combine_send: n is 176 bytes aligned to 8 in Rust");

// LlCombine: The kernels of a low-latency combine: send and receive, each on one node and `_net`.
extern "C" __global__ void weft_ep_ll_combine_recv(weft::EpContext c, weft::EpLlCombineArgs a, weft::EpLlNet n);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_ll_combine_recv)>) == 176 && alignof(weft::kernel_param_t<0, decltype(weft_ep_ll_combine_recv)>) == 8, "weft_ep_ll_combine_recv: c is 176 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_ll_combine_recv)>) == 104 && alignof(weft::kernel_param_t<1, decltype(weft_ep_ll_combine_recv)>) == 8, "weft_ep_ll_combine_recv: a is 104 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_ep_ll_combine_recv)>) == 176 && alignof(weft::kernel_param_t<2, decltype(weft_ep_ll_combine_recv)>) == 8, "weft_ep_ll_combine_recv: n is 176 bytes aligned to 8 in Rust");

// LlCombine: The kernels of a low-latency combine: send and receive, each on one node and `_net`.
extern "C" __global__ void weft_ep_ll_combine_send_net(weft::EpContext c, weft::EpLlCombineArgs a, weft::EpLlNet n);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_ll_combine_send_net)>) == 176 && alignof(weft::kernel_param_t<0, decltype(weft_ep_ll_combine_send_net)>) == 8, "weft_ep_ll_combine_send_net: c is 176 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_ll_combine_send_net)>) == 104 && alignof(weft::kernel_param_t<1, decltype(weft_ep_ll_combine_send_net)>) == 8, "weft_ep_ll_combine_send_net: a is 104 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_ep_ll_combine_send_net)>) == 176 && alignof(weft::kernel_param_t<2, decltype(weft_ep_ll_combine_send_net)>) == 8, "weft_ep_ll_combine_send_net: n is 176 bytes aligned to 8 in Rust");

// LlCombine: The kernels of a low-latency combine: send and receive, each on one node and `_net`.
extern "C" __global__ void weft_ep_ll_combine_recv_net(weft::EpContext c, weft::EpLlCombineArgs a, weft::EpLlNet n);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_ep_ll_combine_recv_net)>) == 176 && alignof(weft::kernel_param_t<0, decltype(weft_ep_ll_combine_recv_net)>) == 8, "weft_ep_ll_combine_recv_net: c is 176 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_ep_ll_combine_recv_net)>) == 104 && alignof(weft::kernel_param_t<1, decltype(weft_ep_ll_combine_recv_net)>) == 8, "weft_ep_ll_combine_recv_net: a is 104 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_ep_ll_combine_recv_net)>) == 176 && alignof(weft::kernel_param_t<2, decltype(weft_ep_ll_combine_recv_net)>) == 8, "weft_ep_ll_combine_recv_net: n is 176 bytes aligned to 8 in Rust");
