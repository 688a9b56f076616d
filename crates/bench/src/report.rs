//! The written results of a run: `bench-report.md` (environment, targets, one section per
//! pattern with its table, plots, missing systems and exact commands) and a plain-text
//! summary for the terminal.
//!
//! Tables put one row per message size and one column per system; each value is the median,
//! and beside every non-nicmsg value its ratio to nicmsg's at the same size (nicmsg-inline,
//! else nicmsg-thread), so "1.30x" on a latency row means 30 % slower than nicmsg.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use crate::model::{Environment, Outcome, Pattern, Report, Series};
use crate::system::System;
use crate::targets::{self, TargetCheck};
use crate::view::{self, format_ratio, format_size, format_value, Headline};

/// What LM's figures compare with: standard kernel UDP, one datagram per message.
const LM_REFERENCE: System = System::UdpFrag;

/// The report's file name inside the output directory.
pub const MARKDOWN_FILE: &str = "bench-report.md";

/// Writes `dir/bench-report.md` (creating `dir`) and returns its path. `plots` are the files
/// [`crate::plot::write_plots`] wrote; PNGs are embedded in their pattern's section, linked
/// relative to `dir` when inside it.
pub fn write_markdown(report: &Report, plots: &[PathBuf], dir: &Path) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(MARKDOWN_FILE);
    std::fs::write(&path, render_markdown(report, plots, dir))?;
    Ok(path)
}

/// The text [`write_markdown`] writes.
pub fn render_markdown(report: &Report, plots: &[PathBuf], dir: &Path) -> String {
    let mut out = String::from("# nicmsg benchmark report\n\n");
    environment_section(&mut out, &report.environment);
    targets_section(&mut out, &targets::evaluate(report));
    let mut embedded = Vec::new();
    for pattern in Pattern::ALL {
        if report.series.iter().any(|s| s.pattern == pattern) {
            embedded.extend(pattern_section(&mut out, report, pattern, plots, dir));
        }
    }
    other_plots_section(&mut out, plots, &embedded, dir);
    reproduce_section(&mut out, &report.environment);
    out
}

/// Medians per pattern with ratios to nicmsg, missing systems in one line each, and the
/// targets: what a person watching `nicmsg bench` wants before opening the report.
pub fn terminal_summary(report: &Report) -> String {
    let mut out = format!(
        "nicmsg bench: {}\n",
        view::environment_line(&report.environment)
    );
    for pattern in Pattern::ALL {
        let series = view::measured(report, pattern);
        if let Some((caption, table)) = pattern_table(&series, pattern) {
            let _ = write!(out, "\n{}: {caption}\n", pattern.name());
            let chunks: Vec<String> = table
                .column_chunks(TERMINAL_COLUMNS)
                .iter()
                .map(Table::to_text)
                .collect();
            out.push_str(&chunks.join("\n"));
        }
        for s in view::not_measured(report, pattern) {
            let _ = writeln!(
                out,
                "{}: {} {}",
                pattern.name(),
                s.system,
                view::outcome_summary(&s.outcome)
            );
        }
    }
    out.push_str("\ntargets:\n");
    let rows = targets::evaluate(report)
        .into_iter()
        .map(|c| vec![c.verdict.to_string(), c.name, c.goal, c.measured])
        .collect();
    let table = Table {
        header: vec![],
        rows,
    };
    out.push_str(&table.to_text());
    out
}

/// Systems per terminal table before it is split, so lines stay readable in 120 columns.
const TERMINAL_COLUMNS: usize = 6;

// ---------------------------------------------------------------------------------------------
// Tables shared by the markdown and the terminal

/// A table of text cells; the first column is a key (size, system), the others numbers.
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// The same table in pieces of at most `columns` value columns, each with the key column.
    fn column_chunks(&self, columns: usize) -> Vec<Table> {
        let values = self.header.len().saturating_sub(1);
        if values <= columns {
            return vec![self.select(1..self.header.len())];
        }
        (1..self.header.len())
            .step_by(columns)
            .map(|start| self.select(start..(start + columns).min(self.header.len())))
            .collect()
    }

    fn select(&self, range: std::ops::Range<usize>) -> Table {
        let pick = |row: &Vec<String>| {
            let mut picked = vec![row[0].clone()];
            picked.extend(row[range.clone()].iter().cloned());
            picked
        };
        Table {
            header: pick(&self.header),
            rows: self.rows.iter().map(pick).collect(),
        }
    }

    /// Aligned columns, key left, values right; an empty header is not printed.
    fn to_text(&self) -> String {
        let all: Vec<&Vec<String>> = std::iter::once(&self.header).chain(&self.rows).collect();
        let columns = all.iter().map(|r| r.len()).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                all.iter()
                    .filter_map(|r| r.get(c))
                    .map(|t| t.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in all.into_iter().filter(|r| !r.is_empty()) {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(c, text)| match c {
                    0 => format!("{text:<w$}", w = widths[c]),
                    _ => format!("{text:>w$}", w = widths[c]),
                })
                .collect();
            let _ = writeln!(out, "  {}", cells.join("  ").trim_end());
        }
        out
    }

    fn to_markdown(&self) -> String {
        let row = |cells: &[String]| {
            let escaped: Vec<String> = cells.iter().map(|c| escape_cell(c)).collect();
            format!("| {} |\n", escaped.join(" | "))
        };
        let mut out = row(&self.header);
        let rule: Vec<&str> = (0..self.header.len())
            .map(|c| if c == 0 { "---" } else { "---:" })
            .collect();
        let _ = writeln!(out, "|{}|", rule.join("|"));
        for cells in &self.rows {
            out.push_str(&row(cells));
        }
        out
    }
}

/// A pattern's table and its caption (what the numbers are), if any series has data.
fn pattern_table(series: &[&Series], pattern: Pattern) -> Option<(String, Table)> {
    if series.is_empty() {
        return None;
    }
    let reference = view::reference(series).map(|s| s.system.as_str());
    let versus = |ratio_of: &str| {
        reference
            .map(|r| format!("; (1.10x) = {}", ratio_of.replace("{r}", r)))
            .unwrap_or_default()
    };
    match pattern {
        Pattern::Overhead => Some((
            format!(
                "median time per call in us{}",
                versus("total / {r}'s total")
            ),
            overhead_table(series, reference),
        )),
        Pattern::Overlap | Pattern::MpiOverlap => Some((
            "one row per amount of computation per iteration".to_string(),
            overlap_table(series),
        )),
        Pattern::Lm => Some((
            format!(
                "ping-pong (LM figure 4): half round trip in us, bandwidth in MB/s, CPUs busy \
                 (looper, whole machine), CPU us per MB moved, bytes copied in user space per \
                 byte received and transfers placed (rank 0's receives); (0.50x) = value / \
                 {}'s at the same size",
                LM_REFERENCE.name()
            ),
            lm_table(series),
        )),
        Pattern::PanicCost => Some((
            "the engine's handling of one program message, by phase, in us (medians; each \
             phase includes about one clock read)"
                .to_string(),
            panic_cost_table(series),
        )),
        Pattern::PanicRtt | Pattern::PanicCollectives | Pattern::PanicKv => Some((
            format!(
                "{} in us; (0.50x) = median / the same engine mode's {}",
                match pattern {
                    Pattern::PanicRtt => "round trip",
                    _ => "time per operation",
                },
                match pattern {
                    Pattern::PanicRtt => "plain API ping-pong (api)",
                    Pattern::PanicKv => "host-answered look-up (host)",
                    _ => "host-driven operation (host-...)",
                }
            ),
            panic_table(series, pattern),
        )),
        _ => {
            let headline = view::headline(pattern)?;
            let caption = format!(
                "median {} in {}{}",
                headline.what,
                headline.unit,
                versus("value / {r}'s at the same size")
            );
            Some((caption, size_table(series, headline, reference)))
        }
    }
}

/// Sizes down, systems across: `median (ratio)`.
fn size_table(series: &[&Series], headline: Headline, reference: Option<&str>) -> Table {
    let mut header = vec!["size".to_string()];
    header.extend(series.iter().map(|s| s.system.clone()));
    let reference = series.iter().find(|s| Some(s.system.as_str()) == reference);
    let rows = view::all_sizes(series)
        .into_iter()
        .map(|size| {
            let at = |s: &Series| view::point_at(s, size).and_then(|p| (headline.value)(p));
            let base = reference.and_then(|r| at(r));
            let mut row = vec![format_size(size)];
            row.extend(series.iter().map(|s| {
                let is_reference = reference.is_some_and(|r| r.system == s.system);
                cell(at(s), if is_reference { None } else { base })
            }));
            row
        })
        .collect();
    Table { header, rows }
}

/// "12.3 (1.05x)", "12.3" without a reference, "-" without a value.
fn cell(value: Option<f64>, reference: Option<f64>) -> String {
    match (value, format_ratio(value.unwrap_or(0.0), reference)) {
        (None, _) => "-".to_string(),
        (Some(v), Some(ratio)) => format!("{} ({ratio})", format_value(v)),
        (Some(v), None) => format_value(v),
    }
}

/// EMP table 2: one row per system at 10 KiB (or the size it measured).
fn overhead_table(series: &[&Series], reference: Option<&str>) -> Table {
    let header = [
        "system",
        "size",
        "post-send",
        "post-receive",
        "wait",
        "total",
    ];
    let base = series
        .iter()
        .find(|s| Some(s.system.as_str()) == reference)
        .and_then(|s| view::overhead_point(s))
        .map(view::overhead_total);
    let rows = series
        .iter()
        .filter_map(|s| {
            let point = view::overhead_point(s)?;
            let calls = point
                .overhead
                .map(|o| [o.post_send_us, o.post_recv_us, o.wait_us]);
            let mut row = vec![s.system.clone(), format_size(point.size)];
            row.extend((0..3).map(|i| cell(calls.map(|c| c[i].median), None)));
            let is_reference = Some(s.system.as_str()) == reference;
            row.push(cell(
                Some(view::overhead_total(point)),
                base.filter(|_| !is_reference),
            ));
            Some(row)
        })
        .collect();
    Table {
        header: header.map(String::from).to_vec(),
        rows,
    }
}

/// PANIC's size-swept and single-point patterns: one row per series and size, with the
/// summary, the host's CPU time per operation or the host-timed mean where measured, and the
/// ratio to the same engine mode's reference series ([`view::panic_reference`]).
fn panic_table(series: &[&Series], pattern: Pattern) -> Table {
    let extra = match pattern {
        Pattern::PanicCollectives => "host CPU (median)",
        Pattern::PanicRtt => "host-timed mean",
        _ => "",
    };
    let mut header = ["series", "size", "median", "min", "p99", "max"]
        .map(String::from)
        .to_vec();
    if !extra.is_empty() {
        header.push(extra.to_string());
    }
    header.push("ratio".to_string());
    let mut rows = Vec::new();
    for s in series {
        let reference = view::panic_reference(pattern, &s.system)
            .and_then(|name| series.iter().find(|r| r.system == name));
        for p in &s.points {
            let t = p.time_us;
            let mut row = vec![
                s.system.clone(),
                format_size(p.size),
                format_value(t.median),
                format_value(t.min),
                format_value(t.p99),
                format_value(t.max),
            ];
            if !extra.is_empty() {
                let value = p.host_cpu_us.map(|c| c.median).or(p.host_timed_us);
                row.push(value.map(format_value).unwrap_or_else(|| "-".into()));
            }
            let base = reference
                .and_then(|r| view::point_at(r, p.size))
                .map(|r| r.time_us.median);
            row.push(
                format_ratio(t.median, base)
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "-".into()),
            );
            rows.push(row);
        }
    }
    Table { header, rows }
}

/// LM figure 4 and table 3 as numbers: one row per system and size, compared with standard
/// UDP ([`LM_REFERENCE`]).
fn lm_table(series: &[&Series]) -> Table {
    let header = [
        "system",
        "size",
        "half RTT",
        "MB/s",
        "CPUs busy",
        "CPU us/MB",
        "copied/B",
        "placed",
    ]
    .map(String::from)
    .to_vec();
    let reference = series.iter().find(|s| s.system == LM_REFERENCE.name());
    let mut rows = Vec::new();
    for s in series {
        let compared = reference.filter(|r| r.system != s.system);
        for p in &s.points {
            let base = compared.and_then(|r| view::point_at(r, p.size));
            let cpu_per_mb = p.cpu.map(|c| c.us_per_mbyte);
            rows.push(vec![
                s.system.clone(),
                format_size(p.size),
                cell(Some(p.time_us.median), base.map(|b| b.time_us.median)),
                cell(p.mbytes_per_sec, base.and_then(|b| b.mbytes_per_sec)),
                p.cpu
                    .map_or("-".into(), |c| format!("{:.2}/{}", c.busy_cpus, c.cpus)),
                cell(cpu_per_mb, base.and_then(|b| b.cpu).map(|c| c.us_per_mbyte)),
                p.copies
                    .map_or("-".into(), |c| format!("{:.3}", c.copied_per_byte())),
                p.copies.map_or("-".into(), |c| {
                    format!("{}/{}", c.transfers_placed, c.transfers)
                }),
            ]);
        }
    }
    Table { header, rows }
}

/// PANIC figure 5 as numbers: one row per statement count.
fn panic_cost_table(series: &[&Series]) -> Table {
    let header = [
        "statements",
        "instructions",
        "size",
        "total",
        "demultiplex",
        "interpret",
        "deliver",
        "clock read",
    ]
    .map(String::from)
    .to_vec();
    let mut rows = Vec::new();
    for s in series {
        for p in &s.points {
            let Some(phases) = p.phases else { continue };
            rows.push(vec![
                p.statements.map(|n| n.to_string()).unwrap_or_default(),
                phases.instructions.to_string(),
                format_size(p.size),
                format_value(p.time_us.median),
                format_value(phases.demux_us.median),
                format_value(phases.interpret_us.median),
                format_value(phases.deliver_us.median),
                format_value(phases.clock_read_us),
            ]);
        }
    }
    Table { header, rows }
}

/// EMP figure 6 / RMPP figures 10-11 as numbers: one row per system, size and computation.
fn overlap_table(series: &[&Series]) -> Table {
    let header = [
        "system",
        "size",
        "compute (us)",
        "CPU fraction",
        "throughput (MB/s)",
        "availability",
        "effective (MB/s)",
    ];
    let mut rows = Vec::new();
    for s in series {
        for p in &s.points {
            let Some(o) = p.overlap else { continue };
            rows.push(vec![
                s.system.clone(),
                format_size(p.size),
                p.compute_us.map(format_value).unwrap_or_else(|| "-".into()),
                format!("{:.3}", o.cpu_fraction),
                format_value(o.throughput_mbytes_per_sec),
                format!("{:.3}", o.availability),
                format_value(o.effective_mbytes_per_sec),
            ]);
        }
    }
    Table {
        header: header.map(String::from).to_vec(),
        rows,
    }
}

// ---------------------------------------------------------------------------------------------
// Markdown sections

fn environment_section(out: &mut String, env: &Environment) {
    out.push_str("## Environment\n\n| | |\n|---|---|\n");
    let rows = [
        ("kernel", env.kernel.clone()),
        ("CPU", format!("{} ({} cores)", env.cpu, env.cores)),
        ("network", view::environment_line(env)),
        ("commit", env.commit.clone()),
        ("started", utc_time(env.started_unix)),
        ("command", format!("`{}`", env.command.replace('`', "'"))),
    ];
    for (name, value) in rows {
        let _ = writeln!(out, "| {name} | {} |", escape_cell(&value));
    }
    if env.quick {
        out.push_str(
            "\n> **--quick run**: few repetitions and sizes; the numbers only show that \
             everything runs.\n",
        );
    }
    out.push('\n');
}

fn targets_section(out: &mut String, checks: &[TargetCheck]) {
    out.push_str("## Targets\n\n");
    let rows = checks
        .iter()
        .map(|c| {
            let verdict = match c.verdict {
                targets::Verdict::NotMeasured => c.verdict.to_string(),
                _ => format!("**{}**", c.verdict),
            };
            vec![c.name.clone(), c.goal.clone(), c.measured.clone(), verdict]
        })
        .collect();
    let header = ["target", "goal", "measured", "verdict"]
        .map(String::from)
        .to_vec();
    // Text columns: left-aligned, unlike the number tables.
    let table = Table { header, rows }.to_markdown().replace("---:", "---");
    out.push_str(&table);
    out.push('\n');
}

/// One pattern: plots, table, missing systems, commands. Returns the plots it embedded.
fn pattern_section<'a>(
    out: &mut String,
    report: &Report,
    pattern: Pattern,
    plots: &'a [PathBuf],
    dir: &Path,
) -> Vec<&'a PathBuf> {
    let name = pattern.name();
    let _ = writeln!(out, "## {name}\n");
    let mine: Vec<&PathBuf> = plots
        .iter()
        .filter(|p| plot_pattern(p) == Some(name))
        .collect();
    embed_plots(out, &mine, dir);
    let series = view::measured(report, pattern);
    if let Some((caption, table)) = pattern_table(&series, pattern) {
        let _ = writeln!(out, "{}.\n", capitalized(&caption));
        out.push_str(&table.to_markdown());
        out.push('\n');
    }
    missing_systems(out, &view::not_measured(report, pattern));
    commands(out, report.series.iter().filter(|s| s.pattern == pattern));
    mine
}

/// The pattern a plot file belongs to: `latency.png` and `overlap-availability.png` to
/// `latency` and `overlap`.
fn plot_pattern(plot: &Path) -> Option<&str> {
    let stem = plot.file_stem()?.to_str()?;
    // The longest name that is the stem or begins it before a '-' (`panic-rtt`, not `panic`).
    Pattern::ALL
        .iter()
        .map(|p| p.name())
        .filter(|name| {
            stem == *name
                || stem
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('-'))
        })
        .max_by_key(|name| name.len())
}

/// PNGs as images (every markdown viewer shows them), each followed by a link to its SVG.
fn embed_plots(out: &mut String, plots: &[&PathBuf], dir: &Path) {
    for png in plots
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
    {
        let stem = png
            .file_stem()
            .map(|s| s.to_string_lossy())
            .unwrap_or_default();
        let _ = write!(out, "![{stem}]({})", link(png, dir));
        let svg = png.with_extension("svg");
        if plots.iter().any(|p| **p == svg) {
            let _ = write!(out, " ([SVG]({}))", link(&svg, dir));
        }
        out.push_str("\n\n");
    }
}

fn other_plots_section(out: &mut String, plots: &[PathBuf], embedded: &[&PathBuf], dir: &Path) {
    let others: Vec<&PathBuf> = plots.iter().filter(|p| !embedded.contains(p)).collect();
    if others.is_empty() {
        return;
    }
    out.push_str("## Other plots\n\n");
    for plot in others {
        let _ = writeln!(out, "- [{}]({})", plot.display(), link(plot, dir));
    }
    out.push('\n');
}

/// A plot's link from the report: relative when it lies in the report's directory, so the
/// directory can be moved or published as a whole.
fn link(plot: &Path, dir: &Path) -> String {
    let relative = plot.strip_prefix(dir).unwrap_or(plot);
    relative.to_string_lossy().replace(' ', "%20")
}

fn missing_systems(out: &mut String, series: &[&Series]) {
    if series.is_empty() {
        return;
    }
    out.push_str("Not measured:\n\n");
    for s in series {
        let _ = write!(out, "- `{}`: ", s.system);
        match &s.outcome {
            Outcome::Measured => out.push_str("measured, but no points\n"),
            Outcome::NotInstalled { install } => {
                let _ = writeln!(
                    out,
                    "not installed; to install: {}",
                    view::first_line(install)
                );
            }
            Outcome::Unsupported { reason } => {
                let _ = writeln!(out, "unsupported: {}", view::first_line(reason));
            }
            Outcome::Failed { error } => {
                let _ = writeln!(out, "failed:\n");
                out.push_str(&indented_code_block(error, "text"));
            }
        }
    }
    out.push('\n');
}

/// The exact command of every series of a pattern, measured or not, so each number can be
/// reproduced alone.
fn commands<'a>(out: &mut String, series: impl Iterator<Item = &'a Series>) {
    let mut any = false;
    for s in series.filter(|s| !s.command.trim().is_empty()) {
        if !any {
            out.push_str("Commands:\n\n");
            any = true;
        }
        let label = match s.label == s.system {
            true => String::new(),
            false => format!(", {}", s.label),
        };
        let _ = writeln!(out, "- `{}`{label}:\n", s.system);
        out.push_str(&indented_code_block(&s.command, "sh"));
    }
    if any {
        out.push('\n');
    }
}

/// A fenced block inside a list item; the fence is longer than any backtick run in `text` so
/// that output containing backticks cannot close it early.
fn indented_code_block(text: &str, language: &str) -> String {
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run.max(2) + 1);
    let mut block = format!("  {fence}{language}\n");
    for line in text.trim_end().lines() {
        let _ = writeln!(block, "  {line}");
    }
    let _ = writeln!(block, "  {fence}");
    block
}

fn reproduce_section(out: &mut String, env: &Environment) {
    if env.command.trim().is_empty() {
        return;
    }
    out.push_str("## How to reproduce\n\n");
    if !env.commit.is_empty() {
        let _ = writeln!(out, "Build commit `{}` and run:\n", env.commit);
    }
    let block = indented_code_block(&env.command, "sh");
    // Not inside a list here: drop the list indentation.
    for line in block.lines() {
        let _ = writeln!(out, "{}", line.strip_prefix("  ").unwrap_or(line));
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// Table cells are one line and `|` separates them.
fn escape_cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', "<br>")
}

/// `2023-11-14 22:13:20 UTC` from Unix seconds (Howard Hinnant's civil-from-days), to avoid
/// a date crate for one line of the report.
fn utc_time(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let seconds = unix % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::sample_report;

    #[test]
    fn writes_plots_and_a_markdown_report_that_embeds_them() {
        let dir = tempfile::tempdir().unwrap();
        let report = sample_report();
        let plots = crate::plot::write_plots(&report, dir.path()).unwrap();
        let path = write_markdown(&report, &plots, dir.path()).unwrap();
        assert_eq!(path, dir.path().join(MARKDOWN_FILE));
        let text = std::fs::read_to_string(&path).unwrap();
        for plot in &plots {
            assert!(
                std::fs::metadata(plot).unwrap().len() > 0,
                "{} empty",
                plot.display()
            );
        }
        for expected in [
            "## Environment",
            "## Targets",
            "| 8 B latency vs udp-busy |",
            "![latency](latency.png) ([SVG](latency.svg))",
            "![overlap-availability](overlap-availability.png)",
            "`ucx-tcp`: not installed; to install: apt-get install libucx-dev",
            "`udp-busy`: unsupported: raw UDP has no flow control",
            "fi_getinfo: -61",
            "nicmsg bench latency --system nicmsg-inline",
            "## How to reproduce",
            "Build commit `abc1234`",
            "| 0 | 9.00 | 11.0 (1.22x) |",
            "2023-11-14 22:13:20 UTC",
        ] {
            assert!(
                text.contains(expected),
                "{expected:?} missing from:\n{text}"
            );
        }
        assert!(
            !text.contains(&dir.path().display().to_string()),
            "absolute path in report"
        );
        if let Some(keep) = std::env::var_os("NICMSG_BENCH_KEEP_PLOTS") {
            std::fs::copy(&path, Path::new(&keep).join(MARKDOWN_FILE)).unwrap();
        }
    }

    #[test]
    fn terminal_summary_has_ratios_missing_systems_and_targets() {
        let text = terminal_summary(&sample_report());
        for expected in [
            "nicmsg bench: link netns, MTU 1500 B, limited to 1 Gb/s, commit abc1234",
            "latency: median half round trip in us; (1.10x) = value / nicmsg-inline's at the same size",
            "11.0 (1.22x)",
            "latency: ucx-tcp not installed (install: apt-get install libucx-dev)",
            "overhead: median time per call in us",
            "targets:",
            "8 B latency vs udp-busy",
        ] {
            assert!(
                text.contains(expected),
                "{expected:?} missing from:\n{text}"
            );
        }
        // Offload's eighteen variants are split into tables of at most six.
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(widest < 200, "a line of {widest} characters:\n{text}");
    }

    #[test]
    fn empty_report_still_renders() {
        let text = render_markdown(&Report::default(), &[], Path::new("."));
        assert!(text.contains("## Targets"));
        assert!(!text.contains("## latency"));
        assert!(terminal_summary(&Report::default()).contains("targets:"));
    }

    #[test]
    fn fences_outlast_backticks_in_the_text() {
        let block = indented_code_block("echo ```x```", "sh");
        assert!(block.starts_with("  ````sh\n"), "{block}");
    }

    #[test]
    fn unix_time_in_utc() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_time(1_700_000_000), "2023-11-14 22:13:20 UTC");
    }
}
