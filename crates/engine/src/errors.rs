//! Transport errors, said with their errno: the driver counts every one (`NICMSG_STATS`,
//! "transport errors") and logs the first and then every [`LOG_EVERY`]th through `tracing`
//! (`NICMSG_LOG=warn` shows them).
//!
//! Why not all of them: an error that persists (a full queue's `ENOBUFS`, `ENETUNREACH` on an
//! interface gone down, `EPERM` from a firewall rule) repeats at every turn of the engine,
//! hundreds of thousands of times a second, and a line each would flood stderr and slow the
//! very turns that hit it (formatting and writing a line costs microseconds, a turn less). The
//! first line says what happened, the count how often; every thousandth shows the error goes on
//! and which errno it is by then.

use std::io;

/// One transport error in this many is logged after the first.
pub const LOG_EVERY: u64 = 1000;

/// Whether the `count`th transport error (counting from 1) is logged.
pub fn logged(count: u64) -> bool {
    count == 1 || count.is_multiple_of(LOG_EVERY)
}

/// Logs `error`, the `count`th transport error, if [`logged`] says so; `operation` is what
/// failed ("send", "receive").
pub fn log_transport_error(count: u64, operation: &'static str, error: &io::Error) {
    if !logged(count) {
        return;
    }
    tracing::warn!(
        operation,
        errno = error.raw_os_error(),
        %error,
        count,
        "transport {operation} failed ({count} transport errors so far; every {LOG_EVERY}th \
         is logged after the first)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn the_first_and_every_thousandth_are_logged() {
        let counts: Vec<u64> = (1..=5000).filter(|&n| logged(n)).collect();
        assert_eq!(counts, [1, 1000, 2000, 3000, 4000, 5000]);
    }

    /// The line names the operation, the errno and its text.
    #[test]
    fn a_logged_error_says_its_errno() {
        let lines = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = Arc::clone(&lines);
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || Writer(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let error = io::Error::from_raw_os_error(libc::ENOBUFS);
            log_transport_error(1, "send", &error);
            log_transport_error(2, "send", &error);
            log_transport_error(1000, "receive", &io::Error::from_raw_os_error(libc::EPERM));
        });
        let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
        let logged: Vec<&str> = text.lines().collect();
        assert_eq!(logged.len(), 2, "{text}");
        assert!(logged[0].contains("WARN"), "{text}");
        assert!(logged[0].contains("transport send failed"), "{text}");
        assert!(
            logged[0].contains(&format!("errno={}", libc::ENOBUFS)),
            "{text}"
        );
        assert!(logged[0].contains("No buffer space"), "{text}");
        assert!(
            logged[1].contains("transport receive failed (1000"),
            "{text}"
        );
        assert!(
            logged[1].contains(&format!("errno={}", libc::EPERM)),
            "{text}"
        );
    }

    struct Writer(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Writer {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
}
