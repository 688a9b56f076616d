//! Violations: every broken invariant becomes one, with the virtual time it was seen at.
//!
//! Checks happen at three points: when an endpoint emits a frame (size, validity), when an
//! operation completes (see [`crate::ledger`]), and when the run ends ([`crate::ledger::Ledger::final_checks`]
//! and [`crate::run`]: leftover state, table limits, unreachable live peers, corrupted frames
//! accepted, memory touched after completion).

use nicmsg_proto::Nanos;
use std::fmt;

/// Most violations kept per run (all are counted).
pub const KEPT_PER_RUN: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub at: Nanos,
    /// Short stable name of the invariant, e.g. `content`, `hang`, `leftover-state`.
    pub kind: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[t={}] {}: {}",
            crate::report::fmt_ns(self.at),
            self.kind,
            self.detail
        )
    }
}

/// The violations of one run.
#[derive(Debug, Default, Clone)]
pub struct Violations {
    pub kept: Vec<Violation>,
    pub total: usize,
}

impl Violations {
    pub fn push(&mut self, at: Nanos, kind: &'static str, detail: impl Into<String>) {
        self.total += 1;
        if self.kept.len() < KEPT_PER_RUN {
            self.kept.push(Violation {
                at,
                kind,
                detail: detail.into(),
            });
        }
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}
