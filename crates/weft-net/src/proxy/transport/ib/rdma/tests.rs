//! The binding without a NIC: layouts and constants against the real verbs.h, the library's
//! loading and its report of no devices, the endpoint codec and the completion translation.
//!
//! `WEFT_IBVERBS_ROOT` names an extracted rdma-core (`scripts/ibverbs.sh`); without it the
//! tests that need verbs.h or libibverbs say SKIPPED, unless `WEFT_REQUIRE_IBVERBS=1` (as in
//! `scripts/test.sh`), where its absence fails them.

use std::path::PathBuf;
use std::process::Command;

use super::*;

/// The extracted rdma-core, or `None` (after saying so) when the test cannot run here.
fn ibverbs_root(test: &str) -> Option<PathBuf> {
    match std::env::var_os("WEFT_IBVERBS_ROOT") {
        Some(root) => Some(PathBuf::from(root)),
        None if std::env::var("WEFT_REQUIRE_IBVERBS").is_ok_and(|v| v == "1") => {
            panic!("{test}: WEFT_IBVERBS_ROOT is not set (scripts/ibverbs.sh prints it)")
        }
        None => {
            eprintln!("SKIPPED {test}: WEFT_IBVERBS_ROOT is not set (scripts/ibverbs.sh prints it)");
            None
        }
    }
}

#[test]
fn every_layout_and_constant_matches_verbs_h() {
    let Some(root) = ibverbs_root("every_layout_and_constant_matches_verbs_h") else { return };
    let facts = abi_facts();
    let mut program =
        String::from("#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\nint main(void) {\n");
    for (expr, _) in &facts {
        program.push_str(&format!("  printf(\"%llu\\n\", (unsigned long long)({expr}));\n"));
    }
    program.push_str("  return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("weft-ibverbs-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (source, exe) = (dir.join("abi.c"), dir.join("abi"));
    std::fs::write(&source, program).unwrap();
    let built = Command::new("gcc")
        .arg("-std=gnu11")
        .arg("-I")
        .arg(root.join("usr/include"))
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("gcc runs");
    assert!(built.status.success(), "the probe does not compile: {}", String::from_utf8_lossy(&built.stderr));
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let printed: Vec<u64> = String::from_utf8(run.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(printed.len(), facts.len());
    let wrong: Vec<String> = facts
        .iter()
        .zip(&printed)
        .filter(|((_, ours), theirs)| ours != *theirs)
        .map(|((expr, ours), theirs)| format!("{expr}: verbs.h {theirs}, ours {ours}"))
        .collect();
    assert!(wrong.is_empty(), "layouts or constants differ from verbs.h:\n{}", wrong.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_library_loads_and_reports_that_there_is_no_device() {
    let Some(root) = ibverbs_root("the_library_loads_and_reports_that_there_is_no_device") else { return };
    // libibverbs needs libnl; loaded first by path, the dynamic linker reuses them by soname.
    let _libnl: Vec<libloading::Library> =
        ["lib/x86_64-linux-gnu/libnl-3.so.200", "usr/lib/x86_64-linux-gnu/libnl-route-3.so.200"]
            .iter()
            // SAFETY: libnl's initialisers only set up its own state.
            .map(|p| unsafe { libloading::Library::new(root.join(p)) }.unwrap())
            .collect();
    let library = root.join("usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    let library = library.to_str().unwrap();
    let api = Api::load(library).unwrap();
    assert!(api.reg_mr_iova2.is_some() && api.reg_dmabuf_mr.is_some(), "rdma-core 44 has both optional entry points");
    if std::path::Path::new("/sys/class/infiniband").exists() {
        // A machine with RDMA devices: they must at least list.
        assert!(device_names(library).is_ok());
        return;
    }
    assert_eq!(device_names(library).unwrap_or_default(), Vec::<String>::new());
    let err = RdmaVerbs::open(library, RdmaConfig::default()).unwrap_err();
    assert_eq!(err, RdmaError::NoDevice);
    let named = RdmaVerbs::open(library, RdmaConfig { device: Some("mlx5_0".into()), ..RdmaConfig::default() });
    assert!(matches!(named, Err(RdmaError::NoDevice | RdmaError::DeviceNotFound { .. })), "{named:?}");
}

#[test]
fn a_missing_library_is_an_error_naming_it() {
    let err = RdmaVerbs::open("/nonexistent/libibverbs.so.1", RdmaConfig::default()).unwrap_err();
    assert!(matches!(&err, RdmaError::Load { path, .. } if path == "/nonexistent/libibverbs.so.1"), "{err}");
    assert!(err.to_string().contains(LIBRARY_ENV), "{err}");
}

#[test]
fn endpoints_survive_their_encoding() {
    let e = QpEndpoint {
        lid: 0xBEEF,
        qpn: 0x12_3456,
        psn: psn_of(0x12_3456),
        mtu: 5,
        gid: std::array::from_fn(|i| i as u8 * 17),
    };
    assert_eq!(QpEndpoint::from_bytes(&e.to_bytes()), e);
    assert!(psn_of(7) < 1 << 24 && psn_of(7) != psn_of(8));
}

#[test]
fn completions_translate_by_opcode_and_failed_receives_by_their_tag() {
    let text = |s: u32| format!("status {s}");
    let write = IbvWc { wr_id: (3 << 48) | 9, opcode: IBV_WC_RDMA_WRITE, ..IbvWc::default() };
    assert_eq!(
        completion(&write, text),
        WorkCompletion { wr_id: (3 << 48) | 9, kind: CompletionKind::Write, status: Ok(()) }
    );
    let recv = IbvWc {
        wr_id: RECV_WR_TAG | 5,
        opcode: IBV_WC_RECV_RDMA_WITH_IMM,
        wc_flags: IBV_WC_WITH_IMM,
        imm_data: 5u32.to_be(),
        qp_num: 77,
        ..IbvWc::default()
    };
    assert_eq!(completion(&recv, text).kind, CompletionKind::RecvWriteImm { qp: 77, imm: 5 });
    let counter = IbvWc { opcode: IBV_WC_RECV, imm_data: 0xDEAD_BEEFu32.to_be(), ..recv };
    assert_eq!(completion(&counter, text).kind, CompletionKind::RecvSendImm { qp: 77, imm: 0xDEAD_BEEF });
    let plain_send = IbvWc { wc_flags: 0, ..counter };
    assert_eq!(
        completion(&plain_send, text).kind,
        CompletionKind::RecvWriteImm { qp: 77, imm: u32::MAX },
        "a send without immediate is no counter update: refused as a signal for no connection"
    );
    let flushed_recv = IbvWc { wr_id: RECV_WR_TAG | 5, status: 5, opcode: 0, qp_num: 77, ..IbvWc::default() };
    let c = completion(&flushed_recv, text);
    assert!(
        matches!(c.kind, CompletionKind::RecvWriteImm { qp: 77, .. })
            && c.status == Err(CompletionError { status: 5, text: "status 5".into() })
    );
    let failed_write = IbvWc { wr_id: 1, status: 12, opcode: 0x80, ..IbvWc::default() };
    assert_eq!(completion(&failed_write, text).kind, CompletionKind::Write, "a failed write's opcode is not read");
}
