//! The device baseline: an external script that measures 4 KiB random-read IOPS (normally with
//! fio) in the benchmark directory, so results can be stated as a ratio to what the disk allows.
//!
//! Owns: running the script and parsing its output. The script is run as `PATH DIR 8` and must
//! print one JSON line such as `{"dir":"/x","qd1_iops":9000,"qd32_iops":120000}`; its stderr is
//! passed through.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::failure::{Context, Failure};

/// The argument passed after the directory (the script's size or duration knob).
const SCRIPT_ARG: &str = "8";

/// Random-read IOPS of the benchmark's device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FioBaseline {
    /// At queue depth 1, if the script reported it.
    pub qd1_iops: Option<f64>,
    /// At queue depth 32.
    pub qd32_iops: f64,
}

/// Runs `script DIR 8` and parses the JSON line it prints.
pub fn measure(script: &Path, dir: &Path) -> Result<FioBaseline, Failure> {
    eprintln!(
        "fio baseline: running {} {} {SCRIPT_ARG}",
        script.display(),
        dir.display()
    );
    let output = Command::new(script)
        .arg(dir)
        .arg(SCRIPT_ARG)
        .stderr(Stdio::inherit())
        .output()
        .context(|| format!("running the fio baseline script {}", script.display()))?;
    if !output.status.success() {
        return Err(Failure(format!(
            "the fio baseline script {} failed ({})",
            script.display(),
            output.status
        )));
    }
    parse(&String::from_utf8_lossy(&output.stdout))
        .context(|| format!("reading the output of {}", script.display()))
}

/// Finds the last line of `stdout` that is a JSON object with a numeric `qd32_iops`.
fn parse(stdout: &str) -> Result<FioBaseline, String> {
    for line in stdout.lines().rev() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line.trim()) else {
            continue;
        };
        if let Some(qd32_iops) = value.get("qd32_iops").and_then(|v| v.as_f64()) {
            if qd32_iops <= 0.0 {
                return Err(format!("qd32_iops is {qd32_iops}, not a positive number"));
            }
            let qd1_iops = value.get("qd1_iops").and_then(|v| v.as_f64());
            return Ok(FioBaseline {
                qd1_iops,
                qd32_iops,
            });
        }
    }
    Err(format!(
        "no JSON line with a numeric qd32_iops in {:?}",
        stdout.trim()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_last_json_line() {
        let out = "fio 3.3\n{\"dir\":\"/x\",\"qd1_iops\":9000.5,\"qd32_iops\":120000}\n";
        let baseline = parse(out).unwrap();
        assert_eq!(baseline.qd1_iops, Some(9000.5));
        assert_eq!(baseline.qd32_iops, 120000.0);
        assert!(parse("no json\n").is_err());
        assert!(parse("{\"qd32_iops\":0}").is_err());
    }
}
