//! The C test program, `tests/c/test_cairn.c`, compiled against the committed header and the
//! crate's static library (the one cargo built for this test run), then run on an empty
//! directory: it calls every function of `include/cairn.h` and checks its errors.
//!
//! The C compiler is `$CC`, else `cc`, else `gcc`; with none found the test prints
//! `SKIPPED: no C compiler` and passes (`.ci/run` says so too, never silently).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The first C compiler that answers `--version`.
fn c_compiler() -> Option<String> {
    let candidates = std::env::var("CC")
        .ok()
        .into_iter()
        .chain(["cc".to_string(), "gcc".to_string()]);
    for cc in candidates {
        let answers = Command::new(&cc)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if answers {
            return Some(cc);
        }
    }
    None
}

/// The static library cargo built beside this test binary: `<profile>/libcairn_capi.a`, the
/// parent of the `deps/` directory the test runs from (whatever the target directory or
/// target triple).
fn static_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    for dir in exe.ancestors().skip(1) {
        let candidate = dir.join("libcairn_capi.a");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "libcairn_capi.a not found beside {} (the crate's staticlib is built with its tests)",
        exe.display()
    );
}

#[test]
fn c_program_exercises_every_function() {
    let Some(cc) = c_compiler() else {
        println!("SKIPPED: no C compiler ($CC, cc or gcc)");
        return;
    };
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().expect("a temporary directory");
    let program = work.path().join("test_cairn");
    let library = static_library();
    let compile = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("tests/c/test_cairn.c"))
        .arg(&library)
        // The system libraries Rust's standard library needs on Linux
        // (`rustc --print native-static-libs`).
        .args([
            "-lpthread",
            "-ldl",
            "-lm",
            "-lrt",
            "-lutil",
            "-lgcc_s",
            "-o",
        ])
        .arg(&program)
        .output()
        .expect("the C compiler runs");
    assert!(
        compile.status.success(),
        "{cc} failed to build tests/c/test_cairn.c with {}:\n{}",
        library.display(),
        String::from_utf8_lossy(&compile.stderr)
    );
    let session_dir = work.path().join("session");
    let run = Command::new(&program)
        .arg(&session_dir)
        .output()
        .expect("the C test program runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    println!("{stdout}");
    assert!(
        run.status.success(),
        "the C test program failed ({}):\n{stdout}\n{stderr}",
        run.status
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
}
