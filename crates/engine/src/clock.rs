//! The engine's clock: nanoseconds on the monotonic clock since an origin the engine picks.
//! Read with one `clock_gettime` (a vDSO call, no system call); `std::time::Instant` does the
//! same read, then carries seconds and nanoseconds apart and normalises them on every
//! subtraction, which an engine spinning on the clock pays on every turn.

use nicmsg_proto::Nanos;

/// A fixed origin; [`EngineClock::now`] is the time since it.
#[derive(Debug, Clone, Copy)]
pub struct EngineClock {
    origin_ns: Nanos,
}

impl EngineClock {
    pub fn start() -> Self {
        Self {
            origin_ns: monotonic_ns(),
        }
    }

    /// Nanoseconds since `start`.
    pub fn now(&self) -> Nanos {
        self.since_start(monotonic_ns())
    }

    /// The time since `start` of a [`monotonic_ns`] reading.
    pub fn since_start(&self, monotonic_ns: Nanos) -> Nanos {
        monotonic_ns.saturating_sub(self.origin_ns)
    }
}

/// The monotonic clock in nanoseconds.
pub fn monotonic_ns() -> Nanos {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the struct passed; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut time) };
    time.tv_sec as Nanos * 1_000_000_000 + time.tv_nsec as Nanos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_forward_from_zero() {
        let clock = EngineClock::start();
        let first = clock.now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = clock.now();
        assert!(first < 1_000_000_000, "starts near zero: {first}");
        assert!(second >= first + 2_000_000, "{first} -> {second}");
    }
}
