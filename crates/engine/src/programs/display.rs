//! What programs `DISPLAY`: kept by the engine, read by the host (`Programs::output`) and by
//! `nicmsg pdl output` (through an `Output` request).

use std::collections::VecDeque;
use std::sync::Mutex;

/// Values kept before the oldest are dropped (and counted): a program displaying in a loop
/// must not grow the engine's memory without bound. 64 Ki values is 1 MiB.
pub const DISPLAY_CAPACITY: usize = 64 * 1024;

/// One value a program displayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shown {
    pub program: u32,
    pub value: i64,
}

/// The line an `Output` answer carries for a value: `program value`, the program as
/// `nicmsg pdl` prints ids (decimal if given at load, hexadecimal if from its name).
impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", nicmsg_vm::ProgramId(self.program), self.value)
    }
}

impl Shown {
    /// Reads a line written by `Display`.
    pub fn parse(line: &str) -> Option<Self> {
        let (program, value) = line.split_once(' ')?;
        let program = match program.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => program.parse().ok()?,
        };
        Some(Self {
            program,
            value: value.parse().ok()?,
        })
    }
}

#[derive(Default)]
struct Log {
    shown: VecDeque<Shown>,
    dropped: u64,
}

/// The display output of every program of one engine, oldest first. A mutex: `DISPLAY` is a
/// program's print statement, not the messaging path, and the host reads the log rarely.
#[derive(Default)]
pub struct Display {
    log: Mutex<Log>,
}

impl Display {
    /// Engine: appends a value, dropping the oldest beyond [`DISPLAY_CAPACITY`].
    pub fn push(&self, shown: Shown) {
        let mut log = self
            .log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if log.shown.len() == DISPLAY_CAPACITY {
            log.shown.pop_front();
            log.dropped += 1;
        }
        log.shown.push_back(shown);
    }

    /// Takes up to `max` values of `program` (every program's if `None`), oldest first, and
    /// how many values were dropped for want of room so far.
    pub fn take(&self, program: Option<u32>, max: usize) -> (Vec<Shown>, u64) {
        let mut log = self
            .log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut taken = Vec::new();
        log.shown.retain(|shown| {
            let wanted = program.is_none_or(|p| p == shown.program) && taken.len() < max;
            if wanted {
                taken.push(*shown);
            }
            !wanted
        });
        (taken, log.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_as_written() {
        for program in [415, 0x8e30_9716] {
            let shown = Shown {
                program,
                value: -42,
            };
            assert_eq!(Shown::parse(&shown.to_string()), Some(shown));
        }
        assert_eq!(Shown::parse("nonsense"), None);
    }

    #[test]
    fn values_are_taken_in_order_per_program_and_the_oldest_dropped() {
        let display = Display::default();
        for value in 0..DISPLAY_CAPACITY as i64 + 2 {
            display.push(Shown {
                program: (value % 2) as u32,
                value,
            });
        }
        let (odd, dropped) = display.take(Some(1), 3);
        assert_eq!(dropped, 2);
        assert_eq!(
            odd.iter().map(|s| s.value).collect::<Vec<_>>(),
            [3, 5, 7],
            "values 0 and 1 were dropped"
        );
        let (rest, _) = display.take(None, usize::MAX);
        assert_eq!(rest.len(), DISPLAY_CAPACITY - 3, "two dropped, three taken");
        assert_eq!(rest[0].value, 2);
    }
}
