//! LM's "looper" (section 4): CPU use measured by what is left over. One thread per CPU this
//! process may run on, pinned there at the lowest scheduling class (`SCHED_IDLE`), counts as
//! fast as it can; it runs only when nothing else wants its CPU. Its count rate while the
//! machine is quiet, against its rate during a measurement, says how much of each CPU the
//! measurement took: every process and the kernel's work on their behalf (interrupts,
//! softirqs, copies into sockets) included, which per-process CPU times miss.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Iterations a looper thread counts locally before it publishes them: the shared counter is
/// written rarely enough not to slow the loop, often enough for millisecond readings.
const PUBLISH_EVERY: u64 = 4096;

/// One CPU's counter, alone on its cache line so that the loopers do not share lines.
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64);

/// Looper threads, one per CPU, counting until dropped.
pub struct Looper {
    counters: Arc<Vec<Counter>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// The loopers' counts at one instant.
#[derive(Debug, Clone)]
pub struct Reading {
    at: Instant,
    counts: Vec<u64>,
}

/// Each CPU's count rate while the machine was quiet, per second.
#[derive(Debug, Clone)]
pub struct IdleRates(Vec<f64>);

impl Looper {
    /// Starts a looper on every CPU this process may use (as it could before a thread was
    /// pinned: see [`crate::affinity::process_cpus`]).
    pub fn start() -> Looper {
        let cpus = crate::affinity::process_cpus().to_vec();
        let counters: Arc<Vec<Counter>> =
            Arc::new((0..cpus.len()).map(|_| Counter::default()).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = cpus
            .into_iter()
            .enumerate()
            .map(|(index, cpu)| {
                let (counters, stop) = (Arc::clone(&counters), Arc::clone(&stop));
                std::thread::spawn(move || count_on(cpu, &counters[index], &stop))
            })
            .collect();
        Looper {
            counters,
            stop,
            threads,
        }
    }

    /// CPUs looped on.
    pub fn cpus(&self) -> usize {
        self.counters.len()
    }

    pub fn read(&self) -> Reading {
        Reading {
            at: Instant::now(),
            counts: self
                .counters
                .iter()
                .map(|c| c.0.load(Ordering::Relaxed))
                .collect(),
        }
    }

    /// The count rates with this thread asleep for `quiet` (the caller makes sure the rest
    /// of its job is quiet too).
    pub fn calibrate(&self, quiet: Duration) -> IdleRates {
        let before = self.read();
        std::thread::sleep(quiet);
        let after = self.read();
        IdleRates(rates(&before, &after))
    }
}

impl Drop for Looper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Reading {
    /// Seconds from `earlier` to this reading.
    pub fn seconds_since(&self, earlier: &Reading) -> f64 {
        self.at.duration_since(earlier.at).as_secs_f64()
    }
}

impl IdleRates {
    /// CPUs' worth of time taken from the loopers between `before` and `after` (0 to the
    /// number of CPUs): each CPU's share is one minus its rate then over its idle rate.
    pub fn busy_cpus(&self, before: &Reading, after: &Reading) -> f64 {
        rates(before, after)
            .iter()
            .zip(&self.0)
            .map(|(&now, &idle)| {
                if idle > 0.0 {
                    (1.0 - now / idle).clamp(0.0, 1.0)
                } else {
                    0.0
                }
            })
            .sum()
    }

    /// Count rate of all CPUs together, per second.
    pub fn total(&self) -> f64 {
        self.0.iter().sum()
    }
}

/// Counts per second of each CPU between two readings.
fn rates(before: &Reading, after: &Reading) -> Vec<f64> {
    let seconds = after.at.duration_since(before.at).as_secs_f64().max(1e-9);
    after
        .counts
        .iter()
        .zip(&before.counts)
        .map(|(a, b)| a.saturating_sub(*b) as f64 / seconds)
        .collect()
}

/// The loop of one looper thread: pinned to `cpu`, lowest class, counting until `stop`.
fn count_on(cpu: usize, counter: &Counter, stop: &AtomicBool) {
    crate::affinity::pin_current_thread(cpu);
    lowest_priority();
    let mut local: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..PUBLISH_EVERY {
            local = std::hint::black_box(local + 1);
        }
        counter.0.store(local, Ordering::Relaxed);
    }
}

/// `SCHED_IDLE` for the calling thread: it runs only when its CPU has nothing else to run.
/// Where that is refused, nice 19 comes closest.
fn lowest_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    let refused = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0;
    if refused {
        // SAFETY: plain system call on the calling thread.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at: Instant, counts: &[u64]) -> Reading {
        Reading {
            at,
            counts: counts.to_vec(),
        }
    }

    #[test]
    fn busy_cpus_are_what_the_loopers_lost_against_their_idle_rates() {
        let idle = IdleRates(vec![1000.0, 2000.0]);
        let start = Instant::now();
        let later = start + Duration::from_secs(2);
        // CPU 0 counted half its idle rate, CPU 1 all of it.
        let busy = idle.busy_cpus(&reading(start, &[0, 0]), &reading(later, &[1000, 4000]));
        assert!((busy - 0.5).abs() < 1e-9, "{busy}");
        // Faster than idle (the machine was busier while calibrating) counts as idle, never
        // as negative use.
        let busy = idle.busy_cpus(&reading(start, &[0, 0]), &reading(later, &[9000, 0]));
        assert!((busy - 1.0).abs() < 1e-9, "{busy}");
    }

    #[test]
    fn loopers_count_on_every_cpu_and_stop_when_dropped() {
        let looper = Looper::start();
        let idle = looper.calibrate(Duration::from_millis(200));
        assert_eq!(idle.0.len(), looper.cpus());
        assert!(idle.total() > 0.0, "the loopers count");
        drop(looper);
    }
}
