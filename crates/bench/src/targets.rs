//! The performance targets, checked against a [`Report`].
//!
//! Each target compares nicmsg with a baseline measured in the same run (so that the machine
//! and the link cancel out) or with an absolute bound. A target whose numbers are missing (the
//! peer is not installed, the pattern was not run, the size was not swept) is
//! [`Verdict::NotMeasured`] and says what is missing, never silently met.
//!
//! For latency and bandwidth nicmsg is represented by its best engine mode (`nicmsg-inline` or
//! `nicmsg-thread`, whichever did better at the target's size), and the text names it.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::{Environment, Overlap, Pattern, Point, Report, Series};
use crate::system::System;
use crate::view::{self, format_value, overhead_point, overhead_total, size_in_words, TEN_KB};

/// Whether a target holds in this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Met,
    Missed,
    /// A number the target needs is absent; `TargetCheck::measured` says which and why.
    NotMeasured,
}

impl Verdict {
    fn from_holds(holds: bool) -> Self {
        if holds {
            Verdict::Met
        } else {
            Verdict::Missed
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "MISSED",
            Verdict::NotMeasured => "not measured",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One target: what it asks, what this run measured, and the verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetCheck {
    /// Short stable name, e.g. "8 B latency vs udp-busy".
    pub name: String,
    /// The bound, e.g. "<= 1.15 x udp-busy".
    pub goal: String,
    /// The numbers behind the verdict, or what is missing.
    pub measured: String,
    pub verdict: Verdict,
}

/// The message size of the latency targets (EMP/RMPP's small-message latency).
const LATENCY_SIZE: u64 = 8;
/// The message size of the bandwidth targets: large enough to be at the asymptote.
const BANDWIDTH_SIZE: u64 = 1 << 20;
/// `--link gige` limits each link to this rate; only then is the absolute bound meaningful.
const GIGE_BITS_PER_SEC: u64 = 1_000_000_000;

/// The engine modes whose best result stands for nicmsg in latency and bandwidth targets.
const NICMSG_MODES: [&str; 2] = ["nicmsg-inline", "nicmsg-thread"];

/// Every target of the issue, in the order the report lists them.
///
/// A report of the MPI patterns alone (`--suite mpi`) is judged by the MPI goals only, and one
/// without MPI series by the others only, so neither lists the other's goals as not measured.
pub fn evaluate(report: &Report) -> Vec<TargetCheck> {
    let has_mpi = report.series.iter().any(|s| s.pattern.is_mpi());
    let only_mpi = has_mpi && report.series.iter().all(|s| s.pattern.is_mpi());
    let mut checks = Vec::new();
    if !only_mpi {
        checks.extend(latency_checks(report));
        checks.extend(bandwidth_checks(report));
        checks.extend(overhead_checks(report));
        checks.push(overlap_check(report));
        checks.extend(cliff_checks(report));
        checks.extend(panic_checks(report));
        checks.extend(lm_checks(report));
    }
    if has_mpi {
        checks.extend(mpi::checks(report));
    }
    checks
}

mod mpi;

/// The size of issue 18's LM goals: the largest UDP datagram, standard UDP's one message of
/// "64 KiB" (65,536 bytes would be two datagrams for it).
const LM_GOAL_SIZE: u64 = crate::messenger::LARGEST_DATAGRAM as u64;
/// The MTU the LM goals are set at.
const LM_GOAL_MTU: u32 = 1500;

/// Issue 18's goals for the LM path against standard UDP at MTU 1500: at least twice its
/// bandwidth and at most half its CPU per byte for 64 KiB datagrams; and no byte copied in
/// user space on admitted transfers. Beside them, the same goals for the floor under LM
/// (`xdp-floor`: the kernel's copy-mode AF_XDP with nothing on top), which bounds what any LM
/// implementation over it can reach on the link.
fn lm_checks(report: &Report) -> Vec<TargetCheck> {
    let lm = view::find(report, Pattern::Lm, System::Lm.name());
    let mtu = report.environment.mtu;
    let ratio =
        |system: System, name: &str, goal: &str, value: PointValue, holds: fn(f64) -> bool| {
            if mtu != LM_GOAL_MTU {
                return not_measured(
                    name,
                    goal,
                    format!("goal at MTU {LM_GOAL_MTU}, run at {mtu}"),
                );
            }
            let at_goal_size =
                |series: &str| point_value(report, (Pattern::Lm, series), LM_GOAL_SIZE, value);
            let standard_udp = at_goal_size(System::UdpFrag.name());
            ratio_check(
                name,
                goal.into(),
                &at_goal_size(system.name()),
                &standard_udp,
                holds,
            )
        };
    let bandwidth = view::headline(Pattern::Lm).expect("LM is swept by size");
    let bandwidth: PointValue = (bandwidth.value, bandwidth.unit);
    let cpu: PointValue = (|p| p.cpu.map(|c| c.us_per_mbyte), "us/MB");
    let (twice, half) = (
        ">= 2 x udp-frag (65,507 B, MTU 1500)",
        "<= 0.5 x udp-frag (65,507 B, MTU 1500)",
    );
    vec![
        ratio(System::Lm, "LM 64 KiB bandwidth", twice, bandwidth, |r| {
            r >= 2.0
        }),
        ratio(System::Lm, "LM 64 KiB CPU per byte", half, cpu, |r| {
            r <= 0.5
        }),
        zero_copy_check(lm),
        ratio(
            System::XdpFloor,
            "AF_XDP floor: 64 KiB bandwidth",
            twice,
            bandwidth,
            |r| r >= 2.0,
        ),
        ratio(
            System::XdpFloor,
            "AF_XDP floor: 64 KiB CPU per byte",
            half,
            cpu,
            |r| r <= 0.5,
        ),
    ]
}

/// No byte copied in user space at a size whose transfers were all admitted and placed.
fn zero_copy_check(lm: Option<&Series>) -> TargetCheck {
    let (name, goal) = (
        "LM placed transfers copy nothing",
        "0 B copied in user space",
    );
    let placed: Vec<(u64, crate::model::Copies)> = lm
        .into_iter()
        .flat_map(|s| &s.points)
        .filter_map(|p| Some((p.size, p.copies?)))
        .filter(|(_, c)| c.transfers > 0 && c.transfers_placed == c.transfers)
        .collect();
    if placed.is_empty() {
        return not_measured(
            name,
            goal,
            "no nicmsg-lm point with every transfer placed".into(),
        );
    }
    let copied: u64 = placed.iter().map(|(_, c)| c.bytes_copied).sum();
    let received: u64 = placed.iter().map(|(_, c)| c.bytes_received).sum();
    TargetCheck {
        name: name.into(),
        goal: goal.into(),
        measured: format!(
            "{copied} B copied of {received} B received at {} sizes ({} to {})",
            placed.len(),
            size_in_words(placed[0].0),
            size_in_words(placed[placed.len() - 1].0)
        ),
        verdict: Verdict::from_holds(copied == 0),
    }
}

/// Issue 17's goals for PANIC, per engine mode: engine-to-engine round trips beat the plain
/// API's at every size measured; an engine-answered look-up takes at most 0.8x a
/// host-answered one; and the interpreter takes at most 10 ns per simple instruction.
fn panic_checks(report: &Report) -> Vec<TargetCheck> {
    let mut checks = Vec::new();
    for mode in ["inline", "thread"] {
        let ours = format!("nicmsg-{mode}-mcp2mcp");
        let api = format!("nicmsg-{mode}-api");
        checks.push(panic_ratio_check(
            report,
            Pattern::PanicRtt,
            (&ours, &api),
            format!("PANIC mcp2mcp vs API ({mode})"),
            "< api at every size".to_string(),
            1.0,
            false,
        ));
        let ours = format!("nicmsg-{mode}-engine");
        let host = format!("nicmsg-{mode}-host");
        checks.push(panic_ratio_check(
            report,
            Pattern::PanicKv,
            (&ours, &host),
            format!("PANIC look-up vs host ({mode})"),
            "<= 0.8 x host".to_string(),
            0.8,
            true,
        ));
    }
    checks.push(interpreter_check(report));
    checks
}

/// `ours` against `reference` at every size both measured: holds when every ratio of medians
/// is below `bound` (or at most `bound` when `inclusive`).
fn panic_ratio_check(
    report: &Report,
    pattern: Pattern,
    (ours, reference): (&str, &str),
    name: String,
    goal: String,
    bound: f64,
    inclusive: bool,
) -> TargetCheck {
    let (Some(a), Some(b)) = (
        view::find(report, pattern, ours),
        view::find(report, pattern, reference),
    ) else {
        return TargetCheck {
            name,
            goal,
            measured: format!("no {} series", pattern.name()),
            verdict: Verdict::NotMeasured,
        };
    };
    let ratios: Vec<(u64, f64, f64, f64)> = a
        .points
        .iter()
        .filter_map(|p| {
            let base = view::point_at(b, p.size)?.time_us.median;
            Some((p.size, p.time_us.median, base, p.time_us.median / base))
        })
        .collect();
    if ratios.is_empty() {
        return TargetCheck {
            name,
            goal,
            measured: format!("{ours} and {reference} share no size"),
            verdict: Verdict::NotMeasured,
        };
    }
    let holds = ratios
        .iter()
        .all(|r| if inclusive { r.3 <= bound } else { r.3 < bound });
    let worst = ratios
        .iter()
        .max_by(|x, y| x.3.total_cmp(&y.3))
        .expect("not empty");
    let best = ratios
        .iter()
        .min_by(|x, y| x.3.total_cmp(&y.3))
        .expect("not empty");
    let measured = if ratios.len() == 1 {
        format!(
            "{} us vs {} us ({:.2}x)",
            format_value(worst.1),
            format_value(worst.2),
            worst.3
        )
    } else {
        format!(
            "{:.2}x to {:.2}x; worst at {}: {} us vs {} us",
            best.3,
            worst.3,
            size_in_words(worst.0),
            format_value(worst.1),
            format_value(worst.2)
        )
    };
    TargetCheck {
        name,
        goal,
        measured,
        verdict: Verdict::from_holds(holds),
    }
}

/// The interpreter's time per instruction: the slope of `panic-cost`'s interpreting phase
/// between its fewest and most statements (`x = x + 1`: four simple instructions each), so
/// the activation's fixed costs and the clock reads cancel.
fn interpreter_check(report: &Report) -> TargetCheck {
    let name = "PANIC interpreter per instruction".to_string();
    let goal = "<= 10 ns per simple instruction".to_string();
    let points: Vec<(u32, f64)> = view::measured(report, Pattern::PanicCost)
        .iter()
        .flat_map(|s| s.points.iter())
        .filter_map(|p| Some((p.phases?.instructions, p.phases?.interpret_us.median)))
        .collect();
    let fewest = points.iter().min_by_key(|p| p.0);
    let most = points.iter().max_by_key(|p| p.0);
    match (fewest, most) {
        (Some(a), Some(b)) if b.0 > a.0 => {
            let ns = (b.1 - a.1) * 1e3 / f64::from(b.0 - a.0);
            TargetCheck {
                name,
                goal,
                measured: format!(
                    "{ns:.2} ns ({} to {} instructions: {} to {} us)",
                    a.0,
                    b.0,
                    format_value(a.1),
                    format_value(b.1)
                ),
                verdict: Verdict::from_holds(ns <= 10.0),
            }
        }
        _ => TargetCheck {
            name,
            goal,
            measured: "no panic-cost series".to_string(),
            verdict: Verdict::NotMeasured,
        },
    }
}

/// A number with who measured it, for the `measured` column.
struct Value {
    who: String,
    value: f64,
    unit: &'static str,
    /// Context after the number, e.g. the engine mode that was not chosen.
    note: Option<String>,
}

impl Value {
    fn new(who: String, value: f64, unit: &'static str) -> Self {
        Value {
            who,
            value,
            unit,
            note: None,
        }
    }

    fn describe(&self) -> String {
        let number = format!("{} {} {}", self.who, format_value(self.value), self.unit);
        match &self.note {
            Some(note) => format!("{number} ({note})"),
            None => number,
        }
    }
}

/// A value, or the reason it is missing.
type Lookup = Result<Value, String>;

/// `ours / theirs` checked by `holds`; not measured when either side is missing.
fn ratio_check(
    name: &str,
    goal: String,
    ours: &Lookup,
    theirs: &Lookup,
    holds: impl Fn(f64) -> bool,
) -> TargetCheck {
    let (verdict, measured) = match (ours, theirs) {
        (Ok(a), Ok(b)) if b.value > 0.0 => {
            let ratio = a.value / b.value;
            let text = format!("{} vs {} = {ratio:.2}x", a.describe(), b.describe());
            (Verdict::from_holds(holds(ratio)), text)
        }
        (Ok(_), Ok(b)) => (Verdict::NotMeasured, format!("{} is zero", b.describe())),
        _ => {
            let missing: Vec<&str> = [ours, theirs]
                .into_iter()
                .filter_map(|l| l.as_ref().err().map(String::as_str))
                .collect();
            (Verdict::NotMeasured, missing.join("; "))
        }
    };
    TargetCheck {
        name: name.to_string(),
        goal,
        measured,
        verdict,
    }
}

fn not_measured(name: &str, goal: &str, why: String) -> TargetCheck {
    TargetCheck {
        name: name.to_string(),
        goal: goal.to_string(),
        measured: why,
        verdict: Verdict::NotMeasured,
    }
}

/// Why `system` has no usable point of `size` under `pattern`, in words.
fn absence(report: &Report, pattern: Pattern, system: &str, size: u64) -> String {
    let pattern_name = pattern.name();
    match view::find_any(report, pattern, system) {
        None => format!("{system}: no {pattern_name} series in this run"),
        Some(s) if !view::has_data(s) => {
            format!("{system}: {}", view::outcome_summary(&s.outcome))
        }
        Some(_) => format!("{system}: no {} {pattern_name} point", size_in_words(size)),
    }
}

/// `system`'s headline value (latency, bandwidth, ...) at `size`.
fn system_value(report: &Report, pattern: Pattern, system: &str, size: u64) -> Lookup {
    let headline = view::headline(pattern).expect("size-swept pattern");
    point_value(
        report,
        (pattern, system),
        size,
        (headline.value, headline.unit),
    )
}

/// A number read from a point, and its unit.
type PointValue = (fn(&Point) -> Option<f64>, &'static str);

/// `system`'s `value` at `size` under `pattern`, or why there is none.
fn point_value(
    report: &Report,
    (pattern, system): (Pattern, &str),
    size: u64,
    (value, unit): PointValue,
) -> Lookup {
    view::find(report, pattern, system)
        .and_then(|s| view::point_at(s, size))
        .and_then(value)
        .map(|number| Value::new(system.to_string(), number, unit))
        .ok_or_else(|| absence(report, pattern, system, size))
}

/// nicmsg's best engine mode at `size`: the lowest value when `lower_is_better`, else the
/// highest. The other mode's number is named too, so the reader sees the choice.
fn best_nicmsg(report: &Report, pattern: Pattern, size: u64, lower_is_better: bool) -> Lookup {
    best_of(report, (pattern, &NICMSG_MODES), size, lower_is_better)
}

/// The best of `modes` (series names) at `size`, as [`best_nicmsg`] says.
fn best_of(
    report: &Report,
    (pattern, modes): (Pattern, &[&str]),
    size: u64,
    lower_is_better: bool,
) -> Lookup {
    let mut found: Vec<Value> = modes
        .iter()
        .filter_map(|mode| system_value(report, pattern, mode, size).ok())
        .collect();
    found.sort_by(|a, b| a.value.total_cmp(&b.value));
    if !lower_is_better {
        found.reverse();
    }
    let mut found = found.into_iter();
    let Some(mut best) = found.next() else {
        let reasons: Vec<String> = modes
            .iter()
            .map(|mode| absence(report, pattern, mode, size))
            .collect();
        return Err(reasons.join("; "));
    };
    if let Some(other) = found.next() {
        best.note = Some(format!("best mode; {}", other.describe()));
    }
    Ok(best)
}

fn latency_checks(report: &Report) -> Vec<TargetCheck> {
    let ours = best_nicmsg(report, Pattern::Latency, LATENCY_SIZE, true);
    let name = |peer: &str| format!("{} latency vs {peer}", size_in_words(LATENCY_SIZE));
    let peer = |system: &str| system_value(report, Pattern::Latency, system, LATENCY_SIZE);
    vec![
        ratio_check(
            &name("udp-busy"),
            "<= 1.15 x udp-busy".into(),
            &ours,
            &peer("udp-busy"),
            |r| r <= 1.15,
        ),
        ratio_check(
            &name("fi-udp-rxd"),
            "<= 0.5 x fi-udp-rxd".into(),
            &ours,
            &peer("fi-udp-rxd"),
            |r| r <= 0.5,
        ),
        ratio_check(
            &name("ucx-tcp"),
            "< ucx-tcp".into(),
            &ours,
            &peer("ucx-tcp"),
            |r| r < 1.0,
        ),
    ]
}

fn bandwidth_checks(report: &Report) -> Vec<TargetCheck> {
    let ours = best_nicmsg(report, Pattern::Bw, BANDWIDTH_SIZE, false);
    let name = format!("{} bandwidth vs TCP", size_in_words(BANDWIDTH_SIZE));
    // Busy-polling TCP is the fair peer of a busy-polling library; blocking TCP stands in
    // when the busy variant is missing, and the goal says so.
    let busy = system_value(report, Pattern::Bw, "tcp-busy", BANDWIDTH_SIZE);
    let (goal, tcp) = match busy {
        Ok(v) => (">= 0.9 x tcp-busy".to_string(), Ok(v)),
        Err(why) => (
            format!(">= 0.9 x tcp-blocking (tcp-busy unavailable: {why})"),
            system_value(report, Pattern::Bw, "tcp-blocking", BANDWIDTH_SIZE),
        ),
    };
    vec![
        ratio_check(&name, goal, &ours, &tcp, |r| r >= 0.9),
        gige_check(&report.environment, &ours),
    ]
}

/// The absolute bound applies only on a link limited to 1 Gb/s, where 940 Mb/s is what TCP
/// reaches after Ethernet and IP framing.
fn gige_check(environment: &Environment, ours: &Lookup) -> TargetCheck {
    let name = format!("{} bandwidth on GigE", size_in_words(BANDWIDTH_SIZE));
    let goal = ">= 940 Mb/s";
    if environment.rate_bits_per_sec != Some(GIGE_BITS_PER_SEC) {
        return not_measured(
            &name,
            goal,
            "link not limited to 1 Gb/s (--link gige)".into(),
        );
    }
    match ours {
        Ok(v) => {
            let mbits = v.value * 8.0;
            TargetCheck {
                name,
                goal: goal.into(),
                measured: format!("{} = {mbits:.0} Mb/s", v.describe()),
                verdict: Verdict::from_holds(mbits >= 940.0),
            }
        }
        Err(why) => not_measured(&name, goal, why.clone()),
    }
}

fn overhead_checks(report: &Report) -> Vec<TargetCheck> {
    let wait_name = "wait overhead";
    let wait_goal = "nicmsg wait median <= 3 us per message";
    let total_name = "overhead vs TCP";
    let total_goal = "post-send + post-recv + wait <= 0.25 x tcp-blocking";
    // The engine mode with the lower total cost stands for nicmsg in both checks.
    let best = NICMSG_MODES
        .iter()
        .filter_map(|mode| view::find(report, Pattern::Overhead, mode))
        .filter_map(|s| overhead_point(s).map(|p| (s, p)))
        .min_by(|a, b| overhead_total(a.1).total_cmp(&overhead_total(b.1)));
    let Some((series, point)) = best else {
        let why: Vec<String> = NICMSG_MODES
            .iter()
            .map(|mode| absence(report, Pattern::Overhead, mode, TEN_KB))
            .collect();
        return vec![
            not_measured(wait_name, wait_goal, why.join("; ")),
            not_measured(total_name, total_goal, why.join("; ")),
        ];
    };
    let who = format!("{} at {}", series.system, size_in_words(point.size));
    let wait = match &point.overhead {
        Some(o) => TargetCheck {
            name: wait_name.into(),
            goal: wait_goal.into(),
            measured: format!("{who}: wait {} us", format_value(o.wait_us.median)),
            verdict: Verdict::from_holds(o.wait_us.median <= 3.0),
        },
        None => not_measured(
            wait_name,
            wait_goal,
            format!("{who}: no per-call breakdown"),
        ),
    };
    let ours = Ok(Value::new(who, overhead_total(point), "us"));
    let tcp = view::find(report, Pattern::Overhead, "tcp-blocking")
        .and_then(|s| overhead_point(s).map(|p| (s, p)))
        .map(|(s, p)| {
            let who = format!("{} at {}", s.system, size_in_words(p.size));
            Value::new(who, overhead_total(p), "us")
        })
        .ok_or_else(|| absence(report, Pattern::Overhead, "tcp-blocking", TEN_KB));
    vec![
        wait,
        ratio_check(total_name, total_goal.into(), &ours, &tcp, |r| r <= 0.25),
    ]
}

/// Share of the no-computation throughput the loop must keep for the network to count as busy.
const BUSY_NETWORK: f64 = 0.9;

/// Where an overlap series is read at one size: at its balance point, the largest computation
/// whose throughput is still at least [`BUSY_NETWORK`] of the throughput without computation,
/// or at its smallest computation when every computation starves the network.
#[derive(Debug, Clone, Copy)]
struct Balance {
    compute: f64,
    at: Overlap,
    /// The point without computation.
    idle: Overlap,
    /// False: no computation kept the network busy; `at` is the smallest computation's point.
    busy: bool,
}

impl Balance {
    /// "availability 0.420 at 50 us (857 of 805 MB/s)", or with "no balance point; " before.
    fn describe(&self) -> String {
        let text = format!(
            "availability {:.3} at {} us ({:.1} of {:.1} MB/s)",
            self.at.availability,
            format_value(self.compute),
            self.at.throughput_mbytes_per_sec,
            self.idle.throughput_mbytes_per_sec,
        );
        match self.busy {
            true => text,
            false => format!("no balance point; {text}"),
        }
    }
}

/// `series`' [`Balance`] at `size`, or why there is none.
fn balance_point(series: &Series, size: u64) -> Result<Balance, String> {
    let system = &series.system;
    let swept: Vec<(f64, Overlap)> = series
        .points
        .iter()
        .filter(|p| p.size == size)
        .filter_map(|p| Some((p.compute_us?, p.overlap?)))
        .collect();
    let Some(&(_, idle)) = swept.iter().find(|(c, _)| *c == 0.0) else {
        return Err(format!(
            "{system}: no {} point without computation",
            size_in_words(size)
        ));
    };
    let floor = idle.throughput_mbytes_per_sec * BUSY_NETWORK;
    let computing = || swept.iter().filter(|(c, _)| *c > 0.0);
    let balance = computing()
        .filter(|(_, o)| o.throughput_mbytes_per_sec >= floor)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let smallest = computing().min_by(|a, b| a.0.total_cmp(&b.0));
    match (balance, smallest) {
        (Some(&(compute, at)), _) => Ok(Balance {
            compute,
            at,
            idle,
            busy: true,
        }),
        (None, Some(&(compute, at))) => Ok(Balance {
            compute,
            at,
            idle,
            busy: false,
        }),
        (None, None) => Err(format!("{system}: no point with computation")),
    }
}

/// RMPP's processor availability with the thread engine, where progress happens beside the
/// computation, read at the balance point ([`balance_point`]). There the network is busy all
/// the time, as in RMPP's measurement; with more computation the network starves (EMP) and any
/// system's availability tends to 1, with less there is little computation to be available for.
fn overlap_check(report: &Report) -> TargetCheck {
    let system = "nicmsg-thread";
    let name = "overlap availability (thread mode)";
    let goal = format!(
        "availability >= 0.95 at {} (balance point)",
        size_in_words(TEN_KB)
    );
    let Some(series) = view::find(report, Pattern::Overlap, system) else {
        return not_measured(
            name,
            &goal,
            absence(report, Pattern::Overlap, system, TEN_KB),
        );
    };
    match balance_point(series, TEN_KB) {
        Err(why) => not_measured(name, &goal, why),
        Ok(balance) => TargetCheck {
            name: name.into(),
            goal,
            measured: format!("{system}: {}", balance.describe()),
            verdict: Verdict::from_holds(balance.busy && balance.at.availability >= 0.95),
        },
    }
}

/// The largest relative bandwidth drop between adjacent sizes of a bw series.
struct Cliff {
    drop: f64,
    from: (u64, f64),
    to: (u64, f64),
}

fn worst_drop(series: &Series) -> Option<Cliff> {
    let mut curve: Vec<(u64, f64)> = series
        .points
        .iter()
        .filter_map(|p| Some((p.size, p.mbytes_per_sec?)))
        .collect();
    curve.sort_by_key(|(size, _)| *size);
    curve
        .windows(2)
        .filter(|w| w[0].1 > 0.0)
        .map(|w| Cliff {
            drop: 1.0 - w[1].1 / w[0].1,
            from: w[0],
            to: w[1],
        })
        .max_by(|a, b| a.drop.total_cmp(&b.drop))
}

/// A protocol switch (eager to rendezvous, one frame to several) must not show as a dip in
/// the bandwidth curve: between adjacent sizes bandwidth never falls by more than 10 %.
fn cliff_checks(report: &Report) -> Vec<TargetCheck> {
    let goal = "bandwidth never drops > 10 % between adjacent sizes";
    let series: Vec<&Series> = view::measured(report, Pattern::Bw)
        .into_iter()
        .filter(|s| view::is_nicmsg(&s.system))
        .collect();
    if series.is_empty() {
        return vec![not_measured(
            "no bandwidth cliff",
            goal,
            "no nicmsg bw series measured".into(),
        )];
    }
    series.iter().map(|s| cliff_check(s, goal)).collect()
}

fn cliff_check(series: &Series, goal: &str) -> TargetCheck {
    let name = format!("no bandwidth cliff ({})", series.system);
    let Some(cliff) = worst_drop(series) else {
        return not_measured(&name, goal, "fewer than two sizes with a bandwidth".into());
    };
    let measured = if cliff.drop <= 0.0 {
        "bandwidth never drops between adjacent sizes".to_string()
    } else {
        format!(
            "worst drop {:.1} % from {} ({} MB/s) to {} ({} MB/s)",
            cliff.drop * 100.0,
            size_in_words(cliff.from.0),
            format_value(cliff.from.1),
            size_in_words(cliff.to.0),
            format_value(cliff.to.1),
        )
    };
    TargetCheck {
        name,
        goal: goal.into(),
        measured,
        verdict: Verdict::from_holds(cliff.drop <= 0.10),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Outcome, Overhead, Overlap, Point, Summary};

    fn summary(median: f64) -> Summary {
        Summary {
            median,
            min: median,
            max: median,
            p99: median,
            mean: median,
        }
    }

    pub(super) fn latency_point(size: u64, us: f64) -> Point {
        Point {
            size,
            time_us: summary(us),
            repetitions: 1,
            ..Point::default()
        }
    }

    pub(super) fn bw_point(size: u64, mbytes_per_sec: f64) -> Point {
        let us = size as f64 / mbytes_per_sec;
        Point {
            mbytes_per_sec: Some(mbytes_per_sec),
            ..latency_point(size, us)
        }
    }

    fn overhead_point(send: f64, recv: f64, wait: f64) -> Point {
        let overhead = Overhead {
            post_send_us: summary(send),
            post_recv_us: summary(recv),
            wait_us: summary(wait),
        };
        Point {
            overhead: Some(overhead),
            ..latency_point(TEN_KB, send + recv + wait)
        }
    }

    pub(super) fn overlap_point(compute_us: f64, throughput: f64, availability: f64) -> Point {
        let overlap = Overlap {
            availability,
            throughput_mbytes_per_sec: throughput,
            ..Overlap::default()
        };
        Point {
            compute_us: Some(compute_us),
            overlap: Some(overlap),
            ..latency_point(TEN_KB, compute_us + 10.0)
        }
    }

    pub(super) fn series(pattern: Pattern, system: &str, points: Vec<Point>) -> Series {
        Series {
            pattern,
            system: system.into(),
            label: system.into(),
            command: format!("run {system}"),
            outcome: Outcome::Measured,
            points,
        }
    }

    fn missing(pattern: Pattern, system: &str, outcome: Outcome) -> Series {
        Series {
            outcome,
            ..series(pattern, system, vec![])
        }
    }

    fn latency(system: &str, us: f64) -> Series {
        series(Pattern::Latency, system, vec![latency_point(8, us)])
    }

    fn bw(system: &str, curve: &[(u64, f64)]) -> Series {
        let points = curve.iter().map(|&(size, mb)| bw_point(size, mb)).collect();
        series(Pattern::Bw, system, points)
    }

    fn report(series: Vec<Series>) -> Report {
        Report {
            series,
            ..Report::default()
        }
    }

    fn check<'a>(checks: &'a [TargetCheck], name: &str) -> &'a TargetCheck {
        checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no check {name:?} in {checks:#?}"))
    }

    #[test]
    fn latency_targets_met_with_the_best_mode_named() {
        let checks = evaluate(&report(vec![
            latency("nicmsg-inline", 11.0),
            latency("nicmsg-thread", 10.0),
            latency("udp-busy", 9.5),
            latency("fi-udp-rxd", 25.0),
            latency("ucx-tcp", 12.0),
        ]));
        for name in [
            "8 B latency vs udp-busy",
            "8 B latency vs fi-udp-rxd",
            "8 B latency vs ucx-tcp",
        ] {
            let c = check(&checks, name);
            assert_eq!(c.verdict, Verdict::Met, "{c:?}");
            assert!(
                c.measured.starts_with("nicmsg-thread 10.0 us (best mode"),
                "{c:?}"
            );
        }
    }

    #[test]
    fn latency_target_missed_when_slower_than_the_bound() {
        let checks = evaluate(&report(vec![
            latency("nicmsg-inline", 20.0),
            latency("udp-busy", 10.0),
        ]));
        let c = check(&checks, "8 B latency vs udp-busy");
        assert_eq!(c.verdict, Verdict::Missed);
        assert!(c.measured.contains("2.00x"), "{c:?}");
    }

    #[test]
    fn missing_peer_is_not_measured_with_its_install_hint() {
        let install = Outcome::NotInstalled {
            install: "apt-get install libucx-dev".into(),
        };
        let checks = evaluate(&report(vec![
            latency("nicmsg-inline", 10.0),
            missing(Pattern::Latency, "ucx-tcp", install),
        ]));
        let c = check(&checks, "8 B latency vs ucx-tcp");
        assert_eq!(c.verdict, Verdict::NotMeasured);
        assert!(c.measured.contains("apt-get install libucx-dev"), "{c:?}");
        let c = check(&checks, "8 B latency vs fi-udp-rxd");
        assert_eq!(c.verdict, Verdict::NotMeasured);
        assert!(c.measured.contains("no latency series"), "{c:?}");
    }

    #[test]
    fn bandwidth_falls_back_to_blocking_tcp_and_says_so() {
        let mut r = report(vec![
            bw("nicmsg-inline", &[(1 << 20, 950.0)]),
            bw("tcp-blocking", &[(1 << 20, 1000.0)]),
        ]);
        let c = check(&evaluate(&r), "1 MiB bandwidth vs TCP").clone();
        assert_eq!(c.verdict, Verdict::Met);
        assert!(c.goal.contains("tcp-blocking"), "{c:?}");
        assert_eq!(
            check(&evaluate(&r), "1 MiB bandwidth on GigE").verdict,
            Verdict::NotMeasured
        );

        r.environment.rate_bits_per_sec = Some(GIGE_BITS_PER_SEC);
        r.series[0] = bw("nicmsg-inline", &[(1 << 20, 110.0)]);
        let c = check(&evaluate(&r), "1 MiB bandwidth on GigE").clone();
        assert_eq!(c.verdict, Verdict::Missed, "{c:?}");
        assert!(c.measured.contains("880 Mb/s"), "{c:?}");
    }

    #[test]
    fn bandwidth_prefers_busy_tcp() {
        let checks = evaluate(&report(vec![
            bw("nicmsg-inline", &[(1 << 20, 850.0)]),
            bw("tcp-blocking", &[(1 << 20, 900.0)]),
            bw("tcp-busy", &[(1 << 20, 1000.0)]),
        ]));
        let c = check(&checks, "1 MiB bandwidth vs TCP");
        assert_eq!(c.goal, ">= 0.9 x tcp-busy");
        assert_eq!(c.verdict, Verdict::Missed);
    }

    #[test]
    fn overhead_targets() {
        let checks = evaluate(&report(vec![
            series(
                Pattern::Overhead,
                "nicmsg-inline",
                vec![overhead_point(1.0, 1.0, 2.5)],
            ),
            series(
                Pattern::Overhead,
                "tcp-blocking",
                vec![overhead_point(10.0, 5.0, 10.0)],
            ),
        ]));
        assert_eq!(check(&checks, "wait overhead").verdict, Verdict::Met);
        // 4.5 us against 25 us: 0.18x.
        let c = check(&checks, "overhead vs TCP");
        assert_eq!(c.verdict, Verdict::Met, "{c:?}");

        let checks = evaluate(&report(vec![series(
            Pattern::Overhead,
            "nicmsg-thread",
            vec![overhead_point(1.0, 1.0, 4.0)],
        )]));
        assert_eq!(check(&checks, "wait overhead").verdict, Verdict::Missed);
        assert_eq!(
            check(&checks, "overhead vs TCP").verdict,
            Verdict::NotMeasured
        );
    }

    #[test]
    fn overlap_is_read_at_the_balance_point() {
        let points = vec![
            overlap_point(0.0, 100.0, 0.0),
            overlap_point(10.0, 99.0, 0.30),
            overlap_point(100.0, 95.0, 0.96),
            overlap_point(1000.0, 40.0, 0.99), // the network starves: not the balance point
        ];
        let r = report(vec![series(Pattern::Overlap, "nicmsg-thread", points)]);
        let c = check(&evaluate(&r), "overlap availability (thread mode)").clone();
        assert_eq!(c.verdict, Verdict::Met, "{c:?}");
        assert!(c.measured.contains("availability 0.960 at 100 us"), "{c:?}");

        // Inline-like: throughput drops as soon as there is computation.
        let points = vec![
            overlap_point(0.0, 100.0, 0.0),
            overlap_point(10.0, 50.0, 0.5),
            overlap_point(100.0, 10.0, 0.9),
        ];
        let r = report(vec![series(Pattern::Overlap, "nicmsg-thread", points)]);
        let c = check(&evaluate(&r), "overlap availability (thread mode)").clone();
        assert_eq!(c.verdict, Verdict::Missed, "{c:?}");
    }

    #[test]
    fn cliff_is_found_and_located() {
        let checks = evaluate(&report(vec![
            bw(
                "nicmsg-inline",
                &[(1024, 100.0), (4096, 300.0), (2048, 200.0), (8192, 290.0)],
            ),
            bw(
                "nicmsg-thread",
                &[(1024, 100.0), (2048, 200.0), (4096, 150.0)],
            ),
            bw("tcp-busy", &[(1024, 100.0), (2048, 10.0)]),
        ]));
        let c = check(&checks, "no bandwidth cliff (nicmsg-inline)");
        assert_eq!(c.verdict, Verdict::Met, "{c:?}");
        assert!(c.measured.contains("3.3 % from 4 KiB"), "{c:?}");
        let c = check(&checks, "no bandwidth cliff (nicmsg-thread)");
        assert_eq!(c.verdict, Verdict::Missed, "{c:?}");
        assert!(
            c.measured
                .contains("25.0 % from 2 KiB (200 MB/s) to 4 KiB (150 MB/s)"),
            "{c:?}"
        );
        assert!(!checks.iter().any(|c| c.name.contains("tcp-busy")));
    }

    #[test]
    fn empty_report_measures_nothing() {
        let checks = evaluate(&Report::default());
        assert!(!checks.is_empty());
        assert!(
            checks.iter().all(|c| c.verdict == Verdict::NotMeasured),
            "{checks:#?}"
        );
    }

    #[test]
    fn verdicts_serialize_in_snake_case() {
        let json = serde_json::to_string(&Verdict::NotMeasured).unwrap();
        assert_eq!(json, "\"not_measured\"");
    }
}
