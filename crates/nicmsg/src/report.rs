//! Counters printed at exit with `NICMSG_STATS=1`: one line per peer, then the totals.
//! Received payload bytes are counted by how they reached the receive buffer: `placed_direct`
//! (the kernel wrote them there: speculative split guessed right), `copied_once` (copied from
//! the engine's receive buffer to their place), `copied_twice` (unexpected messages: into an
//! eager buffer first, then into the receive).

use crate::pin::PinStats;
use nicmsg_engine::Snapshot;
use nicmsg_proto::Stats;
use std::fmt::Write;

pub fn print_stats(rank: u32, snapshot: &Snapshot, pins: &PinStats) {
    eprint!("{}", render(rank, snapshot, pins));
}

pub fn render(rank: u32, snapshot: &Snapshot, pins: &PinStats) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "nicmsg stats rank {rank}: {:>6} {:>10} {:>12} {:>10} {:>12} {:>8} {:>9} {:>8} {:>13} {:>12} {:>12}  drops",
        "peer", "frames_tx", "bytes_tx", "frames_rx", "bytes_rx", "retrans", "msgs_tx", "msgs_rx", "placed_direct", "copied_once", "copied_twice"
    );
    for (peer, stats) in snapshot.peers.iter().enumerate() {
        if stats.frames_sent == 0 && stats.frames_received == 0 {
            continue;
        }
        let _ = writeln!(out, "nicmsg stats rank {rank}: {:>6} {}", peer, row(stats));
    }
    let _ = writeln!(
        out,
        "nicmsg stats rank {rank}: {:>6} {}",
        "total",
        row(&snapshot.protocol)
    );
    let engine = &snapshot.engine;
    let _ = writeln!(
        out,
        "nicmsg stats rank {rank}: credit stalls {}, liveness probes {}, peers unreachable {}, acks piggybacked {}, express deliveries {}, sends completed early {} (unconfirmed {}), engine turns {}, commands {}, frames predicted {} placed {} refused {}, spoofed frames {}, transport errors {}, pages pinned {} (mlock calls {}, failures {}, cache hits {})",
        snapshot.protocol.credit_stalls,
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
        engine.spoofed_frames,
        engine.transport_errors,
        pins.pinned_pages,
        pins.mlock_calls,
        pins.mlock_failures,
        pins.hits
    );
    if !snapshot.transport.is_empty() {
        let _ = writeln!(out, "nicmsg stats rank {rank}: {}", snapshot.transport);
    }
    out
}

fn row(stats: &Stats) -> String {
    let d = &stats.drops;
    format!(
        "{:>10} {:>12} {:>10} {:>12} {:>8} {:>9} {:>8} {:>13} {:>12} {:>12}  bad_crc={} wrong_job={} wrong_rank={} malformed={} duplicate={} no_posted_receive={} invalid={} dead_peer={}",
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
        d.bad_checksum,
        d.wrong_job,
        d.wrong_rank,
        d.malformed,
        d.duplicate,
        d.no_posted_receive,
        d.invalid,
        d.dead_peer
    )
}
