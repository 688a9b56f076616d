//! Adaptive retransmission timeout (Jacobson/Karels smoothing, Karn's rule applied by callers:
//! only collections acknowledged without retransmission give samples).

use crate::Nanos;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RtoEstimator {
    srtt_ns: Nanos,
    rttvar_ns: Nanos,
    rto_ns: Nanos,
}

impl RtoEstimator {
    pub fn new(initial_ns: Nanos) -> Self {
        Self {
            srtt_ns: 0,
            rttvar_ns: 0,
            rto_ns: initial_ns,
        }
    }

    pub fn sample(&mut self, rtt_ns: Nanos, min_ns: Nanos, max_ns: Nanos) {
        if self.srtt_ns == 0 {
            self.srtt_ns = rtt_ns;
            self.rttvar_ns = rtt_ns / 2;
        } else {
            let error = self.srtt_ns.abs_diff(rtt_ns);
            self.rttvar_ns = (3 * self.rttvar_ns + error) / 4;
            self.srtt_ns = (7 * self.srtt_ns + rtt_ns) / 8;
        }
        self.rto_ns = (self.srtt_ns + 4 * self.rttvar_ns).clamp(min_ns, max_ns);
    }

    pub fn rto_ns(&self) -> Nanos {
        self.rto_ns
    }

    /// Timeout after `retries` unanswered retransmissions: doubled each time, capped.
    pub fn backed_off_ns(&self, retries: u32, max_ns: Nanos) -> Nanos {
        self.rto_ns
            .saturating_mul(1u64 << retries.min(20))
            .min(max_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_and_backs_off() {
        let mut rto = RtoEstimator::new(1_000_000);
        for _ in 0..50 {
            rto.sample(20_000, 10_000, 1_000_000_000);
        }
        assert!(rto.rto_ns() < 40_000, "{}", rto.rto_ns());
        assert_eq!(rto.backed_off_ns(3, 1_000_000_000), rto.rto_ns() * 8);
        assert_eq!(rto.backed_off_ns(40, 100_000), 100_000);
    }
}
