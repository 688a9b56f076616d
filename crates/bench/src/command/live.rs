//! The live view: one line per measured point with its ratios to the baselines measured so far,
//! under a progress bar counting the points of the whole run.

use std::collections::HashMap;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};

use crate::model::{Outcome, Pattern, Point, Series};
use crate::sizes::label;

/// The baselines nicmsg's rows are compared with, when measured (the MPI patterns' with the
/// MPI baselines: the keys include the pattern).
const REFERENCES: [&str; 5] = [
    "udp-busy",
    "tcp-busy",
    "tcp-blocking",
    "ompi-ob1-tcp",
    "ompi-ucx-tcp",
];

pub struct Live {
    bar: ProgressBar,
    /// Median time of each (pattern, system, size, compute) measured so far.
    medians: Mutex<HashMap<(Pattern, String, u64, u64), f64>>,
}

impl Live {
    pub fn new(total_points: u64) -> Live {
        let bar = ProgressBar::new(total_points);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} points  {msg}",
            )
            .expect("valid template"),
        );
        Live {
            bar,
            medians: Mutex::new(HashMap::new()),
        }
    }

    /// A series starts.
    pub fn start(&self, pattern: Pattern, name: &str) {
        self.bar.set_message(format!("{pattern:?} {name}"));
    }

    /// Prints a pattern's header.
    pub fn header(&self, pattern: Pattern) {
        self.print(format!(
            "\n== {pattern:?} ==\n{:<24} {:>8} {:>10} {:>10} {:>10} {:>10} {:>11}  ratios",
            "system", "size", "median_us", "min_us", "p99_us", "max_us", "MB/s"
        ));
    }

    /// One measured point.
    pub fn point(&self, pattern: Pattern, system: &str, point: &Point) {
        let key = (
            pattern,
            system.to_owned(),
            point.size,
            point.compute_us.unwrap_or(0.0) as u64,
        );
        let ratios = self.ratios(&key, point.time_us.median);
        self.medians
            .lock()
            .expect("medians lock")
            .insert(key, point.time_us.median);
        let size = match point.compute_us {
            Some(compute) => format!("{}+{compute:.0}us", label(point.size)),
            None => label(point.size),
        };
        let rate = point
            .mbytes_per_sec
            .map_or_else(String::new, |r| format!("{r:.1}"));
        let t = &point.time_us;
        self.print(format!(
            "{system:<24} {size:>8} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {rate:>11}  {ratios}",
            t.median, t.min, t.p99, t.max
        ));
        self.bar.inc(1);
    }

    /// A series that ended: a line for anything but success, and the bar moved past the points
    /// it did not measure.
    pub fn finish_series(&self, series: &Series, planned_points: u64) {
        let missing = planned_points.saturating_sub(series.points.len() as u64);
        self.bar.inc(missing);
        let note = match &series.outcome {
            Outcome::Measured => return,
            Outcome::NotInstalled { install } => format!("not installed ({install})"),
            Outcome::Unsupported { reason } => format!("not measured: {reason}"),
            Outcome::Failed { error } => format!("FAILED: {error}"),
        };
        self.print(format!("{:<24} {note}", series.system));
    }

    pub fn print(&self, line: String) {
        self.bar.suspend(|| println!("{line}"));
    }

    pub fn done(&self) {
        self.bar.finish_and_clear();
    }

    /// `x1.15 udp-busy x0.30 tcp-busy`: this median over each reference's at the same point.
    fn ratios(&self, key: &(Pattern, String, u64, u64), median: f64) -> String {
        if REFERENCES.contains(&key.1.as_str()) {
            return String::new();
        }
        let medians = self.medians.lock().expect("medians lock");
        REFERENCES
            .iter()
            .filter_map(|reference| {
                let theirs = medians.get(&(key.0, (*reference).to_owned(), key.2, key.3))?;
                (*theirs > 0.0).then(|| format!("x{:.2} {reference}", median / theirs))
            })
            .collect::<Vec<_>>()
            .join("  ")
    }
}
