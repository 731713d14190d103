//! The NCCL conformance harness (`scripts/nccl-conformance/`) without a GPU: it builds with g++
//! against the real `nccl.h`, the CPU test of its host reference passes (NCCL's integer
//! semantics, float formats against CUDA's conversions, every collective's plan against simulated
//! libraries), and the harness loads both weft's library and the real NCCL and resolves every
//! function it calls from each. Skipped, with a message, only when g++ is absent.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn have_gxx() -> bool {
    let ok = Command::new("g++").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: g++ is not installed, so the conformance harness cannot be built");
    }
    ok
}

/// The folder holding `nccl.h` (and the real `libnccl.so.2` in `../lib`).
fn nccl_include() -> PathBuf {
    std::env::var_os("WEFT_NCCL_HEADER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".deps/nccl/nvidia/nccl/include"))
}

fn output(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn the_harness_builds_its_reference_passes_and_it_loads_both_libraries() {
    if !have_gxx() {
        return;
    }
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let out_dir = deps.parent().expect("target/<profile>").join("nccl-conformance");
    let (ok, text) = output(
        Command::new(repo_root().join("scripts/nccl-conformance/build.sh"))
            .arg("--test")
            .arg(&out_dir)
            .env("NCCL_INCLUDE", nccl_include()),
    );
    println!("{text}");
    assert!(ok, "build.sh --test failed:\n{text}");
    assert!(text.contains(", 0 failed"), "the reference test should report 0 failures:\n{text}");

    // Both libraries load side by side (RTLD_LOCAL | RTLD_DEEPBIND) and export everything the
    // harness calls; without a GPU it then stops at the first CUDA call.
    let real = nccl_include().join("../lib/libnccl.so.2");
    let weft = [deps.join("libnccl.so"), deps.parent().unwrap().join("libnccl.so")]
        .into_iter()
        .find(|p| p.is_file())
        .expect("cargo builds the libnccl.so cdylib with the tests");
    if !real.is_file() {
        eprintln!("SKIPPED: no real libnccl.so.2 beside nccl.h (scripts/nccl-header.sh installs it)");
        return;
    }
    let (_, text) = output(
        Command::new(out_dir.join("conformance"))
            .args(["--gpus", "2", "--timeout", "20", "--colls", "AllReduce", "--types", "int32", "--ops", "sum"])
            .args(["--counts", "7", "--no-api"])
            .arg("--weft")
            .arg(&weft)
            .arg("--nccl")
            .arg(&real),
    );
    println!("{text}");
    assert!(text.contains("weft: ") && text.contains("version 22809"), "weft's library did not load:\n{text}");
    assert!(text.contains("nccl: "), "the real NCCL did not load:\n{text}");
    assert!(!text.contains("does not export"), "a function the harness needs is missing:\n{text}");
}
