//! Many runs: the cross product of seeds, loss rates and unexpected-message policies, spread over
//! worker threads. Each run is single-threaded and deterministic; results are summarised in run
//! order whatever the thread interleaving, so a sweep's report does not depend on `--jobs`.

use crate::report::{render_failure, Summary};
use crate::rng::{stream, SimRng};
use crate::run::{run, RunResult, RunSpec};
use crate::workload::WorkloadKind;
use nicmsg_proto::UnexpectedPolicy;
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Once};
use std::time::{Duration, Instant};

/// Which runs a sweep makes.
#[derive(Debug, Clone)]
pub struct SweepPlan {
    pub seeds: Vec<u64>,
    /// With several workloads, seed `s` runs `workloads[s % len]`.
    pub workloads: Vec<WorkloadKind>,
    pub losses: Vec<f64>,
    pub policies: Vec<UnexpectedPolicy>,
    /// Every other parameter.
    pub template: RunSpec,
}

impl SweepPlan {
    pub fn len(&self) -> usize {
        self.seeds.len() * self.losses.len() * self.policies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The spec of run `index`: seeds outermost, then loss rates, then policies.
    pub fn spec(&self, index: usize) -> RunSpec {
        let per_seed = self.losses.len() * self.policies.len();
        let seed = self.seeds[index / per_seed];
        let rest = index % per_seed;
        let mut spec = self.template.clone();
        spec.seed = seed;
        spec.workload = self.workloads[(seed % self.workloads.len() as u64) as usize];
        spec.net.loss = self.losses[rest / self.policies.len()];
        spec.net.link_checks_payload = SimRng::new(seed, stream::LINK_CHECKS).chance(0.5);
        spec.unexpected = self.policies[rest % self.policies.len()];
        spec
    }
}

thread_local! {
    static IN_RUN: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Installs (once) a panic hook that, inside [`run_catching`], records the panic message instead
/// of printing it; elsewhere the previous hook runs as usual.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_RUN.with(Cell::get) {
                let payload = info.payload();
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".into());
                let location = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{message}{location}")));
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs one simulation; a panic (in the endpoint or the simulator) becomes a `panic` violation.
pub fn run_catching(spec: &RunSpec) -> RunResult {
    install_hook();
    IN_RUN.with(|f| f.set(true));
    let outcome = catch_unwind(AssertUnwindSafe(|| run(spec)));
    IN_RUN.with(|f| f.set(false));
    match outcome {
        Ok(result) => result,
        Err(_) => {
            let message = LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| "panic".into());
            RunResult::failed(spec, "panic", message)
        }
    }
}

/// How a sweep reports while it runs.
#[derive(Debug, Clone, Copy)]
pub struct SweepOptions {
    pub jobs: usize,
    /// Progress line on stderr every `progress_every`, and each failure as it happens.
    pub progress: bool,
    pub progress_every: Duration,
    /// Stop starting runs after the first failing one.
    pub fail_fast: bool,
    /// Failing runs kept in the summary.
    pub keep_failures: usize,
}

impl Default for SweepOptions {
    fn default() -> Self {
        Self {
            jobs: 1,
            progress: false,
            progress_every: Duration::from_secs(5),
            fail_fast: false,
            keep_failures: 20,
        }
    }
}

/// Runs every run of `plan` and summarises them.
pub fn sweep(plan: &SweepPlan, options: &SweepOptions) -> Summary {
    let total = plan.len();
    let mut summary = Summary::new(options.keep_failures);
    if total == 0 {
        return summary;
    }
    let jobs = options.jobs.clamp(1, total);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let mut last_progress = started;
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel::<(usize, RunResult)>();
        for _ in 0..jobs {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            scope.spawn(move || loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= total {
                    break;
                }
                let result = run_catching(&plan.spec(index));
                if tx.send((index, result)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok((index, result)) => {
                    if result.violation_count > 0 {
                        if options.progress {
                            eprint!("VIOLATION in run {index}:\n{}", render_failure(&result));
                        }
                        if options.fail_fast {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    summary.add(index, &result);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if options.progress && last_progress.elapsed() >= options.progress_every {
                last_progress = Instant::now();
                let elapsed = started.elapsed().as_secs_f64();
                let rate = summary.runs as f64 / elapsed.max(1e-9);
                let eta = (total as u64 - summary.runs) as f64 / rate.max(1e-9);
                eprintln!(
                    "[{elapsed:>7.1}s] {}/{} runs, {} violating, {} messages, {rate:.1} runs/s, about {eta:.0}s left",
                    summary.runs, total, summary.violating_runs, summary.messages.delivered
                );
            }
        }
    });
    summary
}
