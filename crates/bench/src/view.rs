//! How the plots, the markdown report and the terminal summary read a [`Report`]: which series
//! count, each pattern's headline number, which nicmsg series the others are compared with, and
//! how sizes and values are printed. Kept in one place so that a chart, its table and the
//! targets never disagree about what "the bandwidth at 1 MiB" means.

use crate::model::{Environment, Outcome, Pattern, Point, Report, Series};

/// A series has something to show only when it was measured and produced points; the others
/// are listed with their reason instead.
pub(crate) fn has_data(series: &Series) -> bool {
    series.outcome == Outcome::Measured && !series.points.is_empty()
}

/// The series of `pattern` that have data, in report order (the runner's order is kept so that
/// colours and columns are stable from run to run).
pub(crate) fn measured(report: &Report, pattern: Pattern) -> Vec<&Series> {
    report
        .series
        .iter()
        .filter(|s| s.pattern == pattern && has_data(s))
        .collect()
}

/// The series of `pattern` that could not be measured, with their outcome.
pub(crate) fn not_measured(report: &Report, pattern: Pattern) -> Vec<&Series> {
    report
        .series
        .iter()
        .filter(|s| s.pattern == pattern && s.outcome != Outcome::Measured)
        .collect()
}

/// The measured series of `pattern` for one system.
pub(crate) fn find<'a>(report: &'a Report, pattern: Pattern, system: &str) -> Option<&'a Series> {
    report
        .series
        .iter()
        .find(|s| s.pattern == pattern && s.system == system && has_data(s))
}

/// Any series (measured or not) of `pattern` for one system: its outcome explains an absence.
pub(crate) fn find_any<'a>(
    report: &'a Report,
    pattern: Pattern,
    system: &str,
) -> Option<&'a Series> {
    report
        .series
        .iter()
        .find(|s| s.pattern == pattern && s.system == system)
}

pub(crate) fn is_nicmsg(system: &str) -> bool {
    system.starts_with("nicmsg")
}

/// The nicmsg series the other systems' ratios are taken against: the inline engine (the
/// papers' "library in the application's thread" setting), else the thread engine (for the
/// MPI patterns, Open MPI on nicmsg in those modes), else any nicmsg variant (an offload sweep
/// may hold only `nicmsg-thread-preN`).
pub(crate) fn reference<'a>(series: &[&'a Series]) -> Option<&'a Series> {
    [
        "nicmsg-inline",
        "nicmsg-thread",
        "ompi-nicmsg-inline",
        "ompi-nicmsg-thread",
    ]
    .iter()
    .find_map(|name| series.iter().find(|s| s.system == *name))
    .or_else(|| series.iter().find(|s| is_nicmsg(&s.system)))
    .copied()
}

/// The series a PANIC series is compared with: the same engine mode's plain API (`panic-rtt`),
/// host-driven operation (`panic-collectives`) or host-answered look-up (`panic-kv`).
pub(crate) fn panic_reference(pattern: Pattern, system: &str) -> Option<String> {
    let (mode, variant) = system.strip_prefix("nicmsg-")?.split_once('-')?;
    let reference = match (pattern, variant) {
        (Pattern::PanicRtt, "api") => return None,
        (Pattern::PanicRtt, _) => "api".to_string(),
        (Pattern::PanicKv, "engine") => "host".to_string(),
        (Pattern::PanicCollectives, v) => format!("host-{}", v.strip_prefix("engine-")?),
        _ => return None,
    };
    Some(format!("nicmsg-{mode}-{reference}"))
}

pub(crate) fn point_at(series: &Series, size: u64) -> Option<&Point> {
    series.points.iter().find(|p| p.size == size)
}

/// The message size of the overhead and overlap measurements (EMP table 2, RMPP figures
/// 9-11).
pub(crate) const TEN_KB: u64 = 10 * 1024;

/// The point an overhead series is read at: the 10 KB one, else its first (whose size the
/// readers then print, so a different size is never passed off as 10 KB).
pub(crate) fn overhead_point(series: &Series) -> Option<&Point> {
    point_at(series, TEN_KB).or_else(|| series.points.first())
}

/// Post-send + post-receive + wait of one message: from the per-call breakdown when present,
/// else the point's main time, which the runner defines as that sum.
pub(crate) fn overhead_total(point: &Point) -> f64 {
    match &point.overhead {
        Some(o) => o.post_send_us.median + o.post_recv_us.median + o.wait_us.median,
        None => point.time_us.median,
    }
}

/// The number a size-swept pattern is judged by, with its unit (rates are derived from the
/// median time, so they are the median rate).
#[derive(Clone, Copy)]
pub(crate) struct Headline {
    pub what: &'static str,
    pub unit: &'static str,
    pub value: fn(&Point) -> Option<f64>,
}

/// The headline of the patterns whose points are one value per size; `None` for `overhead`
/// and `overlap`, whose points carry several numbers each.
pub(crate) fn headline(pattern: Pattern) -> Option<Headline> {
    match pattern {
        Pattern::Latency | Pattern::MpiLatency => Some(Headline {
            what: "half round trip",
            unit: "us",
            value: |p| Some(p.time_us.median),
        }),
        Pattern::MpiBw => Some(Headline {
            what: "streamed bandwidth",
            unit: "MB/s",
            value: |p| p.mbytes_per_sec,
        }),
        Pattern::Lm => Some(Headline {
            what: "ping-pong bandwidth",
            unit: "MB/s",
            value: |p| p.mbytes_per_sec,
        }),
        Pattern::Bw | Pattern::Offload => Some(Headline {
            what: "bandwidth",
            unit: "MB/s",
            value: |p| p.mbytes_per_sec,
        }),
        Pattern::Bibw => Some(Headline {
            what: "bandwidth, both directions together",
            unit: "MB/s",
            value: |p| p.mbytes_per_sec,
        }),
        Pattern::Msgrate => Some(Headline {
            what: "message rate",
            unit: "msgs/s",
            value: |p| p.msgs_per_sec,
        }),
        Pattern::PanicRtt => Some(Headline {
            what: "round trip",
            unit: "us",
            value: |p| Some(p.time_us.median),
        }),
        Pattern::PanicCollectives | Pattern::PanicKv => Some(Headline {
            what: "time per operation",
            unit: "us",
            value: |p| Some(p.time_us.median),
        }),
        Pattern::Overhead | Pattern::Overlap | Pattern::MpiOverlap | Pattern::PanicCost => None,
    }
}

/// Every size any of `series` measured, ascending and without repeats: the rows of a table.
pub(crate) fn all_sizes(series: &[&Series]) -> Vec<u64> {
    let mut sizes: Vec<u64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.size))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Sizes as the papers label them: 0, 1, 64, 1K, 64K, 1M, 4M; a size that is not a whole
/// number of KiB (e.g. 1500) stays in bytes rather than being rounded into a lie.
pub(crate) fn format_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * 1024 * 1024;
    match bytes {
        0 => "0".to_string(),
        b if b % GIB == 0 => format!("{}G", b / GIB),
        b if b % MIB == 0 => format!("{}M", b / MIB),
        b if b % KIB == 0 => format!("{}K", b / KIB),
        b => b.to_string(),
    }
}

/// A size in running text: "8 B", "10 KiB", "1 MiB" (where "1M" alone would be ambiguous).
pub(crate) fn size_in_words(bytes: u64) -> String {
    let short = format_size(bytes);
    match short.chars().last() {
        Some(unit @ ('K' | 'M' | 'G')) => format!("{} {unit}iB", &short[..short.len() - 1]),
        _ => format!("{short} B"),
    }
}

/// A measured value with about three significant digits: enough to compare systems, not so
/// many that a table of microseconds reads like noise.
pub(crate) fn format_value(value: f64) -> String {
    let magnitude = value.abs();
    if value == 0.0 {
        "0".to_string()
    } else if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

/// `value / reference` as "1.23x", or nothing when the reference is zero or missing.
pub(crate) fn format_ratio(value: f64, reference: Option<f64>) -> Option<String> {
    let reference = reference.filter(|r| *r != 0.0)?;
    Some(format!("{:.2}x", value / reference))
}

/// The first line of a (possibly multi-line) reason, for places with room for one line.
pub(crate) fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("").trim()
}

/// Why a series has no numbers, as one line: "not installed (install: ...)" and so on.
pub(crate) fn outcome_summary(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Measured => "measured".to_string(),
        Outcome::NotInstalled { install } => format!("not installed (install: {install})"),
        Outcome::Unsupported { reason } => format!("unsupported: {reason}"),
        Outcome::Failed { error } => format!("failed: {}", first_line(error)),
    }
}

/// "link netns, MTU 1500 B, limited to 1 Gb/s, 0.5 % loss": what makes two runs comparable.
pub(crate) fn environment_line(environment: &Environment) -> String {
    let link = if environment.link.is_empty() {
        "?"
    } else {
        &environment.link
    };
    let mut parts = vec![format!("link {link}"), format!("MTU {} B", environment.mtu)];
    if let Some(rate) = environment.rate_bits_per_sec {
        parts.push(format!("limited to {}", format_rate(rate)));
    }
    if let Some(loss) = environment.loss_percent {
        parts.push(format!("{loss} % loss"));
    }
    if environment.quick {
        parts.push("--quick (few repetitions)".into());
    }
    if !environment.commit.is_empty() {
        parts.push(format!("commit {}", environment.commit));
    }
    parts.join(", ")
}

fn format_rate(bits_per_sec: u64) -> String {
    match bits_per_sec {
        b if b >= 1_000_000_000 && b % 1_000_000_000 == 0 => format!("{} Gb/s", b / 1_000_000_000),
        b if b >= 1_000_000 && b % 1_000_000 == 0 => format!("{} Mb/s", b / 1_000_000),
        b => format!("{b} b/s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_labelled_like_the_papers() {
        let labels: Vec<String> = [0, 1, 64, 1024, 65536, 1 << 20, 4 << 20, 1500, 10240]
            .into_iter()
            .map(format_size)
            .collect();
        assert_eq!(
            labels,
            ["0", "1", "64", "1K", "64K", "1M", "4M", "1500", "10K"]
        );
        assert_eq!(size_in_words(8), "8 B");
        assert_eq!(size_in_words(10240), "10 KiB");
        assert_eq!(size_in_words(1 << 20), "1 MiB");
    }
}
