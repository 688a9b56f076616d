//! What the JSON records about the machine a benchmark ran on.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::model::Environment;

/// The source tree's `git describe --always --dirty`, taken when the binary was built.
const COMMIT: &str = env!("NICMSG_BUILD_COMMIT");

/// Kernel, CPU, cores, commit and start time; the link fields are the caller's.
pub fn probe(command: String) -> Environment {
    Environment {
        kernel: kernel(),
        cpu: cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        commit: COMMIT.to_owned(),
        started_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        command,
        ..Environment::default()
    }
}

fn kernel() -> String {
    Command::new("uname")
        .arg("-sr")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map_or_else(|| "unknown".to_owned(), |s| s.trim().to_owned())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}
