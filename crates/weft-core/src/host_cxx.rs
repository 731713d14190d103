//! Device headers evaluated on the host: a test compiles a small C++ program that includes a
//! header of plain arithmetic from `device/` (the executor's chunk geometry, the chain's step
//! geometry) with the host C++ compiler (`$CXX`, else `g++`), and holds its answers to the Rust
//! definition or to invariants. Without a compiler the test is skipped with a line on stderr,
//! unless `WEFT_REQUIRE_CC=1` (scripts/test.sh sets it): then the skip is a failure.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Compiles `source` (C++17, warnings as errors) with `includes` on the include path into
/// `exe`. `Ok(None)`: no C++ compiler here and skipping is allowed (a SKIPPED line naming
/// `what` went to stderr). `Err`: the compiler failed, with its output, or skipping is
/// forbidden.
pub fn compile(what: &str, source: &Path, includes: &[PathBuf], exe: &Path) -> Result<Option<PathBuf>, String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    if !Command::new(&cxx).arg("--version").output().is_ok_and(|o| o.status.success()) {
        let why = format!("{cxx} is not installed, so {what} is not evaluated on the host");
        if std::env::var("WEFT_REQUIRE_CC").as_deref() == Ok("1") {
            return Err(format!("{why}, and WEFT_REQUIRE_CC=1 forbids skipping"));
        }
        let _ = std::io::stderr()
            .write_all(format!("SKIPPED {what}: {why}; WEFT_REQUIRE_CC=1 makes this a failure\n").as_bytes());
        return Ok(None);
    }
    let out = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror"])
        .args(includes.iter().map(|dir| format!("-I{}", dir.display())))
        .arg(source)
        .arg("-o")
        .arg(exe)
        .output()
        .map_err(|e| format!("running {cxx}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cxx} failed on {what}:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(Some(exe.to_path_buf()))
}

/// A crate test's host program: `tests/<name>.cpp` of the crate at `manifest_dir` (a test's
/// `CARGO_MANIFEST_DIR`, two levels below the repository root), evaluating `header` from the
/// repository's `device/include` and `kernels` (a folder of the repository, e.g.
/// `device/kernels/coll`), compiled into `tmp_dir` (the test's `CARGO_TARGET_TMPDIR`). As
/// [`compile`].
pub fn test_program(
    manifest_dir: &str,
    tmp_dir: &str,
    name: &str,
    header: &str,
    kernels: &str,
) -> Result<Option<PathBuf>, String> {
    let crate_dir = Path::new(manifest_dir);
    let root = crate_dir.join("../..");
    compile(
        header,
        &crate_dir.join(format!("tests/{name}.cpp")),
        &[root.join("device/include"), root.join(kernels)],
        &Path::new(tmp_dir).join(format!("{name}_program")),
    )
}

/// The calling integration test's host program ([`test_program`] of `tests/<name>.cpp`,
/// evaluating `header` from the folder `kernels`), compiled once per test run: `None` when no
/// C++ compiler is here and skipping is allowed. Expands to an `Option<&'static Path>`; a macro
/// so that `CARGO_MANIFEST_DIR` and `CARGO_TARGET_TMPDIR` are the calling test's.
#[macro_export]
macro_rules! host_test_program {
    ($name:literal, $header:literal, $kernels:literal) => {{
        static EXE: ::std::sync::OnceLock<Option<::std::path::PathBuf>> = ::std::sync::OnceLock::new();
        EXE.get_or_init(|| {
            let (dir, tmp) = (env!("CARGO_MANIFEST_DIR"), env!("CARGO_TARGET_TMPDIR"));
            $crate::host_cxx::test_program(dir, tmp, $name, $header, $kernels).unwrap()
        })
        .as_deref()
    }};
}

/// Runs `exe` with `input` on stdin; its stdout, or why it failed. The input is written from
/// a thread of its own, so a long answer cannot fill the pipe while the input is still going in.
pub fn ask(exe: &Path, input: &str) -> Result<String, String> {
    let mut child = Command::new(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", exe.display()))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let input = input.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().map_err(|e| format!("waiting for {}: {e}", exe.display()))?;
    writer
        .join()
        .map_err(|_| "the input writer panicked".to_string())?
        .map_err(|e| format!("writing to {}: {e}", exe.display()))?;
    let stdout = String::from_utf8(out.stdout).map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{} failed: {stdout}", exe.display()));
    }
    Ok(stdout)
}
