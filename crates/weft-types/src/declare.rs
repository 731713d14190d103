//! Declaration macros: one Rust definition yields the struct, its layout record and its C++ text.

/// One field of a device-visible struct.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldInfo {
    /// Field name, identical in Rust and C++.
    pub name: &'static str,
    /// C++ declaration type (`uint64_t`, `WaitContext`, ...).
    pub c_type: &'static str,
    /// Byte offset from the start of the struct.
    pub offset: usize,
    /// Documentation carried into the generated header.
    pub doc: &'static str,
}

/// Layout record of a device-visible struct.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StructInfo {
    /// Type name, identical in Rust and C++.
    pub name: &'static str,
    /// `size_of`.
    pub size: usize,
    /// `align_of`.
    pub align: usize,
    /// Fields in declaration order.
    pub fields: Vec<FieldInfo>,
    /// First line of the documentation, carried into the generated header.
    pub doc: &'static str,
}

/// A device-visible `u32` enum: its name and `(variant, value, doc)` triples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnumInfo {
    /// Type name, identical in Rust and C++.
    pub name: &'static str,
    /// `(variant, value, doc)` in declaration order.
    pub variants: Vec<(&'static str, u32, &'static str)>,
    /// Documentation carried into the generated header.
    pub doc: &'static str,
}

/// Declares `#[repr(C)]` structs shared with device code plus a `structs()` function returning
/// their [`StructInfo`]s. Each field names its C++ type after `=>`.
macro_rules! device_structs {
    ($(
        #[doc = $doc:literal]
        $(#[doc = $more:literal])*
        struct $name:ident align($align:literal) size($size:literal) {
            $( #[doc = $fdoc:literal] $field:ident : $rty:ty => $cty:literal ),* $(,)?
        }
    )*) => {
        $(
            #[doc = $doc]
            $(#[doc = $more])*
            #[repr(C, align($align))]
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
            pub struct $name {
                $( #[doc = $fdoc] pub $field: $rty, )*
            }
            const _: () = assert!(
                ::core::mem::size_of::<$name>() == $size && ::core::mem::align_of::<$name>() == $align,
                concat!("layout of ", stringify!($name), " changed: update its declared size")
            );
            // Padding is spelled out as fields: every byte of a value is initialised, so a
            // value may be copied and compared as bytes (kernel arguments are).
            const _: () = assert!(
                ::core::mem::size_of::<$name>() == 0 $( + ::core::mem::size_of::<$rty>() )*,
                concat!(stringify!($name), " has implicit padding: declare it as a field")
            );
        )*

        /// Layout records of the structs declared in this module.
        pub(crate) fn structs() -> Vec<$crate::declare::StructInfo> {
            vec![$(
                $crate::declare::StructInfo {
                    name: stringify!($name),
                    size: ::core::mem::size_of::<$name>(),
                    align: ::core::mem::align_of::<$name>(),
                    doc: $doc,
                    fields: vec![$(
                        $crate::declare::FieldInfo {
                            name: stringify!($field),
                            c_type: $cty,
                            offset: ::core::mem::offset_of!($name, $field),
                            doc: $fdoc,
                        },
                    )*],
                },
            )*]
        }
    };
}

/// Declares `#[repr(u32)]` enums shared with device code plus an `enums()` function returning
/// their [`EnumInfo`]s.
macro_rules! device_enums {
    ($(
        #[doc = $doc:literal]
        $(#[doc = $more:literal])*
        enum $name:ident {
            $( #[doc = $vdoc:literal] $variant:ident = $value:literal ),* $(,)?
        }
    )*) => {
        $(
            #[doc = $doc]
            $(#[doc = $more])*
            #[repr(u32)]
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
            pub enum $name {
                $( #[doc = $vdoc] $variant = $value, )*
            }

            impl $name {
                /// The variant with this raw value, if any.
                pub fn from_raw(raw: u32) -> Option<Self> {
                    match raw {
                        $( $value => Some(Self::$variant), )*
                        _ => None,
                    }
                }
            }
        )*

        /// Records of the enums declared in this module.
        pub(crate) fn enums() -> Vec<$crate::declare::EnumInfo> {
            vec![$(
                $crate::declare::EnumInfo {
                    name: stringify!($name),
                    doc: $doc,
                    variants: vec![$( (stringify!($variant), $value, $vdoc), )*],
                },
            )*]
        }
    };
}
