// The parameter types of a kernel's function type, for the generated prototype headers'
// static_asserts of each parameter's size and alignment against its Rust declaration.
#pragma once

namespace weft {

/// `type` is parameter I of function type F.
template <unsigned I, typename F>
struct KernelParam;
template <typename P0, typename... P>
struct KernelParam<0, void(P0, P...)> {
  using type = P0;
};
template <unsigned I, typename P0, typename... P>
struct KernelParam<I, void(P0, P...)> : KernelParam<I - 1, void(P...)> {};

template <unsigned I, typename F>
using kernel_param_t = typename KernelParam<I, F>::type;

}  // namespace weft
