//! A sweep over every workload, several loss rates and both unexpected-message policies, with
//! duplication, reordering, corruption and random partitions: no run may break an invariant.
//! The ranks run the whole engine (table, driver, core); a smaller sweep runs the protocol core
//! alone, whose cancel answers the ledger checks exactly; PANIC's workloads (programs in the
//! engines) have a sweep of their own. Sized for well under two minutes on two cores in the
//! test profile.

use nicmsg_proto::UnexpectedPolicy;
use nicmsg_sim::{
    sweep, NetConfig, RunSpec, SimMode, Summary, SweepOptions, SweepPlan, WorkloadKind,
};

fn jobs() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .min(8)
}

/// Runs `plan` on every core, keeping the first failures for the report.
fn sweep_keeping_failures(plan: &SweepPlan) -> Summary {
    sweep(
        plan,
        &SweepOptions {
            jobs: jobs(),
            keep_failures: 30,
            ..SweepOptions::default()
        },
    )
}

fn assert_no_violations(summary: &Summary) {
    assert_eq!(
        summary.violations,
        0,
        "invariant violations:\n{}",
        summary.render()
    );
}

fn faulty_template() -> RunSpec {
    let mut template = RunSpec::new(0, WorkloadKind::PingPong);
    template.net = NetConfig {
        dup: 0.01,
        reorder: 0.05,
        corrupt: 0.01,
        partition: 0.1,
        ..NetConfig::default()
    };
    // Healthy runs end within a few seconds of virtual time even at 20 % loss; anything still
    // pending at 20 s is a hang.
    template.limits.max_virtual_ns = 20_000_000_000;
    template
}

#[test]
fn every_workload_under_loss_has_no_violations() {
    let plan = SweepPlan {
        // Seed s runs workload s mod 13, so each workload gets 24 seeds x 4 loss rates x 2
        // policies.
        seeds: (0..312).collect(),
        workloads: WorkloadKind::MESSAGING.to_vec(),
        losses: vec![0.0, 0.02, 0.1, 0.2],
        policies: vec![UnexpectedPolicy::Buffer, UnexpectedPolicy::Drop],
        template: faulty_template(),
    };
    assert_eq!(plan.template.mode, SimMode::Engine);
    assert_eq!(plan.len(), 2496);
    let summary = sweep_keeping_failures(&plan);
    assert_eq!(summary.runs, 2496);
    for kind in WorkloadKind::MESSAGING {
        assert!(
            summary
                .per_workload
                .get(&kind)
                .is_some_and(|w| w.runs >= 192),
            "{} not covered",
            kind.name()
        );
    }
    assert!(
        summary.messages.delivered > 1000,
        "too few messages delivered:\n{}",
        summary.render()
    );
    assert!(
        summary.net.corrupted_delivered > 0 && summary.net.lost > 0 && summary.net.duplicated > 0
    );
    assert!(
        summary.stats.credit_waits > 0 && summary.stats.credit_stalls > 0,
        "senders never waited for credits, or a wait never ran out"
    );
    let engine = &summary.engine;
    assert!(
        engine.frames_placed > 0 && engine.partial_sends > 0 && engine.commands > 0,
        "the engine's placement and back-pressure paths were not exercised: {engine:?}"
    );
    assert_no_violations(&summary);
}

/// Busy engines (`RunSpec::busy_engines`): each looks at its socket late, so frames queue up,
/// sees a sender's runs coalesced as UDP with GRO delivers them, and reads headers ahead from
/// data frames on. First frames, and the frames coalesced behind them, are then placed from
/// looks ahead into posted receives far more often than in the default mix, under loss,
/// duplication, reordering and corruption.
#[test]
fn busy_engines_placing_first_frames_and_the_frames_behind_them_have_no_violations() {
    let mut template = faulty_template();
    template.busy_engines = true;
    template.net.dup = 0.05;
    template.net.reorder = 0.2;
    let plan = SweepPlan {
        seeds: (2000..2240).collect(),
        workloads: WorkloadKind::MESSAGING.to_vec(),
        losses: vec![0.0, 0.05],
        policies: vec![UnexpectedPolicy::Buffer],
        template,
    };
    let summary = sweep_keeping_failures(&plan);
    assert_eq!(summary.runs, 480);
    let engine = &summary.engine;
    assert!(
        engine.first_frames_predicted > 100 && engine.frames_behind_first > 100,
        "first frames and the frames behind them were hardly placed: {engine:?}"
    );
    assert_eq!(engine.first_frames_refused, 0);
    assert_no_violations(&summary);
}

#[test]
fn the_protocol_core_alone_under_loss_has_no_violations() {
    let mut template = faulty_template();
    template.mode = SimMode::Core;
    let plan = SweepPlan {
        seeds: (1000..1088).collect(),
        workloads: WorkloadKind::for_mode(SimMode::Core),
        losses: vec![0.0, 0.05, 0.2],
        policies: vec![UnexpectedPolicy::Buffer, UnexpectedPolicy::Drop],
        template,
    };
    let summary = sweep_keeping_failures(&plan);
    assert_eq!(summary.runs, 528);
    assert_eq!(summary.engine.turns, 0, "core mode runs no engine");
    assert_no_violations(&summary);
}

#[test]
fn panic_programs_under_loss_duplication_reordering_and_deaths_have_no_violations() {
    // Requests, answers, programs' messages and replies lost, duplicated, reordered and
    // corrupted; every other seed kills a rank mid-run (programs-death).
    let plan = SweepPlan {
        seeds: (0..300).collect(),
        workloads: vec![WorkloadKind::Programs, WorkloadKind::ProgramsDeath],
        losses: vec![0.0, 0.05, 0.1, 0.2],
        policies: vec![UnexpectedPolicy::Buffer, UnexpectedPolicy::Drop],
        template: faulty_template(),
    };
    let summary = sweep_keeping_failures(&plan);
    assert_eq!(summary.runs, 2400);
    let net = &summary.net;
    assert!(
        net.lost > 0
            && net.duplicated > 0
            && net.reordered > 0
            && net.corrupted_delivered > 0
            && net.dead_drops > 0,
        "faults not exercised: {net:?}"
    );
    assert!(
        summary.messages.delivered > 100_000 && summary.stats.peers_declared_unreachable > 0,
        "{}",
        summary.render()
    );
    assert_no_violations(&summary);
}

#[test]
fn panic_host_side_under_loss_duplication_reordering_and_deaths_has_no_violations() {
    // Segments, locks and flags, PASS/DROP, the engine-resident barrier and all-reduce,
    // replace, send buffers running out, programs and remote requests off (alternate seeds of
    // programs-host), and a barrier waiting on a dead rank (programs-host-death).
    let plan = SweepPlan {
        seeds: (0..64).collect(),
        workloads: vec![WorkloadKind::ProgramsHost, WorkloadKind::ProgramsHostDeath],
        losses: vec![0.0, 0.05, 0.1, 0.2],
        policies: vec![UnexpectedPolicy::Buffer, UnexpectedPolicy::Drop],
        template: faulty_template(),
    };
    let summary = sweep_keeping_failures(&plan);
    assert_eq!(summary.runs, 512);
    let net = &summary.net;
    assert!(
        net.lost > 0
            && net.duplicated > 0
            && net.reordered > 0
            && net.corrupted_delivered > 0
            && net.dead_drops > 0,
        "faults not exercised: {net:?}"
    );
    assert_no_violations(&summary);
}

#[test]
fn panic_workloads_need_the_engine() {
    let mut spec = RunSpec::new(1, WorkloadKind::Programs);
    spec.mode = SimMode::Core;
    let result = nicmsg_sim::run_catching(&spec);
    assert_eq!(result.violation_count, 1);
    assert_eq!(result.violations[0].kind, "config");
    assert!(WorkloadKind::for_mode(SimMode::Core)
        .iter()
        .all(|kind| !kind.needs_engine()));
    assert!(WorkloadKind::for_mode(SimMode::Engine).contains(&WorkloadKind::Programs));
}

#[test]
fn full_scale_workloads_without_faults_have_no_violations() {
    // Default message counts (multi-megabyte messages included) on a clean network, and a
    // larger all-to-all.
    every_workload_without_loss_has_no_violations(100..109, NetConfig::default());

    let mut spec = faulty_template();
    spec.workload = WorkloadKind::AllToAll;
    spec.ranks = Some(24);
    spec.net.loss = 0.02;
    let result = nicmsg_sim::run_catching(&spec);
    assert_eq!(result.ranks, 24);
    assert_eq!(
        result.violation_count,
        0,
        "{}",
        nicmsg_sim::report::render_failure(&result)
    );
}

/// Every workload on a network that duplicates and reorders but loses nothing: besides every
/// other invariant, every credit spent is returned and every credit returned is told once the
/// run goes quiet (`credits-unsettled`), which a credit returned in the wrong class breaks and
/// nothing else shows.
#[test]
fn without_loss_every_credit_of_every_class_is_settled() {
    let net = NetConfig {
        dup: 0.05,
        reorder: 0.2,
        ..NetConfig::default()
    };
    every_workload_without_loss_has_no_violations(0..96, net);
}

/// Every workload for each of `seeds`, both policies, on `net` with no loss.
fn every_workload_without_loss_has_no_violations(seeds: std::ops::Range<u64>, net: NetConfig) {
    let mut template = RunSpec::new(0, WorkloadKind::PingPong);
    template.net = net;
    template.limits.max_virtual_ns = 20_000_000_000;
    let plan = SweepPlan {
        seeds: seeds.collect(),
        workloads: WorkloadKind::ALL.to_vec(),
        losses: vec![0.0],
        policies: vec![UnexpectedPolicy::Buffer, UnexpectedPolicy::Drop],
        template,
    };
    let summary = sweep_keeping_failures(&plan);
    assert_no_violations(&summary);
}
