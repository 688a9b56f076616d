//! What the LM tests share (`lm.rs`, a job's stations, and `lm_open.rs`, open stations): the
//! specs of a sweep, and a sweep that must find nothing wrong.

use nicmsg_sim::lm::{sweep_lm, LmRun, LmStats};
use nicmsg_sim::NetConfig;

/// Every seed with every loss rate on `net`: `spec` makes a run from its seed and network.
pub fn specs<S>(
    seeds: std::ops::Range<u64>,
    losses: &[f64],
    net: NetConfig,
    spec: impl Fn(u64, NetConfig) -> S,
) -> Vec<S> {
    let mut specs = Vec::new();
    for seed in seeds {
        for &loss in losses {
            specs.push(spec(
                seed,
                NetConfig {
                    loss,
                    ..net.clone()
                },
            ));
        }
    }
    specs
}

/// Sweeps `specs`; fails, showing the first failing runs, unless none had violations.
pub fn run<S: LmRun>(specs: &[S]) -> LmStats {
    let (failures, stats) = sweep_lm(specs, &mut |_| {});
    let shown: Vec<String> = failures
        .iter()
        .take(5)
        .map(|f| {
            format!(
                "{}\n  {}",
                f.spec.replay_command(),
                f.violations.list().join("\n  ")
            )
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} failing runs:\n{}",
        failures.len(),
        shown.join("\n")
    );
    stats
}
