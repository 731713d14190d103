//! Missing CUDA libraries are errors that say what was searched, never panics.

use weft_gpu::{Device, GpuError};

#[test]
fn device_queries_return_errors_instead_of_panicking() {
    match Device::count() {
        Ok(n) => {
            // A machine with the driver: opening a GPU past the last one is a clear error.
            let err = Device::new(n).unwrap_err();
            assert!(matches!(err, GpuError::NoSuchDevice { ordinal, count } if ordinal == n && count == n));
        }
        Err(GpuError::LibraryMissing { library, searched }) => {
            assert_eq!(library, "libcuda");
            assert!(searched.iter().any(|s| s.contains("libcuda.so")), "{searched:?}");
            // Asking again gives the same answer (the outcome is cached, not re-panicking).
            assert!(matches!(Device::new(0), Err(GpuError::LibraryMissing { .. })));
        }
        Err(other) => panic!("unexpected error kind: {other}"),
    }
}

#[test]
fn cuda_header_search_names_where_it_looked() {
    match weft_gpu::loader::cuda_include_dirs() {
        Ok(dirs) => assert!(dirs[0].join("cuda_fp16.h").is_file()),
        Err(GpuError::HeadersMissing { searched }) => assert!(!searched.is_empty()),
        Err(other) => panic!("unexpected error kind: {other}"),
    }
}
