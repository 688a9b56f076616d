//! What an LM socket did, said when it closes with `NICMSG_STATS` set (as nicmsg's
//! communicators do): above all whether admitted transfers were placed with no copy in user
//! space, the path's goal.

use std::fmt;

use super::LmSocketStats;

/// Whether `NICMSG_STATS` asks for the report (read as every nicmsg switch is).
pub(crate) fn report_asked() -> bool {
    std::env::var("NICMSG_STATS")
        .is_ok_and(|value| nicmsg_engine::switch::parse(&value) == Some(true))
}

impl fmt::Display for LmSocketStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.station;
        let mode = if self.zero_copy { "zero-copy" } else { "copy" };
        writeln!(
            f,
            "  received: {} transfers placed ({} B in place, {} B copied into placed regions), \
             {} by copy ({} B copied)",
            s.placed_transfers,
            s.placed_bytes,
            s.copied_bytes_placed,
            s.one_copy_transfers,
            s.copied_bytes_one_copy
        )?;
        writeln!(
            f,
            "  frames in: {} placed, {} copied, {} duplicates, {} held for their slot, \
             {} damaged landings; AF_XDP {mode} mode, {} kernel drops, {} passed to the kernel",
            s.placed_frames,
            s.copied_frames,
            s.duplicates,
            s.held_for_slot,
            s.damaged_landings,
            self.ring_drops,
            self.passed_to_kernel
        )?;
        writeln!(
            f,
            "  sent: {} transfers ({} failed), {} frames, {} again; {} by the ring, {} controls \
             by the ring, {} by sendto; {} heap send buffers",
            s.transfers_sent,
            s.transfers_failed,
            s.frames_sent,
            s.frames_resent,
            self.ring_frames,
            self.ring_controls,
            self.kernel_frames,
            self.heap_send_buffers
        )?;
        write!(
            f,
            "  control: {} grants sent, {} resends asked; dropped: {} malformed, {} not LM, \
             {} no memory, {} control, {} unknown sources; {} filter desyncs",
            s.grants_sent,
            s.resends_asked,
            s.dropped_malformed,
            s.dropped_not_lm,
            s.dropped_no_memory,
            s.dropped_control,
            self.unknown_sources,
            self.desyncs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_says_what_was_placed_and_what_was_copied() {
        let mut stats = LmSocketStats::default();
        stats.station.placed_transfers = 3;
        stats.station.placed_bytes = 4096;
        stats.station.copied_bytes_one_copy = 17;
        let text = stats.to_string();
        assert!(
            text.contains("3 transfers placed (4096 B in place, 0 B copied"),
            "{text}"
        );
        assert!(text.contains("(17 B copied)"), "{text}");
        assert!(text.contains("copy mode"), "{text}");
    }
}
