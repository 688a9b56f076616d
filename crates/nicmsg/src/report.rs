//! Counters printed at exit with `NICMSG_STATS=1`: one line per peer, then the totals.
//! Received payload bytes are counted by how they reached the receive buffer: `placed_direct`
//! (the kernel wrote them there: speculative split guessed right), `copied_once` (copied from
//! the engine's receive buffer to their place), `copied_twice` (unexpected messages: into an
//! eager buffer first, then into the receive).

use nicmsg_engine::Snapshot;
use nicmsg_proto::{DropCounts, Stats};
use std::fmt::Write;

/// Prints the counters of the endpoint `who` names ("rank 3"; an open endpoint, whose peers
/// are addresses, by its own address).
pub fn print_stats(who: &str, snapshot: &Snapshot) {
    eprint!("{}", render(who, snapshot));
}

pub fn render(who: &str, snapshot: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "nicmsg stats {who}: {:>6} {:>10} {:>12} {:>10} {:>12} {:>8} {:>9} {:>8} {:>13} {:>12} {:>12}  drops",
        "peer", "frames_tx", "bytes_tx", "frames_rx", "bytes_rx", "retrans", "msgs_tx", "msgs_rx", "placed_direct", "copied_once", "copied_twice"
    );
    for (peer, stats) in snapshot.peers.iter().enumerate() {
        if stats.frames_sent == 0 && stats.frames_received == 0 {
            continue;
        }
        let _ = writeln!(out, "nicmsg stats {who}: {:>6} {}", peer, row(stats));
    }
    let _ = writeln!(
        out,
        "nicmsg stats {who}: {:>6} {}",
        "total",
        row(&snapshot.protocol)
    );
    let engine = &snapshot.engine;
    let _ = writeln!(
        out,
        "nicmsg stats {who}: credit waits {} stalls {}, kept messages taken as eager {}, first grants deferred {}, control frames dropped (queue full) {}, liveness probes {}, peers unreachable {}, acks piggybacked {}, express deliveries {}, sends completed early {} (unconfirmed {}), engine turns {}, commands {}, frames predicted {} placed {} refused {}, datagrams peeked {} (first frames predicted {}, frames behind them {}, refused {}), spoofed frames {}, orphan frames {}, transport errors {}",
        snapshot.protocol.credit_waits,
        snapshot.protocol.credit_stalls,
        snapshot.protocol.kept_taken_as_eager,
        snapshot.protocol.grants_deferred,
        snapshot.protocol.control_overflows,
        snapshot.protocol.liveness_probes,
        snapshot.protocol.peers_declared_unreachable,
        snapshot.protocol.acks_piggybacked,
        snapshot.protocol.messages_express,
        snapshot.protocol.sends_completed_early,
        snapshot.protocol.early_sends_unconfirmed,
        engine.turns,
        engine.commands,
        engine.frames_predicted,
        engine.frames_placed,
        engine.placements_refused,
        engine.datagrams_peeked,
        engine.first_frames_predicted,
        engine.frames_behind_first,
        engine.first_frames_refused,
        engine.spoofed_frames,
        engine.orphan_frames,
        engine.transport_errors
    );
    if !snapshot.transport.is_empty() {
        let _ = writeln!(out, "nicmsg stats {who}: {}", snapshot.transport);
    }
    if let Some((programs, vm)) = &snapshot.programs {
        if programs.messages + programs.requests > 0 {
            let _ = writeln!(
                out,
                "nicmsg stats {who}: programs: {} messages, {} requests, {} malformed, {} remote requests refused, {} refused by programs, {} passed to the host, {} traps, {} sends failed, {} signals refused; VM: {} activations, {} instructions, {} dropped",
                programs.messages,
                programs.requests,
                programs.malformed,
                programs.remote_refused,
                programs.refused,
                programs.passed,
                programs.traps,
                programs.sends_failed,
                programs.signals_refused,
                vm.activations,
                vm.instructions,
                vm.dropped
            );
        }
    }
    out
}

/// Every drop counter with the name it is printed under. `DropCounts` is taken apart without
/// `..`, so a counter added to it does not compile until it is printed here (frames of the
/// reserved kinds, `unsupported`, were counted but never printed).
fn drop_counters(drops: &DropCounts) -> [(&'static str, u64); 10] {
    let DropCounts {
        malformed,
        bad_checksum,
        wrong_job,
        wrong_rank,
        duplicate,
        no_posted_receive,
        invalid,
        dead_peer,
        unsupported,
        peer_table_full,
    } = *drops;
    [
        ("bad_crc", bad_checksum),
        ("wrong_job", wrong_job),
        ("wrong_rank", wrong_rank),
        ("malformed", malformed),
        ("duplicate", duplicate),
        ("no_posted_receive", no_posted_receive),
        ("invalid", invalid),
        ("dead_peer", dead_peer),
        ("unsupported", unsupported),
        ("peer_table_full", peer_table_full),
    ]
}

fn row(stats: &Stats) -> String {
    let drops: Vec<String> = drop_counters(&stats.drops)
        .iter()
        .map(|(name, count)| format!("{name}={count}"))
        .collect();
    format!(
        "{:>10} {:>12} {:>10} {:>12} {:>8} {:>9} {:>8} {:>13} {:>12} {:>12}  {}",
        stats.frames_sent,
        stats.bytes_sent,
        stats.frames_received,
        stats.bytes_received,
        stats.frames_retransmitted,
        stats.messages_sent,
        stats.messages_received,
        stats.bytes_placed_direct,
        stats.bytes_placed,
        stats.bytes_copied,
        drops.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every drop counter non-zero, each a different power of two: each must appear under its
    /// name, and the printed ones must add up to the total, so none is left out or printed
    /// twice.
    #[test]
    fn every_drop_counter_is_printed() {
        let drops = DropCounts {
            malformed: 1,
            bad_checksum: 2,
            wrong_job: 4,
            wrong_rank: 8,
            duplicate: 16,
            no_posted_receive: 32,
            invalid: 64,
            dead_peer: 128,
            unsupported: 256,
            peer_table_full: 512,
        };
        let stats = Stats {
            frames_received: 1,
            drops,
            control_overflows: 5,
            ..Stats::default()
        };
        let snapshot = Snapshot {
            protocol: stats,
            engine: nicmsg_engine::EngineStats {
                orphan_frames: 6,
                ..Default::default()
            },
            peers: vec![Stats::default(), stats],
            transport: String::new(),
            programs: None,
        };
        let text = render("rank 0", &snapshot);
        let printed = drop_counters(&drops);
        assert_eq!(
            printed.iter().map(|(_, count)| count).sum::<u64>(),
            drops.total()
        );
        for (name, count) in printed {
            assert_eq!(
                text.matches(&format!(" {name}={count}")).count(),
                2,
                "{name} on the peer's line and the total's:\n{text}"
            );
        }
        assert!(text.contains(" unsupported=256"), "{text}");
        assert!(
            text.contains("control frames dropped (queue full) 5"),
            "{text}"
        );
        assert!(text.contains("orphan frames 6"), "{text}");
    }
}
