//! Synthetic computation for the overlap pattern: a busy loop of a calibrated number of
//! iterations, standing in for the application work of EMP's and RMPP's overlap loops.

use std::hint::black_box;
use std::time::Instant;

/// How long the calibration runs: long enough to average over timer resolution and frequency
/// ramp-up, short enough not to matter beside a benchmark.
const CALIBRATION_MICROS: f64 = 20_000.0;

/// A busy loop whose cost per unit is known.
#[derive(Debug, Clone, Copy)]
pub struct Work {
    units_per_micro: f64,
}

impl Work {
    /// Measures how many loop units run per microsecond on this (quiet) core.
    pub fn calibrate() -> Work {
        let mut units: u64 = 1024;
        loop {
            let start = Instant::now();
            spin(units);
            let micros = start.elapsed().as_secs_f64() * 1e6;
            if micros >= CALIBRATION_MICROS {
                return Work {
                    units_per_micro: units as f64 / micros,
                };
            }
            units *= 2;
        }
    }

    /// Runs about `micros` microseconds of computation (as measured alone at calibration).
    pub fn run(&self, micros: f64) {
        spin((micros * self.units_per_micro) as u64);
    }
}

/// `units` rounds of integer arithmetic the optimiser cannot remove.
fn spin(units: u64) {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15_u64);
    for _ in 0..units {
        x = black_box(x.rotate_left(5) ^ 0x5851_f42d_4c95_7f2d);
    }
    black_box(x);
}
