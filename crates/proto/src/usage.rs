//! Occupancy of the endpoint's fixed tables, for invariants and diagnostics.

/// Entries in use in each fixed-size table, now and at their peak, beside the table's limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableUsage {
    pub in_use: usize,
    pub peak: usize,
    pub limit: usize,
}

impl TableUsage {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            in_use: 0,
            peak: 0,
            limit,
        }
    }

    pub(crate) fn set(&mut self, in_use: usize) {
        self.in_use = in_use;
        self.peak = self.peak.max(in_use);
    }

    pub fn within_limit(&self) -> bool {
        self.in_use <= self.limit && self.peak <= self.limit
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub sends: TableUsage,
    pub recvs: TableUsage,
    pub incoming: TableUsage,
    pub eager_buffers: TableUsage,
    pub control_queue: TableUsage,
    /// Completions produced but not yet taken with `poll_completion`.
    pub completions: TableUsage,
}

impl Usage {
    pub fn within_limits(&self) -> bool {
        [
            self.sends,
            self.recvs,
            self.incoming,
            self.eager_buffers,
            self.control_queue,
            self.completions,
        ]
        .iter()
        .all(TableUsage::within_limit)
    }

    /// True when nothing is held: no operation, no message state, no buffered data, nothing
    /// queued to transmit.
    pub fn is_empty(&self) -> bool {
        self.owes_peers_nothing() && self.recvs.in_use == 0
    }

    /// True when nothing held concerns a peer: no send, no message arriving or awaiting its
    /// CLEANUP, no buffered message, no control frame to go. Posted receives and probes may
    /// remain (a stopping rank's, or the engine's standing ones): they wait for peers and owe
    /// them nothing.
    pub fn owes_peers_nothing(&self) -> bool {
        self.sends.in_use == 0
            && self.incoming.in_use == 0
            && self.eager_buffers.in_use == 0
            && self.control_queue.in_use == 0
    }
}
