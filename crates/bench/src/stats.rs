//! Summaries of repeated measurements: the papers' statistics (BIP's median, EMP's mean) plus
//! min, max and 99th percentile.

use crate::model::{Summary, MAX_SAMPLES_KEPT};

/// Median, min, max, 99th percentile and mean of `samples` (all zero when empty).
pub fn summarize(samples: &[f64]) -> Summary {
    if samples.is_empty() {
        return Summary::default();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |quantile: f64| sorted[((sorted.len() - 1) as f64 * quantile).round() as usize];
    Summary {
        median: at(0.5),
        min: sorted[0],
        max: sorted[sorted.len() - 1],
        p99: at(0.99),
        mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
    }
}

/// At most [`MAX_SAMPLES_KEPT`] evenly spaced samples, in measurement order, for the JSON.
pub fn thin(samples: &[f64]) -> Vec<f64> {
    if samples.len() <= MAX_SAMPLES_KEPT {
        return samples.to_vec();
    }
    let step = samples.len() as f64 / MAX_SAMPLES_KEPT as f64;
    (0..MAX_SAMPLES_KEPT)
        .map(|i| samples[(i as f64 * step) as usize])
        .collect()
}

/// MB/s (10^6 bytes per second) for `bytes` moved in `micros` microseconds.
pub fn mbytes_per_sec(bytes: f64, micros: f64) -> f64 {
    if micros <= 0.0 {
        0.0
    } else {
        bytes / micros
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_samples() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = summarize(&samples);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 100.0);
        assert_eq!(s.median, 51.0);
        assert_eq!(s.p99, 99.0);
        assert!((s.mean - 50.5).abs() < 1e-9);
    }

    #[test]
    fn empty_and_single() {
        assert_eq!(summarize(&[]), Summary::default());
        let s = summarize(&[3.0]);
        assert_eq!((s.median, s.min, s.max, s.p99), (3.0, 3.0, 3.0, 3.0));
    }

    #[test]
    fn thinning_keeps_order_and_bound() {
        let samples: Vec<f64> = (0..25_000).map(f64::from).collect();
        let kept = thin(&samples);
        assert_eq!(kept.len(), MAX_SAMPLES_KEPT);
        assert!(kept.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(thin(&[1.0, 2.0]), vec![1.0, 2.0]);
    }

    #[test]
    fn bandwidth_units() {
        assert_eq!(mbytes_per_sec(1_000_000.0, 1_000_000.0), 1.0);
        assert_eq!(mbytes_per_sec(5.0, 0.0), 0.0);
    }
}
