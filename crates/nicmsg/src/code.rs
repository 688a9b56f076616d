//! The result codes of the C ABI, defined once: each row gives the code's value, its name in
//! `include/nicmsg.h` and the text `nicmsg_error_string` returns for it. [`Error::code`]
//! (crate::Error::code), the `NICMSG_*` constants of [`crate::capi`] and `nicmsg_error_string`
//! are all generated from this table, and a test (`tests/header.rs`) compares it with the
//! header's `enum nicmsg_result`, so a code added here and not there (or the other way round)
//! fails the build's tests.

use std::ffi::CStr;

macro_rules! result_codes {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident = $value:literal, $c_name:ident, $text:literal;
    )*) => {
        /// A result code of the C ABI (`enum nicmsg_result` in `include/nicmsg.h`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum Code {
            $($(#[doc = $doc])* $variant = $value,)*
        }

        impl Code {
            /// Every code, in the order of the table.
            pub const ALL: &'static [Code] = &[$(Code::$variant),*];

            /// The code's name in the C header, e.g. `NICMSG_ERR_TRUNCATE`.
            pub const fn c_name(self) -> &'static str {
                match self {
                    $(Code::$variant => stringify!($c_name),)*
                }
            }

            /// What the code means, as `nicmsg_error_string` says it.
            pub const fn description(self) -> &'static CStr {
                match self {
                    $(Code::$variant => $text,)*
                }
            }

            /// The code with this value, if there is one.
            pub const fn from_value(value: i32) -> Option<Code> {
                match value {
                    $($value => Some(Code::$variant),)*
                    _ => None,
                }
            }
        }

        /// The codes under the names the C header gives them.
        pub mod c {
            $(
                #[doc = concat!("`", stringify!($c_name), "`: see [`Code::", stringify!($variant), "`](super::Code::", stringify!($variant), ").")]
                pub const $c_name: std::ffi::c_int = super::Code::$variant as std::ffi::c_int;
            )*
        }
    };
}

result_codes! {
    /// The operation succeeded.
    Success = 0, NICMSG_SUCCESS, c"success";
    /// The receive buffer is shorter than the message; nothing was written.
    Truncate = 1, NICMSG_ERR_TRUNCATE, c"message truncated: the receive buffer is too short";
    /// The peer is gone (its process ended, or it answered nothing for the peer timeout).
    PeerUnreachable = 2, NICMSG_ERR_PEER_UNREACHABLE, c"peer unreachable";
    /// The operation was cancelled and did not happen.
    Cancelled = 3, NICMSG_ERR_CANCELLED, c"operation cancelled";
    /// A rank outside the job.
    Rank = 4, NICMSG_ERR_RANK, c"invalid rank";
    /// Too many outstanding operations (or memory regions).
    TableFull = 5, NICMSG_ERR_TABLE_FULL, c"table full: complete some operations first";
    /// An unusable buffer: more than 16 pieces, or a request already completed.
    Buffer = 6, NICMSG_ERR_BUFFER, c"invalid buffer";
    /// A tag above `NICMSG_TAG_UB`.
    Tag = 9, NICMSG_ERR_TAG, c"invalid tag";
    /// The library is not initialised.
    NotInitialised = 10, NICMSG_ERR_NOT_INITIALISED, c"not initialised";
    /// Joining the job failed (details on stderr).
    Bootstrap = 11, NICMSG_ERR_BOOTSTRAP, c"bootstrap failed (see stderr)";
    /// An invalid `NICMSG_*` setting.
    Config = 12, NICMSG_ERR_CONFIG, c"invalid configuration";
    /// A system call failed.
    Io = 13, NICMSG_ERR_IO, c"I/O error";
    /// A null pointer or an invalid argument (C ABI only).
    Arg = 14, NICMSG_ERR_ARG, c"invalid argument";
    /// `nicmsg_finalize` with requests outstanding (C ABI only).
    Pending = 15, NICMSG_ERR_PENDING, c"requests still pending";
    /// The engine stopped (a bug in nicmsg): pending operations cannot complete.
    EngineFailed = 16, NICMSG_ERR_INTERNAL, c"internal error: the engine stopped (a bug in nicmsg); pending operations cannot complete";
    /// A panic inside the library was caught at the C ABI's boundary (a bug in nicmsg; its
    /// message went to stderr). The call did not complete; the communicator may be unusable.
    Panic = 17, NICMSG_ERR_PANIC, c"internal error: a panic was caught at the C ABI boundary (a bug in nicmsg; its message is on stderr)";
    /// An engine refused a request about its PANIC programs (a module it rejected, no such
    /// program, programs or remote requests turned off, a trap): the reason is on stderr.
    Program = 18, NICMSG_ERR_PROGRAM, c"an engine refused the program request (reason on stderr)";
    /// Another thread is inside a call on the same communicator (or one of its requests) or
    /// socket: one thread at a time (C ABI only).
    Busy = 19, NICMSG_ERR_BUSY, c"busy: another thread is inside a call on this communicator or socket";
}

impl From<Code> for std::ffi::c_int {
    fn from(code: Code) -> Self {
        code as std::ffi::c_int
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.description().to_string_lossy())
    }
}

/// `nicmsg_error_string` for a value no code has.
pub const UNKNOWN: &CStr = c"unknown result code";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_names_are_unique_and_round_trip() {
        let mut values: Vec<i32> = Code::ALL.iter().map(|&c| c as i32).collect();
        values.sort_unstable();
        values.dedup();
        assert_eq!(values.len(), Code::ALL.len(), "two codes share a value");
        for &code in Code::ALL {
            assert_eq!(Code::from_value(code as i32), Some(code));
            assert!(code.c_name().starts_with("NICMSG_"));
            assert!(!code.description().is_empty());
        }
        assert_eq!(Code::from_value(7), None);
        assert_eq!(Code::from_value(-1), None);
        assert_ne!(Code::Panic, Code::EngineFailed);
        assert_eq!(c::NICMSG_ERR_PANIC, 17);
    }
}
