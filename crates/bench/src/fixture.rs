//! A synthetic but plausible [`Report`] for the output-side tests: every pattern, size 0,
//! peers that are not installed, unsupported or failed, overlap sweeps and the offload
//! position sweep. The numbers follow simple latency + size/bandwidth models so the charts
//! look like real ones when inspected.

use crate::model::{
    Environment, Outcome, Overhead, Overlap, Pattern, Point, Report, Series, Summary,
};

fn summary(median: f64) -> Summary {
    Summary {
        median,
        min: median * 0.9,
        max: median * 1.5,
        p99: median * 1.3,
        mean: median * 1.05,
    }
}

fn point(size: u64, time_us: f64) -> Point {
    Point {
        size,
        time_us: summary(time_us),
        repetitions: 100,
        ..Point::default()
    }
}

/// 0, 1, 2, 4, ... 4 MiB.
fn sizes() -> impl Iterator<Item = u64> {
    std::iter::once(0).chain((0..=22).map(|e| 1u64 << e))
}

fn series(pattern: Pattern, system: &str, label: &str, points: Vec<Point>) -> Series {
    Series {
        pattern,
        system: system.into(),
        label: label.into(),
        command: format!("nicmsg bench {pattern:?} --system {system}").to_lowercase(),
        outcome: Outcome::Measured,
        points,
    }
}

fn absent(pattern: Pattern, system: &str, outcome: Outcome) -> Series {
    Series {
        outcome,
        ..series(pattern, system, system, vec![])
    }
}

/// Time of one message of `size` over a path with `base_us` startup and `mbytes_per_sec`.
fn model_us(size: u64, base_us: f64, mbytes_per_sec: f64) -> f64 {
    base_us + size as f64 / mbytes_per_sec
}

fn latency(system: &str, label: &str, base_us: f64, mbytes_per_sec: f64) -> Series {
    let points = sizes()
        .map(|s| point(s, model_us(s, base_us, mbytes_per_sec)))
        .collect();
    series(Pattern::Latency, system, label, points)
}

fn bandwidth(pattern: Pattern, system: &str, label: &str, base_us: f64, peak: f64) -> Series {
    let points = sizes()
        .filter(|s| *s > 0)
        .map(|s| {
            let us = model_us(s, base_us, peak);
            Point {
                mbytes_per_sec: Some(s as f64 / us),
                msgs_per_sec: Some(1e6 / us),
                ..point(s, us)
            }
        })
        .collect();
    series(pattern, system, label, points)
}

fn overhead(system: &str, send: f64, recv: f64, wait: f64) -> Series {
    let overhead = Overhead {
        post_send_us: summary(send),
        post_recv_us: summary(recv),
        wait_us: summary(wait),
    };
    let point = Point {
        overhead: Some(overhead),
        ..point(10 * 1024, send + recv + wait)
    };
    series(Pattern::Overhead, system, system, vec![point])
}

fn overlap(system: &str, label: &str, hiding: f64) -> Series {
    let computes: [f64; 7] = [0.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0];
    let message_us = 100.0;
    let points = computes
        .iter()
        .map(|&compute| {
            let iteration = compute.max(message_us) + (1.0 - hiding) * compute.min(message_us);
            let throughput = 2.0 * 10240.0 / iteration;
            let availability = if compute == 0.0 {
                0.0
            } else {
                hiding + (1.0 - hiding) * 0.5
            };
            Point {
                compute_us: Some(compute),
                overlap: Some(Overlap {
                    cpu_fraction: compute / iteration,
                    throughput_mbytes_per_sec: throughput,
                    availability,
                    effective_mbytes_per_sec: availability * throughput,
                }),
                ..point(10 * 1024, iteration)
            }
        })
        .collect();
    series(Pattern::Overlap, system, label, points)
}

fn offload() -> Vec<Series> {
    let mut all = vec![
        bandwidth(
            Pattern::Offload,
            "nicmsg-inline",
            "nicmsg inline",
            9.0,
            1100.0,
        ),
        bandwidth(
            Pattern::Offload,
            "nicmsg-thread",
            "nicmsg thread",
            11.0,
            1150.0,
        ),
    ];
    for position in 0..16 {
        let system = format!("nicmsg-thread-pre{position}");
        let label = format!("nicmsg thread, RSM pre {position}");
        let peak = 1000.0 + 10.0 * position as f64;
        all.push(bandwidth(Pattern::Offload, &system, &label, 11.0, peak));
    }
    all
}

pub(crate) fn sample_report() -> Report {
    let not_installed = |hint: &str| Outcome::NotInstalled {
        install: hint.into(),
    };
    let mut series = vec![
        latency("nicmsg-inline", "nicmsg (inline engine)", 9.0, 1100.0),
        latency("nicmsg-thread", "nicmsg (thread engine)", 11.0, 1150.0),
        latency("udp-busy", "raw UDP, busy poll", 8.0, 1200.0),
        latency("tcp-busy", "TCP, busy poll", 12.0, 1180.0),
        absent(
            Pattern::Latency,
            "ucx-tcp",
            not_installed("apt-get install libucx-dev"),
        ),
        absent(
            Pattern::Latency,
            "fi-udp-rxd",
            Outcome::Failed {
                error: "fi_pingpong exited with 1\nfi_getinfo: -61".into(),
            },
        ),
        bandwidth(
            Pattern::Bw,
            "nicmsg-inline",
            "nicmsg (inline engine)",
            9.0,
            1100.0,
        ),
        bandwidth(
            Pattern::Bw,
            "nicmsg-thread",
            "nicmsg (thread engine)",
            11.0,
            1150.0,
        ),
        bandwidth(Pattern::Bw, "tcp-busy", "TCP, busy poll", 12.0, 1180.0),
        absent(
            Pattern::Bw,
            "udp-busy",
            Outcome::Unsupported {
                reason: "raw UDP has no flow control".into(),
            },
        ),
        bandwidth(
            Pattern::Bibw,
            "nicmsg-inline",
            "nicmsg (inline engine)",
            9.0,
            2000.0,
        ),
        bandwidth(Pattern::Bibw, "tcp-busy", "TCP, busy poll", 12.0, 2200.0),
        bandwidth(
            Pattern::Msgrate,
            "nicmsg-inline",
            "nicmsg (inline engine)",
            2.0,
            900.0,
        ),
        bandwidth(
            Pattern::Msgrate,
            "tcp-blocking",
            "TCP, blocking",
            4.0,
            1000.0,
        ),
        overhead("nicmsg-inline", 0.8, 0.3, 1.9),
        overhead("nicmsg-thread", 0.5, 0.2, 2.4),
        overhead("tcp-blocking", 6.0, 1.0, 14.0),
        overlap("nicmsg-inline", "nicmsg (inline engine)", 0.3),
        overlap("nicmsg-thread", "nicmsg (thread engine)", 0.97),
    ];
    series.extend(offload());
    Report {
        environment: Environment {
            kernel: "Linux 6.1.0".into(),
            cpu: "Example CPU @ 3.0GHz".into(),
            cores: 8,
            link: "netns".into(),
            mtu: 1500,
            rate_bits_per_sec: Some(1_000_000_000),
            loss_percent: None,
            commit: "abc1234".into(),
            started_unix: 1_700_000_000,
            command: "nicmsg bench all --link gige".into(),
            quick: false,
        },
        series,
    }
}
