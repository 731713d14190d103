//! The C ABI without a GPU: the types probe and a C program compiled by gcc against the real
//! `nccl.h` (installed by `scripts/nccl-header.sh`), linked against the built `libnccl.so.2`,
//! and an `nm -D` comparison of our exports with the header's declarations. Without gcc or
//! without the header, each test prints that it skipped and why; with `WEFT_REQUIRE_CC=1`
//! (scripts/test.sh sets it) that is a failure instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folder holding `nccl.h` (whether it does is [`can_compile`]'s check).
fn nccl_include() -> PathBuf {
    std::env::var_os("WEFT_NCCL_HEADER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".deps/nccl/nvidia/nccl/include"))
}

/// The CUDA include folders nccl.h needs (`cuda_runtime.h` with its `crt/` headers, and CCCL for
/// `cuda_fp16.h`): scripts/nccl-header.sh installs them beside nccl.h.
fn cuda_includes() -> Vec<PathBuf> {
    let mut candidates = vec![nccl_include().join("../../cu13/include")];
    candidates.extend(
        ["WEFT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"]
            .iter()
            .filter_map(std::env::var_os)
            .map(|p| PathBuf::from(p).join("include")),
    );
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    let dir = candidates
        .into_iter()
        .find(|d| d.join("cuda_runtime.h").is_file() && d.join("crt/host_config.h").is_file())
        .unwrap_or_else(|| panic!("no CUDA headers for nccl.h (cuda_runtime.h, crt/): run scripts/nccl-header.sh"));
    vec![dir.join("cccl"), dir]
}

/// `-I` arguments for nccl.h.
fn include_args() -> Vec<String> {
    std::iter::once(nccl_include()).chain(cuda_includes()).map(|d| format!("-I{}", d.display())).collect()
}

/// Whether `test` can compile C against nccl.h here: gcc runs and the header is installed.
/// When not, prints that `test` skipped and why (a line in the test output) and returns false;
/// with `WEFT_REQUIRE_CC=1` it panics instead, so CI cannot pass by skipping.
fn can_compile(test: &str) -> bool {
    can_compile_with(test, "gcc")
}

/// [`can_compile`] with `compiler` (`g++` for the device API's C++ headers).
fn can_compile_with(test: &str, compiler: &str) -> bool {
    let missing = if !Command::new(compiler).arg("--version").output().is_ok_and(|o| o.status.success()) {
        format!("{compiler} is not installed")
    } else if !nccl_include().join("nccl.h").is_file() {
        format!("{} has no nccl.h (run scripts/nccl-header.sh, or set WEFT_NCCL_HEADER_DIR)", nccl_include().display())
    } else {
        return true;
    };
    skip(test, &format!("{missing}, so it cannot compile its program"));
    false
}

/// Declares that `test` skipped because of `why`: a line on stderr that the test harness does
/// not capture (so it shows in a passing run), or, under `WEFT_REQUIRE_CC=1`, a panic.
fn skip(test: &str, why: &str) {
    assert!(
        std::env::var("WEFT_REQUIRE_CC").as_deref() != Ok("1"),
        "{test}: {why}, and WEFT_REQUIRE_CC=1 forbids skipping"
    );
    let line = format!("SKIPPED {test}: {why}; WEFT_REQUIRE_CC=1 makes this a failure\n");
    // Written to the stream itself, not through eprintln!, which the harness captures.
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}

/// The built cdylib, laid out as scripts/package-nccl.sh ships it (`libnccl.so.2` and a
/// `libnccl.so` link) in a folder of their own; made once per test run.
fn packaged_library() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        let deps = exe.parent().expect("target/<profile>/deps/<test>");
        let profile_dir = deps.parent().expect("target/<profile>/deps");
        // `cargo test` leaves the cdylib in deps/; `cargo build` also copies it up a level.
        let built =
            [deps.join("libnccl.so"), profile_dir.join("libnccl.so")].into_iter().find(|p| p.is_file()).unwrap_or_else(
                || panic!("libnccl.so was not built in {} (cargo builds the cdylib with the tests)", deps.display()),
            );
        let dir = profile_dir.join("weft-nccl-ctest");
        std::fs::create_dir_all(&dir).expect("test folder");
        for (link, target) in [("libnccl.so.2", built.as_path()), ("libnccl.so", Path::new("libnccl.so.2"))] {
            let _ = std::fs::remove_file(dir.join(link));
            std::os::unix::fs::symlink(target, dir.join(link)).expect("library link");
        }
        dir
    })
    .clone()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed ({}):\n{text}", out.status);
    text
}

/// Checks that `source` (written to `file` in the test folder) compiles with `compiler` against
/// the headers, warnings as errors.
fn syntax_check(compiler: &str, standard: &str, file: &str, source: &str) {
    let path = packaged_library().join(file);
    std::fs::write(&path, source).expect("write probe");
    run(Command::new(compiler).args([standard, "-fsyntax-only", "-Werror"]).args(include_args()).arg(&path));
}

/// Builds `source` into `exe` with `compiler` (`flags` first) against the headers, linked with
/// `lib` (a folder and the `-l` argument naming the library in it), which the program finds at
/// run time through its rpath.
fn build(compiler: &str, flags: &[&str], source: &Path, lib: (&Path, &str), exe: &Path) {
    let (dir, name) = lib;
    run(Command::new(compiler)
        .args(flags)
        .args(include_args())
        .arg(source)
        .arg("-L")
        .arg(dir)
        .arg(name)
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-o")
        .arg(exe));
}

/// Builds the test program `tests/c/<file>` with `compiler` (`flags` and every warning as an
/// error) against the packaged library; returns the program's path.
fn build_test_program(compiler: &str, flags: &[&str], file: &str) -> PathBuf {
    let dir = packaged_library();
    let exe = dir.join(Path::new(file).file_stem().expect("a file name"));
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(file);
    let flags: Vec<&str> = flags.iter().copied().chain(["-Wall", "-Wextra", "-Werror"]).collect();
    build(compiler, &flags, &source, (&dir, "-lnccl"), &exe);
    exe
}

/// Runs a test program against weft alone (no fallback to a real NCCL) and checks that it
/// reports no failed case.
fn run_test_program(exe: &Path) {
    let output = run(Command::new(exe)
        .env_remove("WEFT_NCCL_FALLBACK_LIB")
        .env_remove("WEFT_NCCL_FORCE_FALLBACK")
        .env("WEFT_BOOTSTRAP_TIMEOUT", "5"));
    println!("{output}");
    assert!(output.contains(", 0 failed"), "{output}");
}

/// Every function nccl.h declares (comments stripped).
fn header_functions(header: &str) -> BTreeSet<String> {
    let mut code = String::new();
    let mut rest = header;
    while let Some(start) = rest.find("/*") {
        code.push_str(&rest[..start]);
        rest = rest[start + 2..].find("*/").map_or("", |end| &rest[start + 2 + end + 2..]);
    }
    code.push_str(rest);
    let code: String = code.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let bytes = code.as_bytes();
    let mut names = BTreeSet::new();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if is_ident(bytes[i]) && (i == 0 || !is_ident(bytes[i - 1])) {
            let end = (i..bytes.len()).find(|&j| !is_ident(bytes[j])).unwrap_or(bytes.len());
            let word = &code[i..end];
            let after = code[end..].trim_start();
            let name = word.strip_prefix('p').unwrap_or(word);
            let is_api = name.strip_prefix("nccl").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_uppercase()));
            if is_api && after.starts_with('(') {
                names.insert(word.to_string());
            }
            i = end;
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn types_and_constants_match_the_real_header() {
    if !can_compile("types_and_constants_match_the_real_header") {
        return;
    }
    syntax_check("gcc", "-std=gnu11", "probe.c", &nccl::ffi::probe_source());
}

#[test]
fn a_c_program_links_and_gets_nccls_error_codes() {
    if !can_compile("a_c_program_links_and_gets_nccls_error_codes") {
        return;
    }
    let exe = build_test_program("gcc", &["-std=gnu11", "-pthread"], "link_test.c");
    let needed = run(Command::new("readelf").arg("-d").arg(&exe));
    assert!(needed.contains("[libnccl.so.2]"), "the program should need libnccl.so.2 (our SONAME):\n{needed}");
    run_test_program(&exe);
}

#[test]
fn device_types_match_the_real_headers() {
    if !can_compile_with("device_types_match_the_real_headers", "g++") {
        return;
    }
    syntax_check("g++", "-std=c++17", "device_probe.cpp", &nccl::device_ffi::probe_source());
}

#[test]
fn a_cpp_program_uses_the_device_api_host_side() {
    if !can_compile_with("a_cpp_program_uses_the_device_api_host_side", "g++") {
        return;
    }
    let exe = build_test_program("g++", &["-std=c++17"], "device_link_test.cpp");
    run_test_program(&exe);
}

/// weft's requirement arithmetic ([`nccl::dev_requirements`]) against the real NCCL 2.28.9's
/// requirement calls, loaded from the pip package, over a grid of arguments.
#[test]
fn requirement_calls_size_as_the_real_nccl() {
    use nccl::dev_requirements as weft;
    use nccl::device_ffi::*;
    use std::ffi::{CString, c_int};
    let path = nccl_include().join("../lib/libnccl.so.2");
    if !path.is_file() {
        skip("requirement_calls_size_as_the_real_nccl", "no real libnccl.so.2 (scripts/nccl-header.sh installs it)");
        return;
    }
    let c_path = CString::new(path.to_str().expect("utf-8 path")).expect("path");
    // SAFETY: loads a shared library; RTLD_LOCAL keeps its symbols from replacing ours.
    let lib = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!lib.is_null(), "dlopen {}", path.display());
    let sym = |name: &str| {
        let n = CString::new(name).expect("name");
        // SAFETY: a live handle and a C string.
        let f = unsafe { libc::dlsym(lib, n.as_ptr()) };
        assert!(!f.is_null(), "{name} missing");
        f
    };
    type Lsa = unsafe extern "C" fn(
        ncclTeam_t,
        c_int,
        *mut ncclLsaBarrierHandle_t,
        *mut ncclDevResourceRequirements_t,
    ) -> c_int;
    type Gin = unsafe extern "C" fn(
        *mut std::ffi::c_void,
        ncclTeam_t,
        c_int,
        *mut ncclGinBarrierHandle_t,
        *mut ncclDevResourceRequirements_t,
    ) -> c_int;
    type A2a = unsafe extern "C" fn(c_int, c_int, *mut ncclLLA2AHandle_t, *mut ncclDevResourceRequirements_t) -> c_int;
    type Slots = unsafe extern "C" fn(c_int, c_int) -> c_int;
    type Sym = *mut std::ffi::c_void;
    // SAFETY: the signatures nccl_device.h 2.28.9 declares for these symbols.
    let (lsa, gin, a2a, slots) = unsafe {
        (
            std::mem::transmute::<Sym, Lsa>(sym("ncclLsaBarrierCreateRequirement")),
            std::mem::transmute::<Sym, Gin>(sym("ncclGinBarrierCreateRequirement")),
            std::mem::transmute::<Sym, A2a>(sym("ncclLLA2ACreateRequirement")),
            std::mem::transmute::<Sym, Slots>(sym("ncclLLA2ACalcSlots")),
        )
    };
    type Req = ncclDevResourceRequirements_t;
    // NCCL's requirement call (`real`) and weft's, each on a fresh handle: they must agree, their
    // out-pointers compared as offsets into their own handles. Returns the handles (NCCL's, weft's).
    fn both<H: Default>(
        what: &str,
        real: impl FnOnce(&mut H, &mut Req) -> c_int,
        weft: impl FnOnce(&mut H) -> Result<Req, nccl::NcclError>,
    ) -> (H, H) {
        let relative = |r: Req, handle: &H| {
            let handle = std::ptr::from_ref(handle) as usize;
            let at = |p: usize| if p == 0 { None } else { Some(p - handle) };
            (
                r.next.is_null(),
                r.bufferSize,
                r.bufferAlign,
                at(r.outBufferHandle as usize),
                r.ginSignalCount,
                r.ginCounterCount,
                at(r.outGinSignalStart as usize),
                at(r.outGinCounterStart as usize),
            )
        };
        let (mut h_real, mut h_weft) = (H::default(), H::default());
        let mut r_real = Req::default();
        assert_eq!(real(&mut h_real, &mut r_real), 0, "{what}");
        let r_weft = weft(&mut h_weft).unwrap();
        assert_eq!(relative(r_weft, &h_weft), relative(r_real, &h_real), "{what}");
        (h_real, h_weft)
    }
    for n in [0, 1, 2, 7, 32] {
        for ranks in [1, 2, 4, 8, 72] {
            let team = ncclTeam_t { nRanks: ranks, rank: 0, stride: 1 };
            let (real, ours) = both::<ncclLsaBarrierHandle_t>(
                &format!("lsa {n} {ranks}"),
                // SAFETY: local out-pointers.
                |h, r| unsafe { lsa(team, n, h, r) },
                // SAFETY: a local handle.
                |h| unsafe { weft::lsa_barrier(team, n, h) },
            );
            assert_eq!(ours.nBarriers, real.nBarriers);
            both::<ncclGinBarrierHandle_t>(
                &format!("gin {n}"),
                // SAFETY: local out-pointers; NCCL 2.28.9 reads neither the communicator nor the team.
                |h, r| unsafe { gin(std::ptr::null_mut(), team, n, h, r) },
                // SAFETY: a local handle.
                |h| unsafe { weft::gin_barrier(n, h) },
            );
        }
        for s in [0, 1, 9, 64] {
            let (real, ours) = both::<ncclLLA2AHandle_t>(
                &format!("a2a {n} {s}"),
                // SAFETY: local out-pointers.
                |h, r| unsafe { a2a(n, s, h, r) },
                // SAFETY: a local handle.
                |h| unsafe { weft::ll_a2a(n, s, h) },
            );
            assert_eq!(ours.nSlots, real.nSlots);
        }
    }
    for elts in [0, 1, 7, 100, 4096, 1 << 20] {
        for size in [0, 1, 4, 8, 9, 16, 17, 64] {
            // SAFETY: plain integers.
            assert_eq!(weft::ll_a2a_slots(elts, size).unwrap(), unsafe { slots(elts, size) }, "slots {elts} {size}");
        }
    }
}

#[test]
fn every_function_of_the_header_is_exported_unversioned() {
    if !can_compile("every_function_of_the_header_is_exported_unversioned") {
        return;
    }
    let header = std::fs::read_to_string(nccl_include().join("nccl.h")).expect("read nccl.h");
    let mut declared = header_functions(&header);
    assert!(declared.contains("ncclAllReduce") && declared.contains("pncclGroupEnd") && declared.len() > 60);
    // The host functions of the device API (PyTorch links against some of them).
    let device_api = device_host_functions(&nccl_include().join("nccl_device"));
    assert!(device_api.contains("ncclDevCommCreate") && device_api.contains("pncclTeamWorld"), "{device_api:?}");
    declared.extend(device_api);
    let dir = packaged_library();
    let symbols = run(Command::new("nm").args(["-D", "--defined-only"]).arg(dir.join("libnccl.so.2")));
    let exported: BTreeSet<String> = symbols
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            (kind == "T").then(|| name.to_string())
        })
        .collect();
    let missing: Vec<_> = declared.difference(&exported).collect();
    assert!(missing.is_empty(), "declared in nccl.h but not exported: {missing:?}");
    let extra: Vec<_> = exported.iter().filter(|n| n.contains("nccl") && !declared.contains(*n)).collect();
    assert!(extra.is_empty(), "exported but not in nccl.h or nccl_device/: {extra:?}");
    assert!(!symbols.contains('@'), "symbols must be unversioned, as the real libnccl's are:\n{symbols}");
}

/// Functions `nccl_device/*.h` declares `NCCL_EXTERN_C __host__` (exported by the real
/// library), with their `pnccl` aliases.
fn device_host_functions(dir: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(dir).expect("read nccl_device/").flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines().filter(|l| l.trim_start().starts_with("NCCL_EXTERN_C __host__")) {
            let before = line.split('(').next().unwrap_or_default();
            if let Some(name) = before.split_whitespace().last().filter(|n| n.starts_with("nccl")) {
                names.insert(name.to_string());
                names.insert(format!("p{name}"));
            }
        }
    }
    names
}

#[test]
fn the_header_parser_skips_comments() {
    let names = header_functions("/* ncclFake(x) */ int ncclA(int);\n// ncclB(\nint pncclA (int); NCCL_X(1) ncclC_t;");
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["ncclA", "pncclA"]);
}

/// A program built against the real NCCL picks up weft's entry points under `LD_PRELOAD`, and
/// the real ones without it.
#[test]
fn ld_preload_puts_weft_in_front_of_the_real_nccl() {
    if !can_compile("ld_preload_puts_weft_in_front_of_the_real_nccl") {
        return;
    }
    let real_lib = nccl_include().join("../lib");
    if !real_lib.join("libnccl.so.2").is_file() {
        skip(
            "ld_preload_puts_weft_in_front_of_the_real_nccl",
            "no real libnccl.so.2 beside nccl.h (scripts/nccl-header.sh installs it)",
        );
        return;
    }
    let dir = packaged_library();
    let source = dir.join("preload.c");
    std::fs::write(
        &source,
        r#"#include <nccl.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) { printf("id failed\n"); return 1; }
  printf("%s\n", memcmp(id.internal, "wfID", 4) == 0 ? "weft" : "nccl");
  return 0;
}
"#,
    )
    .expect("write preload.c");
    let exe = dir.join("preload");
    build("gcc", &["-std=gnu11", "-Wall", "-Werror"], &source, (&real_lib, "-l:libnccl.so.2"), &exe);
    let preloaded = run(Command::new(&exe).env("LD_PRELOAD", dir.join("libnccl.so.2")));
    assert_eq!(preloaded.trim(), "weft");
    // Without the preload the real NCCL answers; it may fail without a network interface, which
    // still shows that our library was not the one called.
    let out = Command::new(&exe).env_remove("LD_PRELOAD").output().expect("run preload test");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("weft"));
}
