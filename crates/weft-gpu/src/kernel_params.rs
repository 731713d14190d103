//! Typed kernel parameter lists: [`device_kernels!`](crate::device_kernels) declares each
//! kernel's parameters once, in Rust, and yields the struct a launch takes and the C++
//! prototypes that NVRTC checks the kernel definitions against.
//!
//! The chain that keeps host and device in agreement, with nothing compared by hand:
//! - a launch takes a [`KernelParams`] struct, whose fields the macro packs in declaration
//!   order, and [`Kernel::launch`](crate::Kernel::launch) refuses a struct not declared for the
//!   kernel's name;
//! - [`prototypes_header`] writes an `extern "C" __global__` prototype per kernel from the same
//!   declaration, with a `static_assert` that every C++ parameter has its Rust field's size and
//!   alignment;
//! - the kernel sources include that header, so a definition whose parameter list differs is a
//!   second `extern "C"` function of the same name: an NVRTC error.

use std::fmt::Write as _;

use crate::module::KernelArgs;

/// A kernel parameter list declared by [`device_kernels!`](crate::device_kernels): the struct
/// a launch of the kernels it names takes.
pub trait KernelParams {
    /// The `extern "C"` names of the kernels taking this parameter list.
    const KERNELS: &'static [&'static str];

    /// The fields as kernel arguments, in declaration order.
    fn args(&self) -> KernelArgs;
}

/// One declared kernel parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelParam {
    /// Parameter name, identical in Rust and C++.
    pub name: &'static str,
    /// C++ declaration type (`const char*`, `const __grid_constant__ weft::PeerBuffers`, ...).
    pub c_type: &'static str,
    /// `size_of` of the Rust field type.
    pub size: usize,
    /// `align_of` of the Rust field type.
    pub align: usize,
}

/// One declared parameter list and the kernels that take it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSignature {
    /// Name of the Rust struct.
    pub params_struct: &'static str,
    /// The `extern "C"` names of the kernels taking it.
    pub kernels: &'static [&'static str],
    /// Parameters in declaration order.
    pub params: Vec<KernelParam>,
    /// First line of the struct's documentation, carried into the generated header.
    pub doc: &'static str,
}

/// The C++ header of `signatures`: for every kernel an `extern "C" __global__` prototype and
/// `static_assert`s of each parameter's size and alignment against the Rust field. `owner`
/// names the kernels' folder or crate in the header's first line. Kernel sources include the
/// header before defining the kernels.
pub fn prototypes_header(owner: &str, signatures: &[KernelSignature]) -> String {
    let mut out = format!(
        "// Generated from the device_kernels! declarations of {owner}; do not edit.\n\
         // A kernel definition whose parameter list differs from its prototype here is a second\n\
         // extern \"C\" function of the same name, which NVRTC rejects.\n\
         #pragma once\n\
         #include \"weft/generated/types.cuh\"\n\
         #include \"weft/impl/kernel_params.cuh\"\n"
    );
    for signature in signatures {
        for kernel in signature.kernels {
            let params: Vec<String> = signature.params.iter().map(|p| format!("{} {}", p.c_type, p.name)).collect();
            // Writing to a String cannot fail.
            let _ = writeln!(out, "\n// {}: {}", signature.params_struct, signature.doc.trim());
            let _ = writeln!(out, "extern \"C\" __global__ void {kernel}({});", params.join(", "));
            for (i, p) in signature.params.iter().enumerate() {
                let ty = format!("weft::kernel_param_t<{i}, decltype({kernel})>");
                let _ = writeln!(
                    out,
                    "static_assert(sizeof({ty}) == {} && alignof({ty}) == {}, \"{kernel}: {} is {} bytes aligned to {} in Rust\");",
                    p.size, p.align, p.name, p.size, p.align
                );
            }
        }
    }
    out
}

/// Support of [`device_kernels!`](crate::device_kernels)'s expansion; not API.
#[doc(hidden)]
pub mod __private {
    use std::mem::MaybeUninit;

    use crate::module::{KernelArgs, Pod};

    /// A value of `T` whose every byte is `tag`.
    pub fn patterned<T: Pod>(tag: u8) -> T {
        let mut value = MaybeUninit::<T>::uninit();
        // SAFETY: writes size_of::<T>() bytes into the value's own storage; `Pod` accepts any
        // bit pattern, so the fully written value is initialised and valid.
        unsafe {
            value.as_mut_ptr().cast::<u8>().write_bytes(tag, size_of::<T>());
            value.assume_init()
        }
    }

    /// Panics unless argument `index` of `args` holds a `T` of every byte `tag`: the slot is
    /// `T`'s size rounded up to 8 bytes, its first `size_of::<T>()` bytes are `tag` and the rest
    /// zero.
    pub fn check_slot<T: Pod>(args: &KernelArgs, kernel: &str, field: &str, index: usize, tag: u8) {
        let slot = args.slot(index).unwrap_or_else(|| panic!("{kernel}: no argument {index} ({field})"));
        let size = size_of::<T>();
        assert_eq!(slot.len(), size.div_ceil(8).max(1) * 8, "{kernel}: width of argument {index} ({field})");
        assert!(
            slot[..size].iter().all(|&b| b == tag) && slot[size..].iter().all(|&b| b == 0),
            "{kernel}: argument {index} does not hold field {field}"
        );
    }
}

/// Declares kernel parameter lists: per list a struct implementing [`KernelParams`] for the
/// kernels it names, with each field's C++ type after `=>`, plus a function returning every
/// list's [`KernelSignature`] (for [`prototypes_header`]) and, under `cfg(test)`, a test per
/// list that its arguments pack in declaration order and width.
///
/// Fields must be [`Pod`](crate::Pod); device addresses are `u64` fields with a pointer C type.
/// Kernels compiled per element type and operator from one source (the same name in every
/// variant) are declared once.
///
/// ```
/// weft_gpu::device_kernels! {
///     /// Every kernel declared below.
///     pub fn example_kernels;
///
///     /// Copies `bytes` from `src` to `dst`.
///     pub struct Copy for ["example_copy"] {
///         /// Destination.
///         dst: u64 => "char*",
///         /// Source.
///         src: u64 => "const char*",
///         /// Bytes to copy.
///         bytes: u64 => "uint64_t",
///     }
/// }
/// use weft_gpu::KernelParams;
/// assert_eq!(Copy::KERNELS, ["example_copy"]);
/// let header = weft_gpu::prototypes_header("the example", &example_kernels());
/// assert!(header.contains("extern \"C\" __global__ void example_copy(char* dst, const char* src, uint64_t bytes);"));
/// ```
#[macro_export]
macro_rules! device_kernels {
    (
        $(#[doc = $list_doc:literal])*
        $list_vis:vis fn $list:ident;
        $(
            #[doc = $doc:literal]
            $(#[doc = $more:literal])*
            $vis:vis struct $name:ident for [$($kernel:literal),+ $(,)?] {
                $( $(#[doc = $fdoc:literal])* $field:ident : $rty:ty => $cty:literal ),* $(,)?
            }
        )*
    ) => {
        $(
            #[doc = $doc]
            $(#[doc = $more])*
            #[derive(Clone, Copy, Debug)]
            $vis struct $name {
                $( $(#[doc = $fdoc])* $vis $field: $rty, )*
            }

            impl $crate::KernelParams for $name {
                const KERNELS: &'static [&'static str] = &[$($kernel),+];

                fn args(&self) -> $crate::KernelArgs {
                    let mut args = $crate::KernelArgs::new();
                    $( args.__push(self.$field); )*
                    args
                }
            }
        )*

        $(#[doc = $list_doc])*
        $list_vis fn $list() -> ::std::vec::Vec<$crate::KernelSignature> {
            ::std::vec![$(
                $crate::KernelSignature {
                    params_struct: ::core::stringify!($name),
                    kernels: &[$($kernel),+],
                    doc: $doc,
                    params: ::std::vec![$(
                        $crate::KernelParam {
                            name: ::core::stringify!($field),
                            c_type: $cty,
                            size: ::core::mem::size_of::<$rty>(),
                            align: ::core::mem::align_of::<$rty>(),
                        },
                    )*],
                },
            )*]
        }

        #[cfg(test)]
        mod kernel_packing {
            #[allow(unused_imports)]
            use super::*;
            $(
                /// Field i, every byte i + 1, lands in argument i, alone in its slot.
                #[test]
                #[allow(non_snake_case, unused_mut, unused_assignments)]
                fn $name() {
                    use $crate::KernelParams as _;
                    let mut tag = 0u8;
                    let value = super::$name {
                        $( $field: { tag += 1; $crate::kernel_params::__private::patterned::<$rty>(tag) }, )*
                    };
                    let args = value.args();
                    let kernel = ::core::stringify!($name);
                    let mut index = 0usize;
                    $(
                        $crate::kernel_params::__private::check_slot::<$rty>(
                            &args, kernel, ::core::stringify!($field), index, index as u8 + 1,
                        );
                        index += 1;
                    )*
                    assert_eq!(args.len(), index, "{kernel}: argument count");
                    let _ = tag;
                }
            )*
        }
    };
}
