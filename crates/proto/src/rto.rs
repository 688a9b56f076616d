//! Adaptive retransmission timeout (Jacobson/Karels smoothing, Karn's rule applied by callers:
//! only collections acknowledged without retransmission give samples). A timer that fires
//! doubles the timeout until the next valid sample (RFC 6298, 5.5): without that, a peer that
//! answers late but reliably (an inline engine whose application is computing) would have every
//! message retransmitted at the minimum timeout and never give a sample that teaches better.

use crate::Nanos;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RtoEstimator {
    srtt_ns: Nanos,
    rttvar_ns: Nanos,
    rto_ns: Nanos,
    /// When the timeout was last doubled: timers of many operations firing together double it
    /// once.
    backed_off_at_ns: Option<Nanos>,
}

impl RtoEstimator {
    pub fn new(initial_ns: Nanos) -> Self {
        Self {
            srtt_ns: 0,
            rttvar_ns: 0,
            rto_ns: initial_ns,
            backed_off_at_ns: None,
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
        self.backed_off_at_ns = None;
    }

    /// A retransmission timer towards this peer fired at `now`: double the timeout, unless it
    /// was already doubled less than one (doubled) timeout ago.
    pub fn on_timeout(&mut self, now: Nanos, max_ns: Nanos) {
        if self
            .backed_off_at_ns
            .is_some_and(|at| now < at.saturating_add(self.rto_ns))
        {
            return;
        }
        self.rto_ns = self.rto_ns.saturating_mul(2).min(max_ns);
        self.backed_off_at_ns = Some(now);
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

    #[test]
    fn timeouts_double_once_per_timeout_until_a_sample() {
        let mut rto = RtoEstimator::new(200_000);
        rto.on_timeout(1_000_000, 10_000_000);
        assert_eq!(rto.rto_ns(), 400_000);
        // Other operations' timers firing at about the same time do not double it again.
        rto.on_timeout(1_100_000, 10_000_000);
        assert_eq!(rto.rto_ns(), 400_000);
        rto.on_timeout(1_400_000, 10_000_000);
        assert_eq!(rto.rto_ns(), 800_000);
        for at in 0..20 {
            rto.on_timeout(2_000_000 + at * 20_000_000, 10_000_000);
        }
        assert_eq!(rto.rto_ns(), 10_000_000, "capped");
        rto.sample(50_000, 200_000, 10_000_000);
        assert_eq!(
            rto.rto_ns(),
            200_000,
            "a valid sample sets it from the estimate again"
        );
    }
}
