//! The C test program, `tests/c/test_cairn.c`, compiled against the committed header and the
//! crate's static library (the one cargo built for this test run), then run on an empty
//! directory: it calls every function of `include/cairn.h` and checks its errors. The README's
//! example, `tests/c/example.c`, is built and run the same way.
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

/// Compiles `tests/c/<source>` into `<dir>/<program>` with `cc`, against the committed header
/// and the static library.
fn build(cc: &str, source: &str, dir: &Path) -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let program = dir.join(source.trim_end_matches(".c"));
    let library = static_library();
    let compile = Command::new(cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("tests/c").join(source))
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
        "{cc} failed to build tests/c/{source} with {}:\n{}",
        library.display(),
        String::from_utf8_lossy(&compile.stderr)
    );
    program
}

/// Runs `program` with `args` in `dir`; returns its output, asserting it succeeded.
fn run(program: &Path, args: &[&Path], dir: &Path) -> String {
    let run = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the C program runs");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    println!("{stdout}");
    assert!(
        run.status.success(),
        "{} failed ({}):\n{stdout}\n{}",
        program.display(),
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    stdout
}

#[test]
fn c_program_exercises_every_function() {
    let Some(cc) = c_compiler() else {
        println!("SKIPPED: no C compiler ($CC, cc or gcc)");
        return;
    };
    let work = tempfile::tempdir().expect("a temporary directory");
    let program = build(&cc, "test_cairn.c", work.path());
    let stdout = run(&program, &[&work.path().join("session")], work.path());
    assert!(stdout.contains("all checks passed"), "{stdout}");
}

/// The README's C example, `tests/c/example.c` (the README holds it verbatim), builds and runs.
#[test]
fn readme_example_runs() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(crate_dir.join("tests/c/example.c")).unwrap();
    let readme = std::fs::read_to_string(crate_dir.join("README.md")).unwrap();
    assert!(
        readme.contains(&example),
        "README.md does not hold tests/c/example.c verbatim"
    );
    let Some(cc) = c_compiler() else {
        println!("SKIPPED: no C compiler ($CC, cc or gcc)");
        return;
    };
    let work = tempfile::tempdir().expect("a temporary directory");
    let program = build(&cc, "example.c", work.path());
    let stdout = run(&program, &[], work.path());
    assert_eq!(stdout, "bob has 20\n");
}
