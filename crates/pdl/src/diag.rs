//! Compiler errors and their rendering in the manner of rustc:
//!
//! ```text
//! error: undeclared variable `j`
//!  --> ping.pdl:12:5
//!    |
//! 12 |     j = 0;
//!    |     ^ not declared in any VAR section
//!    = note: names are case-insensitive
//! ```
//!
//! Rendering never panics, whatever the span: positions past the end or inside a character are
//! clamped, so a wrong span gives a wrong caret, never a crash.

use std::fmt::Write as _;

/// A range of bytes of the source, `start..end`. Positions are `u32` because sources are at most
/// [`crate::limits::MAX_SOURCE_BYTES`] long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        // Sources longer than u32::MAX never get here (the compiler refuses them first);
        // saturating keeps this total anyway.
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Self {
            start: clamp(start),
            end: clamp(end.max(start)),
        }
    }

    /// The span covering both `self` and `other`.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

/// One compile error: a message, the span of the culprit with a short label under the caret,
/// and notes printed after the snippet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub message: String,
    pub span: Span,
    pub label: String,
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn error(span: Span, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            span,
            label: String::new(),
            notes: Vec::new(),
        }
    }

    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    #[must_use]
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Line and column (both from 1; the column counts characters) of the span's start.
    pub fn line_col(&self, source: &str) -> (usize, usize) {
        line_col(source, self.span.start as usize)
    }

    /// The error as rustc prints one: message, `--> file:line:col`, the source line and a caret
    /// under the culprit, then the notes.
    pub fn render(&self, file: &str, source: &str) -> String {
        let start = floor_boundary(source, self.span.start as usize);
        let (line, col) = line_col(source, start);
        let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = source[start..]
            .find('\n')
            .map_or(source.len(), |i| start + i);
        let text = source[line_start..line_end].trim_end_matches('\r');
        let end = floor_boundary(source, (self.span.end as usize).clamp(start, line_end));

        // Tabs are shown as four spaces, and the caret is placed under the shown text.
        let shown = |s: &str| s.replace('\t', "    ");
        let before = shown(&source[line_start..start]).chars().count();
        let under = shown(&source[start..end]).chars().count().max(1);
        let number = line.to_string();
        let gutter = " ".repeat(number.len());

        let mut out = String::new();
        let _ = writeln!(out, "error: {}", self.message);
        let _ = writeln!(out, "{gutter}--> {file}:{line}:{col}");
        let _ = writeln!(out, "{gutter} |");
        let _ = writeln!(out, "{number} | {}", shown(text));
        let caret = format!("{}{}", " ".repeat(before), "^".repeat(under));
        if self.label.is_empty() {
            let _ = writeln!(out, "{gutter} | {caret}");
        } else {
            let _ = writeln!(out, "{gutter} | {caret} {}", self.label);
        }
        for note in &self.notes {
            let _ = writeln!(out, "{gutter} = note: {note}");
        }
        out
    }
}

/// All the errors of one file, then a summary line, as the CLI prints them.
pub fn render_all(file: &str, source: &str, diagnostics: &[Diagnostic]) -> String {
    let mut out = String::new();
    for d in diagnostics {
        out.push_str(&d.render(file, source));
        out.push('\n');
    }
    let count = diagnostics.len();
    let plural = if count == 1 { "" } else { "s" };
    let _ = writeln!(
        out,
        "error: could not compile `{file}` due to {count} error{plural}"
    );
    out
}

/// Line and column (from 1) of byte `pos` (clamped to the source and to a character start).
pub fn line_col(source: &str, pos: usize) -> (usize, usize) {
    let pos = floor_boundary(source, pos);
    let before = &source[..pos];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = source[line_start..pos].chars().count() + 1;
    (line, col)
}

/// The largest character boundary at or before `pos`, within the source.
fn floor_boundary(source: &str, pos: usize) -> usize {
    let mut pos = pos.min(source.len());
    while !source.is_char_boundary(pos) {
        pos -= 1;
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caret_is_under_the_span_and_tabs_count_as_four_columns() {
        let source = "a\n\tbb = 1;\n";
        let d = Diagnostic::error(Span::new(3, 5), "undeclared variable `bb`").label("here");
        let text = d.render("t.pdl", source);
        assert_eq!(
            text,
            "error: undeclared variable `bb`\n --> t.pdl:2:2\n  |\n2 |     bb = 1;\n  |     ^^ here\n"
        );
    }

    #[test]
    fn spans_past_the_end_or_inside_a_character_do_not_panic() {
        let source = "é\nx";
        for (start, end) in [(0, 100), (1, 1), (100, 200), (3, 2), (2, 3)] {
            let d = Diagnostic {
                message: "m".into(),
                span: Span {
                    start: start as u32,
                    end: end as u32,
                },
                label: String::new(),
                notes: vec!["n".into()],
            };
            let text = d.render("f", source);
            assert!(text.contains("--> f:"), "{text}");
        }
        assert_eq!(line_col("", 10), (1, 1));
    }
}
