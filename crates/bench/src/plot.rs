//! Charts of a [`Report`] in the style of the papers' figures: every system of a pattern on
//! one chart with a legend, message size on a log2 axis labelled 1, 64, 1K, 64K, 1M.
//!
//! Each chart is written twice, `NAME.png` and `NAME.svg`:
//!
//! | file | content |
//! |---|---|
//! | `latency` | half round trip vs size (log-log) |
//! | `bw`, `bibw` | bandwidth (MB/s) vs size |
//! | `msgrate` | messages per second vs size |
//! | `overhead` | post-send, post-receive and wait per system (bars, EMP table 2) |
//! | `overlap-throughput` | throughput vs CPU fraction (EMP figure 6) |
//! | `overlap-availability` | processor availability vs computation (RMPP figure 10) |
//! | `overlap-effective` | availability x throughput vs computation (RMPP figure 11) |
//! | `offload` | bandwidth vs size, one line per offload variant |
//! | `mpi-latency`, `mpi-bw` | NPopenmpi's half round trip and streamed bandwidth vs size |
//! | `mpi-overlap-*` | `overlap`'s three charts for MPI_Isend/Irecv, computation, MPI_Waitall |
//! | `panic-rtt` | round trip vs size per PANIC mechanism and engine mode (PANIC figure 3) |
//! | `panic-cost` | the engine's time per phase vs statements executed (PANIC figure 5) |
//! | `panic-collectives` | latency and host CPU per barrier / all-reduce, engine vs host (bars) |
//! | `panic-kv` | look-up time, engine vs host (bars) |
//!
//! A chart without data (no series of its pattern measured) is not written.
//!
//! # Font
//!
//! Text is rasterised by `ab_glyph` (pure Rust), so building needs neither fontconfig nor
//! freetype; the font itself is read at run time from `$NICMSG_BENCH_FONT` or a standard
//! path. On Debian and Ubuntu install **`fonts-dejavu-core`**
//! (`/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf`); without a font [`write_plots`] fails
//! with [`PlotError::Font`], whose message names that package.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::model::{Pattern, Point, Report, Series};
use crate::view::{self, format_size, format_value, size_in_words};

/// Why the charts could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// No usable TrueType font; the message says which package to install.
    #[error("{0}")]
    Font(String),
    #[error("cannot create {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot draw {path}: {message}")]
    Draw { path: PathBuf, message: String },
}

/// Writes every chart that has data into `dir` (created if missing) as PNG and SVG, and
/// returns the files written, each chart's PNG before its SVG.
pub fn write_plots(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let charts = charts(report);
    if charts.is_empty() {
        // Nothing to draw: a run of unavailable peers must not fail for want of a font.
        return Ok(Vec::new());
    }
    register_font()?;
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Io {
        path: dir.into(),
        source,
    })?;
    let mut written = Vec::new();
    for chart in &charts {
        written.extend(write_chart(chart, dir)?);
    }
    Ok(written)
}

// ---------------------------------------------------------------------------------------------
// Font

/// The family name every text style below uses; the loaded font is registered under it.
const FONT: &str = "sans-serif";

/// Overrides the search below, for systems that keep fonts elsewhere.
const FONT_ENV: &str = "NICMSG_BENCH_FONT";

/// Where distributions put a plain sans-serif TTF; Debian's `fonts-dejavu-core` first because
/// the CI machines are Debian.
const FONT_PATHS: [&str; 6] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Loads and registers the font once per process; plotters keeps it for the process's life,
/// which is why the bytes are leaked rather than owned.
fn register_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(load_and_register_font)
        .clone()
        .map_err(PlotError::Font)
}

fn load_and_register_font() -> Result<(), String> {
    let (path, bytes) = match std::env::var_os(FONT_ENV) {
        // An explicit choice that cannot be read is an error, not a reason to pick another.
        Some(path) => {
            let path = PathBuf::from(path);
            let bytes = std::fs::read(&path)
                .map_err(|e| format!("{FONT_ENV}={}: cannot read it: {e}", path.display()))?;
            (path, bytes)
        }
        None => find_font(&FONT_PATHS)?,
    };
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FONT, FontStyle::Normal, bytes)
        .map_err(|_| format!("{} is not a usable TrueType/OpenType font", path.display()))
}

/// The first of `candidates` that can be read, or an error that says what to install.
fn find_font(candidates: &[&str]) -> Result<(PathBuf, Vec<u8>), String> {
    candidates
        .iter()
        .find_map(|p| Some((PathBuf::from(p), std::fs::read(p).ok()?)))
        .ok_or_else(|| {
            format!(
                "no TrueType font to draw chart text (tried {}); install the Debian package \
                 fonts-dejavu-core (apt-get install fonts-dejavu-core) or set {FONT_ENV} to a \
                 .ttf file",
                candidates.join(", ")
            )
        })
}

// ---------------------------------------------------------------------------------------------
// Charts, independent of the backend

/// How a series is drawn; fixed per system so a system looks the same on every chart.
#[derive(Clone, Copy)]
struct Look {
    color: RGBColor,
    marker: Marker,
}

#[derive(Clone, Copy)]
enum Marker {
    Circle,
    Triangle,
    Square,
    Cross,
}

const MARKERS: [Marker; 4] = [
    Marker::Circle,
    Marker::Triangle,
    Marker::Square,
    Marker::Cross,
];

/// Tableau 10: distinguishable, and still distinguishable when printed in grey thanks to the
/// markers.
const PALETTE: [RGBColor; 13] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 0),
    RGBColor(128, 0, 0),
    RGBColor(0, 0, 128),
];

/// The systems a run can have, in palette order.
const KNOWN_SYSTEMS: [&str; 14] = [
    "nicmsg-inline",
    "nicmsg-thread",
    "tcp-blocking",
    "tcp-busy",
    "udp-busy",
    "netpipe",
    "fi-udp-rxd",
    "fi-tcp-rxm",
    "ucx-tcp",
    "udp-frag",
    "nicmsg-lm",
    "nicmsg-lm-sendto",
    "nicmsg-lm-copy",
    "xdp-floor",
];

/// The MPI systems draw in the colours of their kin: Open MPI on nicmsg as nicmsg in the same
/// engine mode, ob1 as TCP, UCX as UCX.
fn palette_name(system: &str) -> &str {
    match system {
        "ompi-nicmsg-inline" => "nicmsg-inline",
        "ompi-nicmsg-thread" => "nicmsg-thread",
        "ompi-ob1-tcp" => "tcp-busy",
        "ompi-ucx-tcp" => "ucx-tcp",
        other => other,
    }
}

/// The offload sweep's RSM positions run 0..=15; they get a hue ramp so the sweep reads as
/// an ordered family rather than sixteen unrelated systems.
const OFFLOAD_POSITIONS: f64 = 16.0;

fn look(system: &str, index_in_chart: usize) -> Look {
    if let Some(position) = offload_position(system) {
        let hue = 0.8 * (position as f64 / (OFFLOAD_POSITIONS - 1.0)).min(1.0);
        let (r, g, b) = HSLColor(hue, 0.75, 0.42).rgb();
        return Look {
            color: RGBColor(r, g, b),
            marker: Marker::Circle,
        };
    }
    let index = KNOWN_SYSTEMS
        .iter()
        .position(|known| *known == palette_name(system))
        .unwrap_or(KNOWN_SYSTEMS.len() + index_in_chart);
    Look {
        color: PALETTE[index % PALETTE.len()],
        marker: MARKERS[index % MARKERS.len()],
    }
}

/// N of `...-preN`.
fn offload_position(system: &str) -> Option<u32> {
    system.rsplit_once("-pre")?.1.parse().ok()
}

struct Line {
    label: String,
    look: Look,
    points: Vec<(f64, f64)>,
}

struct LineChart {
    x_desc: &'static str,
    y_desc: &'static str,
    x: Axis,
    y: Axis,
    lines: Vec<Line>,
}

impl LineChart {
    /// A chart of `lines` whose axes `x_axis` and `y_axis` fit to all their points.
    fn fitted(
        lines: Vec<Line>,
        (x_desc, y_desc): (&'static str, &'static str),
        x_axis: fn(&[f64]) -> Axis,
        y_axis: fn(&[f64]) -> Axis,
    ) -> Body {
        let xs: Vec<f64> = lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.0))
            .collect();
        let ys: Vec<f64> = lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .collect();
        Body::Lines(LineChart {
            x_desc,
            y_desc,
            x: x_axis(&xs),
            y: y_axis(&ys),
            lines,
        })
    }
}

/// EMP table 2 as bars: one group per system, one bar per call.
struct BarChart {
    y_desc: &'static str,
    x: Axis,
    y: Axis,
    parts: [&'static str; 3],
    /// Per group: post-send, post-receive, wait.
    values: Vec<[f64; 3]>,
}

enum Body {
    Lines(LineChart),
    Bars(BarChart),
}

struct Chart {
    /// File name without extension.
    stem: &'static str,
    title: String,
    /// Where it was measured: link, MTU, rate limit.
    subtitle: String,
    body: Body,
}

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 600;

fn charts(report: &Report) -> Vec<Chart> {
    let setting = view::environment_line(&report.environment);
    let mut charts = Vec::new();
    for pattern in Pattern::ALL {
        let bodies = match pattern {
            Pattern::Overhead => overhead_chart(report).into_iter().collect(),
            Pattern::Overlap | Pattern::MpiOverlap => overlap_charts(report, pattern),
            Pattern::Lm => lm_charts(report),
            Pattern::PanicCost => panic_cost_chart(report).into_iter().collect(),
            Pattern::PanicCollectives | Pattern::PanicKv => {
                panic_bar_chart(report, pattern).into_iter().collect()
            }
            _ => size_chart(report, pattern).into_iter().collect(),
        };
        for (stem, title, body) in bodies {
            let title = format!("{}: {title}", pattern.name());
            charts.push(Chart {
                stem,
                title,
                subtitle: setting.clone(),
                body,
            });
        }
    }
    charts
}

/// A chart's file stem, title (after the pattern name) and content.
type Titled = (&'static str, &'static str, Body);

/// Latency, bw, bibw, msgrate and offload: the headline value against message size.
fn size_chart(report: &Report, pattern: Pattern) -> Option<Titled> {
    let headline = view::headline(pattern)?;
    let lines = lines_of(&view::measured(report, pattern), |p| {
        Some((p.size as f64, (headline.value)(p)?))
    });
    if lines.is_empty() {
        return None;
    }
    let (title, y_desc) = match pattern {
        Pattern::Latency => ("half round trip vs message size", "half round trip (us)"),
        Pattern::MpiLatency => (
            "NPopenmpi half round trip vs message size",
            "half round trip (us)",
        ),
        Pattern::MpiBw => (
            "NPopenmpi -s streamed bandwidth vs message size",
            "bandwidth (MB/s)",
        ),
        Pattern::Bw => ("one-way bandwidth vs message size", "bandwidth (MB/s)"),
        Pattern::Bibw => (
            "bidirectional bandwidth vs message size",
            "both directions (MB/s)",
        ),
        Pattern::Msgrate => ("message rate vs message size", "messages per second"),
        Pattern::PanicRtt => (
            "round trip vs message size (PANIC figure 3)",
            "round trip (us)",
        ),
        _ => (
            "bandwidth per RSM position vs message size",
            "bandwidth (MB/s)",
        ),
    };
    // Latency spans decades (a few us to milliseconds at 4 MiB): log-log like the papers.
    let y_axis = match pattern {
        Pattern::Latency | Pattern::MpiLatency => Axis::log,
        _ => Axis::linear,
    };
    let descs = ("message size (bytes)", y_desc);
    let chart = LineChart::fitted(lines, descs, Axis::sizes, y_axis);
    Some((pattern.name(), title, chart))
}

/// One of LM figure 4's charts: its file name, title, y axis (description, scale) and the
/// value of a point it plots against the message size.
struct LmChart {
    name: &'static str,
    title: &'static str,
    y_desc: &'static str,
    y_axis: fn(&[f64]) -> Axis,
    value: fn(&Point) -> Option<f64>,
}

const LM_CHARTS: [LmChart; 3] = [
    LmChart {
        name: "lm-latency",
        title: "ping-pong half round trip vs message size (LM figure 4)",
        y_desc: "half round trip (us)",
        y_axis: Axis::log,
        value: |p| Some(p.time_us.median),
    },
    LmChart {
        name: "lm-bandwidth",
        title: "ping-pong bandwidth vs message size (LM figure 4)",
        y_desc: "bandwidth (MB/s)",
        y_axis: Axis::linear,
        value: |p| p.mbytes_per_sec,
    },
    LmChart {
        name: "lm-cpu",
        title: "CPU per byte vs message size, whole machine (LM figure 4)",
        y_desc: "CPU time per MB moved (us, looper)",
        y_axis: Axis::log,
        value: |p| Some(p.cpu?.us_per_mbyte),
    },
];

/// LM figure 4: latency, bandwidth and CPU per byte against message size, one line per
/// system (standard UDP, the LM sockets, nicmsg's default path); a chart with no point is
/// left out.
fn lm_charts(report: &Report) -> Vec<Titled> {
    let series = view::measured(report, Pattern::Lm);
    LM_CHARTS
        .iter()
        .filter_map(|chart| {
            let lines = lines_of(&series, |p| Some((p.size as f64, (chart.value)(p)?)));
            let descs = ("message size (bytes)", chart.y_desc);
            (!lines.is_empty()).then(|| {
                let body = LineChart::fitted(lines, descs, Axis::sizes, chart.y_axis);
                (chart.name, chart.title, body)
            })
        })
        .collect()
}

/// One line per series, from the points `xy` maps (points it rejects, or with a non-finite
/// coordinate, are left out); series with no point left are skipped.
fn lines_of(series: &[&Series], xy: impl Fn(&Point) -> Option<(f64, f64)>) -> Vec<Line> {
    series
        .iter()
        .enumerate()
        .map(|(i, s)| Line {
            label: s.label.clone(),
            look: look(&s.system, i),
            points: sorted_points(s.points.iter().filter_map(&xy)),
        })
        .filter(|line| !line.points.is_empty())
        .collect()
}

fn sorted_points(points: impl Iterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = points
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// EMP figure 6 and RMPP figures 10-11, one line per system and message size (`overlap`, or
/// `mpi-overlap` into files of its own).
fn overlap_charts(report: &Report, pattern: Pattern) -> Vec<Titled> {
    let series = view::measured(report, pattern);
    let stems = if pattern == Pattern::MpiOverlap {
        [
            "mpi-overlap-throughput",
            "mpi-overlap-availability",
            "mpi-overlap-effective",
        ]
    } else {
        [
            "overlap-throughput",
            "overlap-availability",
            "overlap-effective",
        ]
    };
    let throughput = overlap_lines(&series, |_, o| {
        Some((o.cpu_fraction, o.throughput_mbytes_per_sec))
    });
    let availability = overlap_lines(&series, |p, o| Some((p.compute_us?, o.availability)));
    let effective = overlap_lines(&series, |p, o| {
        Some((p.compute_us?, o.effective_mbytes_per_sec))
    });
    let compute = "computation per iteration (us)";
    let charts = [
        (
            stems[0],
            "throughput vs CPU fraction",
            throughput,
            (
                "fraction of the loop spent computing",
                "throughput, sent + received (MB/s)",
            ),
            Axis::fraction as fn(&[f64]) -> Axis,
            Axis::linear as fn(&[f64]) -> Axis,
        ),
        (
            stems[1],
            "availability vs computation",
            availability,
            (compute, "processor availability"),
            Axis::compute,
            Axis::fraction,
        ),
        (
            stems[2],
            "effective bandwidth vs computation",
            effective,
            (compute, "availability x throughput (MB/s)"),
            Axis::compute,
            Axis::linear,
        ),
    ];
    charts
        .into_iter()
        .filter(|chart| !chart.2.is_empty())
        .map(|(stem, title, lines, descs, x_axis, y_axis)| {
            (stem, title, LineChart::fitted(lines, descs, x_axis, y_axis))
        })
        .collect()
}

/// Lines of overlap points; a series that swept several message sizes gets one line per size,
/// told apart by marker and by the size in the label.
fn overlap_lines(
    series: &[&Series],
    xy: impl Fn(&Point, &crate::model::Overlap) -> Option<(f64, f64)>,
) -> Vec<Line> {
    let mut lines = Vec::new();
    for (i, s) in series.iter().enumerate() {
        let sizes = view::all_sizes(&[*s]);
        for (j, size) in sizes.iter().enumerate() {
            let points = s
                .points
                .iter()
                .filter(|p| p.size == *size)
                .filter_map(|p| xy(p, p.overlap.as_ref()?));
            let mut line_look = look(&s.system, i);
            line_look.marker = MARKERS[j % MARKERS.len()];
            let label = format!("{}, {}", s.label, size_in_words(*size));
            lines.push(Line {
                label,
                look: line_look,
                points: sorted_points(points),
            });
        }
    }
    lines.retain(|l| !l.points.is_empty());
    lines
}

/// PANIC figure 5: the engine's time per phase against the statements executed.
fn panic_cost_chart(report: &Report) -> Option<Titled> {
    let series = view::measured(report, Pattern::PanicCost);
    type Phase = fn(&Point) -> Option<f64>;
    let phases: [(&str, Phase); 4] = [
        ("demultiplex", |p| Some(p.phases?.demux_us.median)),
        ("interpret", |p| Some(p.phases?.interpret_us.median)),
        ("deliver", |p| Some(p.phases?.deliver_us.median)),
        ("total handling", |p| Some(p.time_us.median)),
    ];
    let lines: Vec<Line> = phases
        .iter()
        .enumerate()
        .map(|(i, (label, value))| Line {
            label: (*label).to_string(),
            look: look(label, i),
            points: sorted_points(series.iter().flat_map(|s| {
                s.points
                    .iter()
                    .filter_map(|p| Some((p.statements? as f64, value(p)?)))
            })),
        })
        .filter(|line| !line.points.is_empty())
        .collect();
    if lines.is_empty() {
        return None;
    }
    let descs = ("statements executed", "time per message, median (us)");
    let chart = LineChart::fitted(lines, descs, Axis::linear, Axis::linear);
    Some((
        "panic-cost",
        "engine time per phase vs statements (PANIC figure 5)",
        chart,
    ))
}

/// Collectives and look-ups: one group per series, bars for the median and p99 latency and
/// (collectives) the host's CPU time per operation, or (look-up) the minimum.
fn panic_bar_chart(report: &Report, pattern: Pattern) -> Option<Titled> {
    let series = view::measured(report, pattern);
    let mut groups = Vec::new();
    let mut values = Vec::new();
    for s in series {
        let Some(p) = s.points.first() else { continue };
        groups.push(s.system.trim_start_matches("nicmsg-").to_string());
        let third = match pattern {
            Pattern::PanicCollectives => p.host_cpu_us.map_or(0.0, |c| c.median),
            _ => p.time_us.min,
        };
        values.push([p.time_us.median, p.time_us.p99, third]);
    }
    if groups.is_empty() {
        return None;
    }
    let ys: Vec<f64> = values.iter().flatten().copied().collect();
    let (stem, title, parts) = match pattern {
        Pattern::PanicCollectives => (
            "panic-collectives",
            "engine vs host barrier and all-reduce: latency and host CPU",
            ["latency, median", "latency, p99", "host CPU, median"],
        ),
        _ => (
            "panic-kv",
            "key-value look-up answered by the engine vs by the host",
            ["median", "p99", "min"],
        ),
    };
    let chart = BarChart {
        y_desc: "time per operation (us)",
        x: Axis::categories(groups),
        y: Axis::linear(&ys),
        parts,
        values,
    };
    Some((stem, title, Body::Bars(chart)))
}

/// EMP table 2 as grouped bars; systems without a per-call breakdown are left out.
fn overhead_chart(report: &Report) -> Option<Titled> {
    let mut groups = Vec::new();
    let mut values = Vec::new();
    for s in view::measured(report, Pattern::Overhead) {
        let Some(point) = view::overhead_point(s) else {
            continue;
        };
        let Some(o) = point.overhead else { continue };
        // A point at another size than the others' 10 KB says so under its bar.
        let group = match point.size {
            view::TEN_KB => s.system.clone(),
            size => format!("{} ({})", s.system, format_size(size)),
        };
        groups.push(group);
        values.push([
            o.post_send_us.median,
            o.post_recv_us.median,
            o.wait_us.median,
        ]);
    }
    if groups.is_empty() {
        return None;
    }
    let ys: Vec<f64> = values.iter().flatten().copied().collect();
    let chart = BarChart {
        y_desc: "time per call, median (us)",
        x: Axis::categories(groups),
        y: Axis::linear(&ys),
        parts: ["post-send", "post-receive", "wait"],
        values,
    };
    Some(("overhead", "per-call time at 10 KiB", Body::Bars(chart)))
}

// ---------------------------------------------------------------------------------------------
// Axes

/// How tick values are printed.
#[derive(Clone)]
enum TickLabels {
    /// Message sizes: 1, 64, 1K, 1M; `zero_at` is where size 0 sits (log axes have no 0).
    Sizes { zero_at: Option<f64> },
    /// Plain numbers; `zero_at` as above for a log axis whose data include 0.
    Numbers { zero_at: Option<f64> },
    /// One name per integer position.
    Names(Vec<String>),
}

/// A plotters coordinate whose ticks are chosen here, so that size axes fall on powers of two
/// and a value of 0 on a log axis is drawn at the left edge and labelled "0".
#[derive(Clone)]
struct Axis {
    range: Range<f64>,
    log: bool,
    /// Labelled ticks and bold grid lines.
    ticks: Vec<f64>,
    /// Light grid lines between ticks.
    grid: Vec<f64>,
    labels: TickLabels,
}

/// Positive extent of `values` and whether any is zero (or negative: clamped like zero).
fn positive_extent(values: &[f64]) -> (f64, f64, bool) {
    let positive = values.iter().copied().filter(|v| *v > 0.0);
    let smallest = positive.clone().fold(f64::INFINITY, f64::min);
    let largest = positive.fold(0.0, f64::max);
    let has_zero = values.iter().any(|v| *v <= 0.0);
    if largest == 0.0 {
        (1.0, 1.0, has_zero)
    } else {
        (smallest, largest, has_zero)
    }
}

impl Axis {
    /// Message sizes on a log2 axis; ticks on powers of two, thinned to at most ~10 labels.
    fn sizes(values: &[f64]) -> Axis {
        let (smallest, largest, has_zero) = positive_extent(values);
        let low = smallest.log2().floor() as i32;
        let high = (largest.log2().ceil() as i32).max(low + 1);
        let zero_at = has_zero.then(|| 2f64.powi(low - 1));
        let left = zero_at.unwrap_or(2f64.powi(low));
        // Every second power over the usual 1 B .. 4 MiB sweep: 1, 4, 16, 64, ..., 1M, 4M.
        let step = ((high - low + 1) as f64 / 12.0).ceil().max(1.0) as i32;
        let powers = (low..=high).map(|e| 2f64.powi(e));
        let ticks = (low..=high)
            .filter(|e| e.rem_euclid(step) == 0)
            .map(|e| 2f64.powi(e));
        Axis {
            // A quarter octave of margin so end points and their markers are not on the frame.
            range: left / 2f64.powf(0.25)..2f64.powi(high) * 2f64.powf(0.25),
            log: true,
            ticks: zero_at.into_iter().chain(ticks).collect(),
            grid: powers.collect(),
            labels: TickLabels::Sizes { zero_at },
        }
    }

    /// A log10 axis for quantities spanning decades (latency, computation sweeps).
    fn log(values: &[f64]) -> Axis {
        let (smallest, largest, has_zero) = positive_extent(values);
        let zero_at = has_zero.then(|| smallest / 3.0);
        let low = zero_at.unwrap_or(smallest) / 1.3;
        let high = (largest * 1.3).max(low * 10.0);
        let decades = (low.log10().floor() as i32)..=(high.log10().ceil() as i32);
        // Over a few decades 1-2-5 ticks help reading values off; over more they crowd.
        let mantissas: &[f64] = if high / low > 1e3 {
            &[1.0]
        } else {
            &[1.0, 2.0, 5.0]
        };
        let within = |v: &f64| (low..=high).contains(v);
        let ticks = decades
            .clone()
            .flat_map(|e| mantissas.iter().map(move |m| m * 10f64.powi(e)))
            .filter(within);
        // No grid between the "0" tick and the smallest value: that stretch has no scale.
        let above_zero = |v: &f64| zero_at.is_none() || *v >= smallest;
        let grid = decades
            .flat_map(|e| (1..10).map(move |m| m as f64 * 10f64.powi(e)))
            .filter(within)
            .filter(above_zero);
        Axis {
            range: low..high,
            log: true,
            ticks: zero_at.into_iter().chain(ticks).collect(),
            grid: grid.collect(),
            labels: TickLabels::Numbers { zero_at },
        }
    }

    /// A linear axis from zero (bandwidths and rates are read against zero).
    fn linear(values: &[f64]) -> Axis {
        let largest = values.iter().copied().fold(0.0, f64::max);
        let high = if largest > 0.0 { largest * 1.08 } else { 1.0 };
        Axis::linear_range(0.0..high)
    }

    /// Fractions (CPU fraction, availability) on 0..1, extended if a value exceeds 1.
    fn fraction(values: &[f64]) -> Axis {
        let largest = values.iter().copied().fold(1.0, f64::max);
        Axis::linear_range(0.0..largest * 1.04)
    }

    /// Computation sweeps are often geometric (1, 10, 100 us): log when they span more than
    /// two decades, else linear.
    fn compute(values: &[f64]) -> Axis {
        let (smallest, largest, _) = positive_extent(values);
        if largest / smallest > 100.0 {
            Axis::log(values)
        } else {
            Axis::linear(values)
        }
    }

    fn linear_range(range: Range<f64>) -> Axis {
        let step = nice_step((range.end - range.start) / 8.0);
        let first = (range.start / step).ceil() as i64;
        let last = (range.end / step).floor() as i64;
        let ticks = (first..=last).map(|i| i as f64 * step).collect();
        Axis {
            range,
            log: false,
            ticks,
            grid: Vec::new(),
            labels: TickLabels::Numbers { zero_at: None },
        }
    }

    /// One position per name, for bar groups.
    fn categories(names: Vec<String>) -> Axis {
        let count = names.len();
        Axis {
            range: -0.5..count as f64 - 0.5,
            log: false,
            ticks: (0..count).map(|i| i as f64).collect(),
            grid: Vec::new(),
            labels: TickLabels::Names(names),
        }
    }

    /// Where `value` lies between the ends, 0..1.
    fn fraction_of(&self, value: f64) -> f64 {
        let Range { start, end } = self.range;
        if !self.log {
            return (value - start) / (end - start);
        }
        let zero_at = match self.labels {
            TickLabels::Sizes { zero_at } | TickLabels::Numbers { zero_at } => zero_at,
            TickLabels::Names(_) => None,
        };
        let value = if value > 0.0 {
            value
        } else {
            zero_at.unwrap_or(start)
        };
        (value.ln() - start.ln()) / (end.ln() - start.ln())
    }

    fn label(&self, value: f64) -> String {
        match &self.labels {
            TickLabels::Sizes { zero_at: Some(z) } | TickLabels::Numbers { zero_at: Some(z) }
                if value <= *z * 1.001 =>
            {
                "0".to_string()
            }
            TickLabels::Sizes { .. } => format_size(value.round() as u64),
            TickLabels::Numbers { .. } => format_tick(value),
            TickLabels::Names(names) => names
                .get(value.round() as usize)
                .cloned()
                .unwrap_or_default(),
        }
    }
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = (limit.1 - limit.0) as f64;
        limit.0 + (span * self.fraction_of(*value)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.grid.clone()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

/// The 1, 2 or 5 x 10^k at least `raw`: ticks people read without arithmetic.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|step| *step >= raw * 0.999)
        .unwrap_or(10.0 * magnitude)
}

/// Tick numbers without float noise: 0.3, 250, 12k, 1.5M.
fn format_tick(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 1e6 {
        format!("{}M", trim_decimals(format!("{:.2}", value / 1e6)))
    } else if magnitude >= 1e4 {
        format!("{}k", trim_decimals(format!("{:.2}", value / 1e3)))
    } else {
        trim_decimals(format!("{value:.3}"))
    }
}

fn trim_decimals(text: String) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

// ---------------------------------------------------------------------------------------------
// Drawing, generic over the PNG and SVG backends

type DrawResult<T, DB> = Result<T, DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn chart_size(chart: &Chart) -> (u32, u32) {
    match &chart.body {
        // Bar groups need room for their system names under them.
        Body::Bars(bars) => (WIDTH.max(300 + 120 * bars.values.len() as u32), HEIGHT),
        Body::Lines(_) => (WIDTH, HEIGHT),
    }
}

fn write_chart(chart: &Chart, dir: &Path) -> Result<[PathBuf; 2], PlotError> {
    let size = chart_size(chart);
    let png = dir.join(format!("{}.png", chart.stem));
    let root = BitMapBackend::new(&png, size).into_drawing_area();
    draw(&root, chart)
        .and_then(|_| root.present())
        .map_err(|e| draw_error(&png, e))?;
    drop(root);
    let svg = dir.join(format!("{}.svg", chart.stem));
    let root = SVGBackend::new(&svg, size).into_drawing_area();
    draw(&root, chart)
        .and_then(|_| root.present())
        .map_err(|e| draw_error(&svg, e))?;
    drop(root);
    Ok([png, svg])
}

fn draw_error<E: std::error::Error + Send + Sync>(
    path: &Path,
    e: DrawingAreaErrorKind<E>,
) -> PlotError {
    PlotError::Draw {
        path: path.into(),
        message: e.to_string(),
    }
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> DrawResult<(), DB> {
    root.fill(&WHITE)?;
    let body = draw_header(root, &chart.title, &chart.subtitle)?;
    match &chart.body {
        Body::Lines(lines) => draw_lines(&body, lines),
        Body::Bars(bars) => draw_bars(&body, bars),
    }
}

fn text_style(size: u32, anchor: Pos) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).pos(anchor)
}

/// Title and setting line; returns the area below them.
fn draw_header<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    subtitle: &str,
) -> DrawResult<DrawingArea<DB, Shift>, DB> {
    let (header, body) = root.split_vertically(64);
    let center = header.dim_in_pixel().0 as i32 / 2;
    let top = Pos::new(HPos::Center, VPos::Top);
    header.draw_text(title, &text_style(22, top), (center, 10))?;
    header.draw_text(
        subtitle,
        &text_style(14, top).color(&RGBColor(90, 90, 90)),
        (center, 40),
    )?;
    Ok(body)
}

/// How a legend entry shows its series.
enum Swatch {
    Line(Marker),
    Block,
}

struct LegendEntry<'a> {
    label: &'a str,
    color: RGBColor,
    swatch: Swatch,
}

const LEGEND_FONT: u32 = 14;

/// Splits off a legend column on the right, wide enough for the longest label, so the legend
/// never hides data (offload charts have eighteen lines).
fn split_for_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    let style = text_style(LEGEND_FONT, Pos::new(HPos::Left, VPos::Center));
    let widest = entries
        .iter()
        .filter_map(|e| area.estimate_text_size(e.label, &style).ok())
        .map(|(w, _)| w)
        .max()
        .unwrap_or(0);
    let width = area.dim_in_pixel().0;
    let legend_width = (widest + 60).min(width * 2 / 5);
    area.split_horizontally(width - legend_width)
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
) -> DrawResult<(), DB> {
    let height = area.dim_in_pixel().1 as i32;
    let pitch = ((height - 40) / entries.len().max(1) as i32).clamp(8, 22);
    let style = text_style(LEGEND_FONT, Pos::new(HPos::Left, VPos::Center));
    for (i, entry) in entries.iter().enumerate() {
        let y = 24 + i as i32 * pitch;
        match entry.swatch {
            Swatch::Line(marker) => {
                area.draw(&PathElement::new(
                    vec![(6, y), (38, y)],
                    entry.color.stroke_width(2),
                ))?;
                draw_marker(area, (22, y), marker, entry.color)?;
            }
            Swatch::Block => {
                area.draw(&Rectangle::new(
                    [(12, y - 6), (32, y + 6)],
                    entry.color.filled(),
                ))?;
            }
        }
        area.draw_text(entry.label, &style, (46, y))?;
    }
    Ok(())
}

/// Markers are shapes in pixels around an anchor in any coordinate system, so the same code
/// draws them on the data and in the legend.
fn draw_marker<DB: DrawingBackend, CT: CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    at: CT::From,
    marker: Marker,
    color: RGBColor,
) -> DrawResult<(), DB> {
    let anchor = EmptyElement::at(at);
    match marker {
        Marker::Circle => area.draw(&(anchor + Circle::new((0, 0), 4, color.filled()))),
        Marker::Triangle => area.draw(&(anchor + TriangleMarker::new((0, 0), 5, color.filled()))),
        Marker::Square => area.draw(&(anchor + Rectangle::new([(-4, -4), (4, 4)], color.filled()))),
        Marker::Cross => area.draw(&(anchor + Cross::new((0, 0), 4, color.stroke_width(2)))),
    }
}

type Plane<'a, DB> = ChartContext<'a, DB, Cartesian2d<Axis, Axis>>;

fn plane<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    x: &Axis,
    y: &Axis,
    (x_desc, y_desc): (&str, &str),
    x_grid: bool,
) -> DrawResult<Plane<'a, DB>, DB> {
    let mut chart = ChartBuilder::on(area)
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x.clone(), y.clone())?;
    let x_label = |v: &f64| x.label(*v);
    let y_label = |v: &f64| y.label(*v);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .bold_line_style(RGBColor(205, 205, 205))
        .light_line_style(RGBColor(238, 238, 238));
    if !x_grid {
        mesh.disable_x_mesh();
    }
    mesh.draw()?;
    Ok(chart)
}

fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &LineChart,
) -> DrawResult<(), DB> {
    let entries: Vec<LegendEntry> = chart
        .lines
        .iter()
        .map(|l| LegendEntry {
            label: &l.label,
            color: l.look.color,
            swatch: Swatch::Line(l.look.marker),
        })
        .collect();
    let (plot_area, legend_area) = split_for_legend(area, &entries);
    let mut plane = plane(
        &plot_area,
        &chart.x,
        &chart.y,
        (chart.x_desc, chart.y_desc),
        true,
    )?;
    for line in &chart.lines {
        let style = line.look.color.stroke_width(2);
        plane.draw_series(LineSeries::new(line.points.iter().copied(), style))?;
        for point in &line.points {
            draw_marker(
                plane.plotting_area(),
                *point,
                line.look.marker,
                line.look.color,
            )?;
        }
    }
    draw_legend(&legend_area, &entries)
}

/// Bar colours for post-send, post-receive, wait.
const PART_COLORS: [RGBColor; 3] = [PALETTE[0], PALETTE[1], PALETTE[2]];

fn draw_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &BarChart,
) -> DrawResult<(), DB> {
    let entries: Vec<LegendEntry> = chart
        .parts
        .iter()
        .zip(PART_COLORS)
        .map(|(part, color)| LegendEntry {
            label: part,
            color,
            swatch: Swatch::Block,
        })
        .collect();
    let (plot_area, legend_area) = split_for_legend(area, &entries);
    let mut plane = plane(&plot_area, &chart.x, &chart.y, ("", chart.y_desc), false)?;
    let bar_width = 0.8 / chart.parts.len() as f64;
    let value_style = text_style(12, Pos::new(HPos::Center, VPos::Bottom));
    for (group, values) in chart.values.iter().enumerate() {
        for (part, value) in values.iter().enumerate() {
            let left = group as f64 - 0.4 + part as f64 * bar_width;
            let right = left + bar_width * 0.9;
            let bar = Rectangle::new([(left, 0.0), (right, *value)], PART_COLORS[part].filled());
            plane.draw_series(std::iter::once(bar))?;
            let top = ((left + right) / 2.0, *value);
            plane.plotting_area().draw(&Text::new(
                format_value(*value),
                top,
                value_style.clone(),
            ))?;
        }
    }
    draw_legend(&legend_area, &entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::sample_report;

    const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

    #[test]
    fn writes_png_and_svg_for_every_chart_with_data() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_plots(&sample_report(), dir.path()).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for stem in [
            "latency",
            "bw",
            "bibw",
            "msgrate",
            "overhead",
            "overlap-throughput",
            "overlap-availability",
            "overlap-effective",
            "offload",
        ] {
            assert!(
                names.contains(&format!("{stem}.png")),
                "{stem}.png missing: {names:?}"
            );
            assert!(
                names.contains(&format!("{stem}.svg")),
                "{stem}.svg missing: {names:?}"
            );
        }
        for path in &written {
            let bytes = std::fs::read(path).unwrap();
            assert!(!bytes.is_empty(), "{} is empty", path.display());
            if path.extension().unwrap() == "png" {
                assert!(
                    bytes.starts_with(PNG_MAGIC),
                    "{} is not a PNG",
                    path.display()
                );
            } else {
                assert!(
                    String::from_utf8_lossy(&bytes).contains("<svg"),
                    "{}",
                    path.display()
                );
            }
        }
        if let Some(keep) = std::env::var_os("NICMSG_BENCH_KEEP_PLOTS") {
            for path in &written {
                std::fs::copy(path, Path::new(&keep).join(path.file_name().unwrap())).unwrap();
            }
        }
    }

    #[test]
    fn nothing_measured_writes_nothing() {
        let mut report = sample_report();
        report.series.retain(|s| !view::has_data(s));
        let dir = tempfile::tempdir().unwrap();
        assert!(write_plots(&report, dir.path()).unwrap().is_empty());
    }

    #[test]
    fn size_axis_ticks_are_powers_of_two_with_zero_at_the_left_edge() {
        let axis = Axis::sizes(&[0.0, 1.0, 64.0, 4.0 * 1024.0 * 1024.0]);
        let labels: Vec<String> = axis.ticks.iter().map(|t| axis.label(*t)).collect();
        assert_eq!(labels.first().map(String::as_str), Some("0"));
        assert!(labels.contains(&"1".to_string()), "{labels:?}");
        assert!(labels.contains(&"1K".to_string()) || labels.contains(&"4K".to_string()));
        assert!(labels.len() <= 13, "{labels:?}");
        // Size 0 is drawn at its tick, left of size 1.
        assert_eq!(axis.fraction_of(0.0), axis.fraction_of(axis.ticks[0]));
        assert!(axis.fraction_of(0.0) < axis.fraction_of(1.0));
        assert!(axis.fraction_of(0.0) > 0.0 && axis.fraction_of(4194304.0) < 1.0);
    }

    #[test]
    fn tick_numbers_have_no_float_noise() {
        assert_eq!(format_tick(0.1 + 0.2), "0.3");
        assert_eq!(format_tick(250.0), "250");
        assert_eq!(format_tick(12_000.0), "12k");
        assert_eq!(format_tick(1_500_000.0), "1.5M");
        assert_eq!(nice_step(0.13), 0.2);
        assert_eq!(nice_step(130.0), 200.0);
    }

    #[test]
    fn missing_font_names_the_package_to_install() {
        let error = find_font(&["/nonexistent/font.ttf"]).unwrap_err();
        assert!(
            error.contains("apt-get install fonts-dejavu-core"),
            "{error}"
        );
        assert!(error.contains("/nonexistent/font.ttf"), "{error}");
    }

    #[test]
    fn offload_positions_are_parsed() {
        assert_eq!(offload_position("nicmsg-thread-pre15"), Some(15));
        assert_eq!(offload_position("nicmsg-thread"), None);
    }
}
