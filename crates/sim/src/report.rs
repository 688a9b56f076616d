//! Summaries of many runs, replay commands, and number formatting.

use crate::net::NetStats;
use crate::run::{Limits, MessageCounts, ProtoParams, RunResult, RunSpec};
use crate::workload::WorkloadKind;
use nicmsg_proto::{Nanos, Stats, UnexpectedPolicy, Usage};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Formats virtual nanoseconds with a unit.
pub fn fmt_ns(ns: Nanos) -> String {
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{:.3}us", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.6}ms", ns as f64 / 1e6)
    } else {
        format!("{:.6}s", ns as f64 / 1e9)
    }
}

pub fn policy_name(policy: UnexpectedPolicy) -> &'static str {
    match policy {
        UnexpectedPolicy::Buffer => "buffer",
        UnexpectedPolicy::Drop => "drop",
    }
}

/// Adds every counter of `other` to `acc`.
pub fn add_stats(acc: &mut Stats, other: &Stats) {
    acc.frames_sent += other.frames_sent;
    acc.bytes_sent += other.bytes_sent;
    acc.data_frames_sent += other.data_frames_sent;
    acc.frames_retransmitted += other.frames_retransmitted;
    acc.frames_received += other.frames_received;
    acc.bytes_received += other.bytes_received;
    let (d, o) = (&mut acc.drops, &other.drops);
    d.malformed += o.malformed;
    d.bad_checksum += o.bad_checksum;
    d.wrong_job += o.wrong_job;
    d.wrong_rank += o.wrong_rank;
    d.duplicate += o.duplicate;
    d.no_posted_receive += o.no_posted_receive;
    d.invalid += o.invalid;
    d.dead_peer += o.dead_peer;
    d.unsupported += o.unsupported;
    acc.credit_stalls += other.credit_stalls;
    acc.credit_waits += other.credit_waits;
    acc.kept_taken_as_eager += other.kept_taken_as_eager;
    acc.grants_deferred += other.grants_deferred;
    acc.control_overflows += other.control_overflows;
    acc.messages_sent += other.messages_sent;
    acc.messages_received += other.messages_received;
    acc.bytes_placed += other.bytes_placed;
    acc.bytes_copied += other.bytes_copied;
    acc.liveness_probes += other.liveness_probes;
    acc.peers_declared_unreachable += other.peers_declared_unreachable;
    acc.acks_piggybacked += other.acks_piggybacked;
    acc.messages_express += other.messages_express;
    acc.sends_completed_early += other.sends_completed_early;
    acc.early_sends_unconfirmed += other.early_sends_unconfirmed;
}

/// The command line that replays exactly this run.
pub fn replay_command(spec: &RunSpec) -> String {
    let mut cmd = format!(
        "cargo run --release -p nicmsg-sim -- --seed {} --workload {} --unexpected {} --loss {} --dup {} --reorder {} --corrupt {}",
        spec.seed,
        spec.workload.name(),
        policy_name(spec.unexpected),
        spec.net.loss,
        spec.net.dup,
        spec.net.reorder,
        spec.net.corrupt
    );
    if spec.busy_engines {
        cmd.push_str(" --busy-engines");
    }
    let net = &spec.net;
    let default_net = crate::net::NetConfig::default();
    let mut flag = |name: &str, value: String| {
        let _ = write!(cmd, " --{name} {value}");
    };
    if spec.mode != crate::node::SimMode::default() {
        flag("mode", spec.mode.name().to_string());
    }
    if let Some(ranks) = spec.ranks {
        flag("ranks", ranks.to_string());
    }
    if spec.scale != 1.0 {
        flag("scale", spec.scale.to_string());
    }
    if net.partition != 0.0 {
        flag("partition", net.partition.to_string());
    }
    if net.partition_max_ns != default_net.partition_max_ns {
        flag("partition-max-ns", net.partition_max_ns.to_string());
    }
    if net.reorder_max_ns != default_net.reorder_max_ns {
        flag("reorder-max-ns", net.reorder_max_ns.to_string());
    }
    if net.delay_ns != default_net.delay_ns {
        flag("delay-ns", net.delay_ns.to_string());
    }
    if net.jitter_ns != default_net.jitter_ns {
        flag("jitter-ns", net.jitter_ns.to_string());
    }
    if net.bandwidth_bps != default_net.bandwidth_bps {
        flag("bandwidth-bps", net.bandwidth_bps.to_string());
    }
    if net.mtu != default_net.mtu {
        flag("mtu", net.mtu.to_string());
    }
    let proto = ProtoParams::default();
    if spec.proto.rto_initial_ns != proto.rto_initial_ns {
        flag("rto-initial-ns", spec.proto.rto_initial_ns.to_string());
    }
    if spec.proto.rto_min_ns != proto.rto_min_ns {
        flag("rto-min-ns", spec.proto.rto_min_ns.to_string());
    }
    if spec.proto.rto_max_ns != proto.rto_max_ns {
        flag("rto-max-ns", spec.proto.rto_max_ns.to_string());
    }
    if spec.proto.keepalive_ns != proto.keepalive_ns {
        flag("keepalive-ns", spec.proto.keepalive_ns.to_string());
    }
    if spec.proto.peer_timeout_ns != proto.peer_timeout_ns {
        flag("peer-timeout-ns", spec.proto.peer_timeout_ns.to_string());
    }
    if spec.proto.max_retries != proto.max_retries {
        flag("max-retries", spec.proto.max_retries.to_string());
    }
    let limits = Limits::default();
    if spec.limits.max_virtual_ns != limits.max_virtual_ns {
        flag("max-virtual-ns", spec.limits.max_virtual_ns.to_string());
    }
    if spec.limits.max_events != limits.max_events {
        flag("max-events", spec.limits.max_events.to_string());
    }
    if spec.limits.quiesce_ns != limits.quiesce_ns {
        flag("quiesce-ns", spec.limits.quiesce_ns.to_string());
    }
    cmd
}

/// Totals of one workload.
#[derive(Debug, Clone, Default)]
pub struct WorkloadTotals {
    pub runs: u64,
    pub violating_runs: u64,
    pub delivered: u64,
    pub frames_sent: u64,
    pub retransmitted: u64,
    pub virtual_ns: u128,
    pub max_virtual_ns: Nanos,
}

/// A run that broke an invariant.
#[derive(Debug, Clone)]
pub struct FailedRun {
    pub index: usize,
    pub result: RunResult,
}

/// Totals over many runs.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub runs: u64,
    pub violating_runs: u64,
    pub violations: u64,
    /// Failing runs grouped by class (workload, policy, kinds of violation), with the number
    /// of runs in each class and its first few runs by run index.
    pub classes: BTreeMap<String, (u64, Vec<FailedRun>)>,
    /// Failing runs listed in the report (at most this many, at most 3 per class).
    pub keep_failures: usize,
    pub messages: MessageCounts,
    pub stats: Stats,
    pub engine: crate::node::EngineTotals,
    pub net: NetStats,
    pub events: u64,
    pub virtual_ns: u128,
    pub max_virtual_ns: Nanos,
    pub not_quiesced: u64,
    pub released_reads: u64,
    pub peak: Usage,
    pub per_workload: BTreeMap<WorkloadKind, WorkloadTotals>,
}

impl Summary {
    pub fn new(keep_failures: usize) -> Self {
        Self {
            keep_failures,
            ..Self::default()
        }
    }

    pub fn add(&mut self, index: usize, result: &RunResult) {
        self.runs += 1;
        self.violations += result.violation_count as u64;
        if result.violation_count > 0 {
            self.violating_runs += 1;
            let mut kinds: Vec<&str> = result.violations.iter().map(|v| v.kind).collect();
            kinds.sort_unstable();
            kinds.dedup();
            let class = format!(
                "{} {} {}",
                result.workload.name(),
                policy_name(result.unexpected),
                kinds.join("+")
            );
            let (count, runs) = self.classes.entry(class).or_default();
            *count += 1;
            runs.push(FailedRun {
                index,
                result: result.clone(),
            });
            runs.sort_by_key(|f| f.index);
            runs.truncate(3);
        }
        self.messages.add(&result.messages);
        add_stats(&mut self.stats, &result.stats);
        self.engine.add(&result.engine);
        self.net.add(&result.net);
        self.events += result.events;
        self.virtual_ns += result.virtual_ns as u128;
        self.max_virtual_ns = self.max_virtual_ns.max(result.virtual_ns);
        if !result.quiesced {
            self.not_quiesced += 1;
        }
        self.released_reads += result.released_reads;
        for (a, u) in [
            (&mut self.peak.sends, &result.peak.sends),
            (&mut self.peak.recvs, &result.peak.recvs),
            (&mut self.peak.incoming, &result.peak.incoming),
            (&mut self.peak.eager_buffers, &result.peak.eager_buffers),
            (&mut self.peak.control_queue, &result.peak.control_queue),
            (&mut self.peak.completions, &result.peak.completions),
        ] {
            a.peak = a.peak.max(u.peak);
            a.limit = a.limit.max(u.limit);
        }
        let w = self.per_workload.entry(result.workload).or_default();
        w.runs += 1;
        if result.violation_count > 0 {
            w.violating_runs += 1;
        }
        w.delivered += result.messages.delivered + result.messages.truncated;
        w.frames_sent += result.stats.frames_sent;
        w.retransmitted += result.stats.frames_retransmitted;
        w.virtual_ns += result.virtual_ns as u128;
        w.max_virtual_ns = w.max_virtual_ns.max(result.virtual_ns);
    }

    /// The final report.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let per = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
        let _ = writeln!(
            out,
            "runs: {}   violations: {} (in {} runs)",
            self.runs, self.violations, self.violating_runs
        );
        let _ = writeln!(
            out,
            "  {:<12} {:>7} {:>6} {:>10} {:>11} {:>12} {:>14} {:>14}",
            "workload",
            "runs",
            "viol",
            "messages",
            "frames/msg",
            "retrans/msg",
            "mean vtime",
            "max vtime"
        );
        for (kind, w) in &self.per_workload {
            let _ = writeln!(
                out,
                "  {:<12} {:>7} {:>6} {:>10} {:>11.2} {:>12.3} {:>14} {:>14}",
                kind.name(),
                w.runs,
                w.violating_runs,
                w.delivered,
                per(w.frames_sent, w.delivered),
                per(w.retransmitted, w.delivered),
                fmt_ns((w.virtual_ns / w.runs.max(1) as u128) as Nanos),
                fmt_ns(w.max_virtual_ns)
            );
        }
        let s = &self.stats;
        let m = &self.messages;
        let consumed = m.delivered + m.truncated;
        let _ = writeln!(
            out,
            "messages: {} sent, {} delivered, {} truncated, {} cancelled, {} not delivered (peer died); {} operations",
            m.sent, m.delivered, m.truncated, m.cancelled, m.failed, m.ops
        );
        let _ = writeln!(
            out,
            "frames: {} sent ({:.2} per message), {} data, {} retransmitted ({:.3} per message), {} bytes; {} received",
            s.frames_sent,
            per(s.frames_sent, consumed),
            s.data_frames_sent,
            s.frames_retransmitted,
            per(s.frames_retransmitted, consumed),
            s.bytes_sent,
            s.frames_received
        );
        let n = &self.net;
        let _ = writeln!(
            out,
            "network: {} offered, {} delivered, {} lost, {} duplicated, {} corrupted ({} reached an endpoint, {} dropped by the link's payload check), {} reordered, {} cut by partitions, {} to dead ranks ({} refused), {} over MTU; longest link wait {}",
            n.frames_offered,
            n.delivered,
            n.lost,
            n.duplicated,
            n.corrupted,
            n.corrupted_delivered,
            n.link_check_drops,
            n.reordered,
            n.partition_drops,
            n.dead_drops,
            n.refusals,
            n.mtu_drops,
            fmt_ns(n.max_link_wait_ns)
        );
        let d = &s.drops;
        let _ = writeln!(
            out,
            "endpoint drops: {} total: malformed {}, bad_checksum {}, wrong_job {}, wrong_rank {}, duplicate {}, no_posted_receive {}, invalid {}, dead_peer {}, unsupported {}",
            d.total(),
            d.malformed,
            d.bad_checksum,
            d.wrong_job,
            d.wrong_rank,
            d.duplicate,
            d.no_posted_receive,
            d.invalid,
            d.dead_peer,
            d.unsupported
        );
        let _ = writeln!(
            out,
            "endpoints: {} credit waits, {} credit stalls, {} kept messages taken as eager, {} first grants deferred, {} control overflows, {} liveness probes, {} peers declared unreachable, {} acknowledgements piggybacked, {} messages delivered by the express path, {} sends completed early ({} unconfirmed), {} bytes placed, {} bytes copied, {} lookups of released memory",
            s.credit_waits,
            s.credit_stalls,
            s.kept_taken_as_eager,
            s.grants_deferred,
            s.control_overflows,
            s.liveness_probes,
            s.peers_declared_unreachable,
            s.acks_piggybacked,
            s.messages_express,
            s.sends_completed_early,
            s.early_sends_unconfirmed,
            s.bytes_placed,
            s.bytes_copied,
            self.released_reads
        );
        let e = &self.engine;
        if e.turns > 0 {
            let _ = writeln!(
                out,
                "engines: {} turns, {} commands, {} frames placed of {} predicted ({} refused, {} first frames predicted, {} frames behind them), {} partial sends, {} orphan frames dropped, {} frames of a wrong source",
                e.turns,
                e.commands,
                e.frames_placed,
                e.frames_predicted,
                e.placements_refused,
                e.first_frames_predicted,
                e.frames_behind_first,
                e.partial_sends,
                e.orphan_frames,
                e.spoofed_frames
            );
        }
        let p = &self.peak;
        let _ = writeln!(
            out,
            "peak table use: sends {}/{}, recvs {}/{}, incoming {}/{}, eager buffers {}/{}, control queue {}/{}, completions {}",
            p.sends.peak,
            p.sends.limit,
            p.recvs.peak,
            p.recvs.limit,
            p.incoming.peak,
            p.incoming.limit,
            p.eager_buffers.peak,
            p.eager_buffers.limit,
            p.control_queue.peak,
            p.control_queue.limit,
            p.completions.peak
        );
        let _ = writeln!(
            out,
            "virtual time: {} total, {} mean per run, {} max; {} events; {} run(s) ended with timers still armed",
            fmt_ns(self.virtual_ns.min(u64::MAX as u128) as Nanos),
            fmt_ns((self.virtual_ns / self.runs.max(1) as u128) as Nanos),
            fmt_ns(self.max_virtual_ns),
            self.events,
            self.not_quiesced
        );
        if !self.classes.is_empty() {
            let _ = writeln!(
                out,
                "failing runs by class (workload, policy, violation kinds):"
            );
            for (class, (count, _)) in &self.classes {
                let _ = writeln!(out, "  {count:>7}  {class}");
            }
            let listed = self.failures();
            let _ = writeln!(
                out,
                "failing runs (the first of each class, {} shown):",
                listed.len()
            );
            for failure in listed {
                out.push_str(&render_failure(&failure.result));
            }
        }
        out
    }

    /// The failing runs the report lists: the first of every class, then the second of every
    /// class, and so on (three at most per class, `keep_failures` in all), in run order.
    pub fn failures(&self) -> Vec<&FailedRun> {
        let mut listed: Vec<&FailedRun> = Vec::new();
        for round in 0..3 {
            for (_, runs) in self.classes.values() {
                if let Some(run) = runs.get(round) {
                    if listed.len() < self.keep_failures {
                        listed.push(run);
                    }
                }
            }
        }
        listed.sort_by_key(|f| f.index);
        listed
    }
}

/// A failing run: its parameters, its violations, and the command that replays it.
pub fn render_failure(r: &RunResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  seed {} workload {} ranks {} loss {} unexpected {}: {} violation(s)",
        r.seed,
        r.workload.name(),
        r.ranks,
        r.loss,
        policy_name(r.unexpected),
        r.violation_count
    );
    for v in r.violations.iter().take(8) {
        let _ = writeln!(out, "    {v}");
    }
    if r.violations.len() > 8 {
        let _ = writeln!(out, "    ... {} more", r.violation_count - 8);
    }
    let _ = writeln!(out, "    replay: {}", r.replay);
    out
}
