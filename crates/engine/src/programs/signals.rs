//! The locks and flags of PANIC's programs (the paper's section 3.3): synchronisation between a
//! host and the programs of its engine without interrupts. The host sets locks and clears
//! flags; programs clear locks and set flags. Each program has 64 of each, bits of one word,
//! so both sides change them with single atomic operations and never block each other.

use std::sync::atomic::{AtomicU64, Ordering};

/// Programs with locks and flags at once, counted by id since the engine started (an entry is
/// claimed by the first lock or flag operation on a program and kept: a host may set a lock
/// before it loads the program, and read a flag after unloading it). Twice the VM's program
/// slots, so reloading every program under a new name once still fits.
pub const SIGNAL_PROGRAMS: usize = 64;

/// Locks or flags per program: the bits of one word (the VM checks numbers 0 to 63).
pub const SIGNALS_PER_PROGRAM: u8 = 64;

const CLAIMED: u64 = 1 << 32;

struct Entry {
    /// `CLAIMED | program id`, or 0 while free.
    program: AtomicU64,
    locks: AtomicU64,
    flags: AtomicU64,
}

/// Why a lock or flag cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignalError {
    #[error("lock or flag {0} is out of range (0 to 63)")]
    OutOfRange(u8),
    #[error("locks and flags are kept for at most {SIGNAL_PROGRAMS} programs")]
    TooManyPrograms,
}

/// The lock and flag words of every program, shared by the host and the engine. A host waits
/// for a flag by polling it (`nicmsg::Programs::wait_flag`), so an engine that dies cannot
/// leave it asleep.
pub struct Signals {
    entries: Box<[Entry]>,
}

impl Default for Signals {
    fn default() -> Self {
        Self {
            entries: (0..SIGNAL_PROGRAMS)
                .map(|_| Entry {
                    program: AtomicU64::new(0),
                    locks: AtomicU64::new(0),
                    flags: AtomicU64::new(0),
                })
                .collect(),
        }
    }
}

impl Signals {
    /// The entry of `program`, claimed if it has none yet.
    fn entry(&self, program: u32) -> Result<&Entry, SignalError> {
        let wanted = CLAIMED | u64::from(program);
        for entry in self.entries.iter() {
            match entry
                .program
                .compare_exchange(0, wanted, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(entry),
                Err(current) if current == wanted => return Ok(entry),
                Err(_) => continue,
            }
        }
        Err(SignalError::TooManyPrograms)
    }

    fn bit(number: u8) -> Result<u64, SignalError> {
        if number < SIGNALS_PER_PROGRAM {
            Ok(1 << number)
        } else {
            Err(SignalError::OutOfRange(number))
        }
    }

    /// Host: takes lock `number` of `program` (a program sees `LOCKED(number)` true until it
    /// clears it).
    pub fn set_lock(&self, program: u32, number: u8) -> Result<(), SignalError> {
        let bit = Self::bit(number)?;
        self.entry(program)?.locks.fetch_or(bit, Ordering::AcqRel);
        Ok(())
    }

    /// Host: clears flag `number` of `program`.
    pub fn clear_flag(&self, program: u32, number: u8) -> Result<(), SignalError> {
        let bit = Self::bit(number)?;
        self.entry(program)?.flags.fetch_and(!bit, Ordering::AcqRel);
        Ok(())
    }

    /// Whether flag `number` of `program` is set.
    pub fn flag(&self, program: u32, number: u8) -> Result<bool, SignalError> {
        let bit = Self::bit(number)?;
        Ok(self.entry(program)?.flags.load(Ordering::Acquire) & bit != 0)
    }

    /// Whether lock `number` of `program` is held by the host.
    pub fn lock(&self, program: u32, number: u8) -> Result<bool, SignalError> {
        let bit = Self::bit(number)?;
        Ok(self.entry(program)?.locks.load(Ordering::Acquire) & bit != 0)
    }

    /// Engine: sets flag `number` of `program`. False if the program has no room for signals
    /// (counted by the caller).
    pub fn set_flag(&self, program: u32, number: u8) -> bool {
        Self::bit(number)
            .and_then(|bit| {
                self.entry(program)?.flags.fetch_or(bit, Ordering::AcqRel);
                Ok(())
            })
            .is_ok()
    }

    /// Engine: clears lock `number` of `program`. False as for [`Signals::set_flag`].
    pub fn clear_lock(&self, program: u32, number: u8) -> bool {
        Self::bit(number)
            .and_then(|bit| {
                self.entry(program)?.locks.fetch_and(!bit, Ordering::AcqRel);
                Ok(())
            })
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_programs_each_move_their_half() {
        let signals = Signals::default();
        signals.set_lock(7, 3).unwrap();
        assert!(signals.lock(7, 3).unwrap());
        assert!(signals.clear_lock(7, 3));
        assert!(!signals.lock(7, 3).unwrap());
        assert!(!signals.flag(7, 63).unwrap());
        assert!(signals.set_flag(7, 63));
        assert!(signals.flag(7, 63).unwrap());
        signals.clear_flag(7, 63).unwrap();
        assert!(!signals.flag(7, 63).unwrap());
        assert!(
            !signals.flag(8, 63).unwrap(),
            "programs have words of their own"
        );
        assert_eq!(signals.set_lock(7, 64), Err(SignalError::OutOfRange(64)));
    }

    #[test]
    fn programs_beyond_the_limit_are_refused_not_mixed_up() {
        let signals = Signals::default();
        for program in 0..SIGNAL_PROGRAMS as u32 {
            signals.set_lock(program, 0).unwrap();
        }
        assert_eq!(
            signals.set_lock(SIGNAL_PROGRAMS as u32, 0),
            Err(SignalError::TooManyPrograms)
        );
        assert!(!signals.set_flag(SIGNAL_PROGRAMS as u32, 0));
        assert!(signals.lock(0, 0).unwrap());
    }
}
