//! The C types and constants of `nccl.h` (NCCL 2.28.9), declared by hand with the header's
//! values. [`probe_source`] turns every number here into a C `_Static_assert` that a test
//! compiles against the real header, so a value that drifts fails the build of the probe.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, missing_docs)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};

/// `ncclResult_t` (a C enum: an `int`).
pub type ncclResult_t = c_int;
/// `ncclDataType_t`.
pub type ncclDataType_t = c_int;
/// `ncclRedOp_t`.
pub type ncclRedOp_t = c_int;
/// `ncclScalarResidence_t`.
pub type ncclScalarResidence_t = c_int;
/// `cudaStream_t` (the driver's `CUstream`; null is the legacy default stream).
pub type cudaStream_t = *mut c_void;
/// `ncclWindow_t` (opaque; only the fallback NCCL creates windows).
pub type ncclWindow_t = *mut c_void;

/// `struct ncclComm`, opaque to applications.
#[repr(C)]
#[derive(Debug)]
pub struct ncclComm {
    _private: [u8; 0],
}

/// `ncclComm_t`.
pub type ncclComm_t = *mut ncclComm;

pub const NCCL_MAJOR: c_int = 2;
pub const NCCL_MINOR: c_int = 28;
pub const NCCL_PATCH: c_int = 9;
/// What `ncclGetVersion` reports: the version of the API weft implements.
pub const NCCL_VERSION_CODE: c_int = 22809;
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;
pub const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;
pub const NCCL_SPLIT_NOCOLOR: c_int = -1;
/// `NCCL_CONFIG_INITIALIZER`'s magic.
pub const NCCL_CONFIG_MAGIC: c_uint = 0xcafe_beef;

pub const ncclSuccess: ncclResult_t = 0;
pub const ncclUnhandledCudaError: ncclResult_t = 1;
pub const ncclSystemError: ncclResult_t = 2;
pub const ncclInternalError: ncclResult_t = 3;
pub const ncclInvalidArgument: ncclResult_t = 4;
pub const ncclInvalidUsage: ncclResult_t = 5;
pub const ncclRemoteError: ncclResult_t = 6;
pub const ncclInProgress: ncclResult_t = 7;
pub const ncclNumResults: ncclResult_t = 8;

pub const ncclSum: ncclRedOp_t = 0;
pub const ncclProd: ncclRedOp_t = 1;
pub const ncclMax: ncclRedOp_t = 2;
pub const ncclMin: ncclRedOp_t = 3;
pub const ncclAvg: ncclRedOp_t = 4;
pub const ncclNumOps: ncclRedOp_t = 5;
pub const ncclMaxRedOp: ncclRedOp_t = 0x7fff_ffff;

pub const ncclInt8: ncclDataType_t = 0;
pub const ncclChar: ncclDataType_t = 0;
pub const ncclUint8: ncclDataType_t = 1;
pub const ncclInt32: ncclDataType_t = 2;
pub const ncclInt: ncclDataType_t = 2;
pub const ncclUint32: ncclDataType_t = 3;
pub const ncclInt64: ncclDataType_t = 4;
pub const ncclUint64: ncclDataType_t = 5;
pub const ncclFloat16: ncclDataType_t = 6;
pub const ncclHalf: ncclDataType_t = 6;
pub const ncclFloat32: ncclDataType_t = 7;
pub const ncclFloat: ncclDataType_t = 7;
pub const ncclFloat64: ncclDataType_t = 8;
pub const ncclDouble: ncclDataType_t = 8;
pub const ncclBfloat16: ncclDataType_t = 9;
pub const ncclFloat8e4m3: ncclDataType_t = 10;
pub const ncclFloat8e5m2: ncclDataType_t = 11;
pub const ncclNumTypes: ncclDataType_t = 12;

pub const ncclScalarDevice: ncclScalarResidence_t = 0;
pub const ncclScalarHostImmediate: ncclScalarResidence_t = 1;

/// `ncclUniqueId`: 128 opaque bytes (weft's [`weft_bootstrap::UniqueId`] layout).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclUniqueId {
    pub internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

/// `ncclConfig_t` (`struct ncclConfig_v22800`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclConfig_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub cgaClusterSize: c_int,
    pub minCTAs: c_int,
    pub maxCTAs: c_int,
    pub netName: *const c_char,
    pub splitShare: c_int,
    pub trafficClass: c_int,
    pub commName: *const c_char,
    pub collnetEnable: c_int,
    pub CTAPolicy: c_int,
    pub shrinkShare: c_int,
    pub nvlsCTAs: c_int,
    pub nChannelsPerNetPeer: c_int,
    pub nvlinkCentricSched: c_int,
}

impl Default for ncclConfig_t {
    /// `NCCL_CONFIG_INITIALIZER`.
    fn default() -> Self {
        let undef = NCCL_CONFIG_UNDEF_INT;
        Self {
            size: size_of::<Self>(),
            magic: NCCL_CONFIG_MAGIC,
            version: NCCL_VERSION_CODE as c_uint,
            blocking: undef,
            cgaClusterSize: undef,
            minCTAs: undef,
            maxCTAs: undef,
            netName: std::ptr::null(),
            splitShare: undef,
            trafficClass: undef,
            commName: std::ptr::null(),
            collnetEnable: undef,
            CTAPolicy: undef,
            shrinkShare: undef,
            nvlsCTAs: undef,
            nChannelsPerNetPeer: undef,
            nvlinkCentricSched: undef,
        }
    }
}

/// `ncclSimInfo_t` (`struct ncclSimInfo_v22200`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclSimInfo_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub estimatedTime: f32,
}

/// A translation unit whose static assertions compare values declared in Rust with a C
/// header's: one assertion per [`Probe::check`].
#[derive(Debug)]
pub struct Probe {
    source: String,
    keyword: &'static str,
    origin: &'static str,
}

impl Probe {
    /// A unit that starts with `prelude` (its includes) and asserts with `keyword`
    /// (`_Static_assert` in C, `static_assert` in C++); a failure names `origin`.
    pub fn new(prelude: &str, keyword: &'static str, origin: &'static str) -> Self {
        Self { source: prelude.to_string(), keyword, origin }
    }

    /// Asserts that the C expression `expr` equals `want`.
    pub fn check(&mut self, expr: &str, want: i128) {
        let (keyword, origin) = (self.keyword, self.origin);
        self.source
            .push_str(&format!("{keyword}((long long)({expr}) == {want}LL, \"{expr} != {want} ({origin})\");\n"));
    }

    /// The source text.
    pub fn finish(self) -> String {
        self.source
    }
}

/// A C translation unit that includes `nccl.h` and `_Static_assert`s every constant, size and
/// field offset declared in this module against it.
pub fn probe_source() -> String {
    let mut probe = Probe::new("#include <stddef.h>\n#include <nccl.h>\n", "_Static_assert", "weft-nccl ffi.rs");
    let mut check = |expr: String, want: i128| probe.check(&expr, want);
    macro_rules! values {
        ($($name:ident),* $(,)?) => { $(check(stringify!($name).to_string(), i128::from($name));)* };
    }
    values!(
        NCCL_MAJOR,
        NCCL_MINOR,
        NCCL_PATCH,
        NCCL_VERSION_CODE,
        NCCL_CONFIG_UNDEF_INT,
        NCCL_SPLIT_NOCOLOR,
        ncclSuccess,
        ncclUnhandledCudaError,
        ncclSystemError,
        ncclInternalError,
        ncclInvalidArgument,
        ncclInvalidUsage,
        ncclRemoteError,
        ncclInProgress,
        ncclNumResults,
        ncclSum,
        ncclProd,
        ncclMax,
        ncclMin,
        ncclAvg,
        ncclNumOps,
        ncclMaxRedOp,
        ncclInt8,
        ncclChar,
        ncclUint8,
        ncclInt32,
        ncclInt,
        ncclUint32,
        ncclInt64,
        ncclUint64,
        ncclFloat16,
        ncclHalf,
        ncclFloat32,
        ncclFloat,
        ncclFloat64,
        ncclDouble,
        ncclBfloat16,
        ncclFloat8e4m3,
        ncclFloat8e5m2,
        ncclNumTypes,
        ncclScalarDevice,
        ncclScalarHostImmediate,
    );
    check("NCCL_UNIQUE_ID_BYTES".into(), NCCL_UNIQUE_ID_BYTES as i128);
    for (ty, size) in [
        ("ncclResult_t", size_of::<ncclResult_t>()),
        ("ncclDataType_t", size_of::<ncclDataType_t>()),
        ("ncclRedOp_t", size_of::<ncclRedOp_t>()),
        ("ncclScalarResidence_t", size_of::<ncclScalarResidence_t>()),
        ("ncclUniqueId", size_of::<ncclUniqueId>()),
        ("ncclConfig_t", size_of::<ncclConfig_t>()),
        ("ncclSimInfo_t", size_of::<ncclSimInfo_t>()),
        ("ncclComm_t", size_of::<ncclComm_t>()),
        ("cudaStream_t", size_of::<cudaStream_t>()),
    ] {
        check(format!("sizeof({ty})"), size as i128);
    }
    macro_rules! offsets {
        ($ty:ident: $($field:ident),*) => {
            $(check(format!("offsetof({}, {})", stringify!($ty), stringify!($field)), offset_of!($ty, $field) as i128);)*
        };
    }
    offsets!(ncclConfig_t: size, magic, version, blocking, cgaClusterSize, minCTAs, maxCTAs, netName, splitShare,
        trafficClass, commName, collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nChannelsPerNetPeer, nvlinkCentricSched);
    offsets!(ncclSimInfo_t: size, magic, version, estimatedTime);
    probe.finish()
}
