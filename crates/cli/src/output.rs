//! Forwarding a rank's stdout/stderr to the launcher's, each line prefixed with `[rank R] `.

use std::io::{self, Read, Write};
use std::thread::{self, JoinHandle};

/// Which of the launcher's streams a rank stream goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A line longer than this (no newline yet) is written out in pieces; only the first piece gets
/// the prefix.
const MAX_PENDING: usize = 64 * 1024;

/// Copies `input` to the launcher's `stream` line by line with `prefix` in front of each line, on
/// a new thread. A last line without a newline gets one at end of input. Calls `done` when
/// `input` reaches its end.
pub fn forward<R, D>(input: R, stream: Stream, prefix: String, done: D) -> JoinHandle<()>
where
    R: Read + Send + 'static,
    D: FnOnce() + Send + 'static,
{
    thread::Builder::new()
        .name(format!("{prefix}{stream:?}"))
        .spawn(move || {
            let sink: fn(&[u8]) = match stream {
                Stream::Stdout => |b| write_all(&mut io::stdout().lock(), b),
                Stream::Stderr => |b| write_all(&mut io::stderr().lock(), b),
            };
            copy_lines(input, prefix.as_bytes(), sink);
            done();
        })
        .expect("spawning an output thread")
}

/// Writes one chunk and flushes. Errors (a closed stdout: `nicmsg run ... | head`) are ignored:
/// the rank's output must still be drained so that the rank never blocks on a full pipe.
fn write_all(out: &mut dyn Write, bytes: &[u8]) {
    let _ = out.write_all(bytes).and_then(|()| out.flush());
}

/// The line splitter: each call of `sink` is one write (whole prefixed lines when possible, so
/// that lines of different ranks never mix).
pub fn copy_lines<R: Read>(mut input: R, prefix: &[u8], mut sink: impl FnMut(&[u8])) {
    let mut buf = vec![0u8; 16 * 1024];
    // Bytes of the current line not yet written.
    let mut pending: Vec<u8> = Vec::new();
    // Whether part of the current line (with its prefix) was already written.
    let mut mid_line = false;
    let mut out: Vec<u8> = Vec::new();
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        out.clear();
        let mut rest = &buf[..n];
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            if !mid_line {
                out.extend_from_slice(prefix);
            }
            out.extend_from_slice(&pending);
            out.extend_from_slice(&rest[..=pos]);
            pending.clear();
            mid_line = false;
            rest = &rest[pos + 1..];
        }
        pending.extend_from_slice(rest);
        if pending.len() > MAX_PENDING {
            if !mid_line {
                out.extend_from_slice(prefix);
            }
            out.append(&mut pending);
            mid_line = true;
        }
        if !out.is_empty() {
            sink(&out);
        }
    }
    if !pending.is_empty() || mid_line {
        out.clear();
        if !mid_line {
            out.extend_from_slice(prefix);
        }
        out.append(&mut pending);
        out.push(b'\n');
        sink(&out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `chunks` as separate reads.
    struct Chunks(Vec<Vec<u8>>);
    impl Read for Chunks {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Ok(0);
            }
            let c = &mut self.0[0];
            let n = c.len().min(buf.len());
            buf[..n].copy_from_slice(&c[..n]);
            c.drain(..n);
            if c.is_empty() {
                self.0.remove(0);
            }
            Ok(n)
        }
    }

    fn run(chunks: &[&[u8]]) -> (String, Vec<String>) {
        let mut writes = Vec::new();
        copy_lines(
            Chunks(chunks.iter().map(|c| c.to_vec()).collect()),
            b"[rank 3] ",
            |b| writes.push(String::from_utf8_lossy(b).into_owned()),
        );
        (writes.concat(), writes)
    }

    #[test]
    fn prefixes_each_line() {
        let (all, _) = run(&[b"a\nb\n", b"c", b"d\ne\n"]);
        assert_eq!(all, "[rank 3] a\n[rank 3] b\n[rank 3] cd\n[rank 3] e\n");
    }

    #[test]
    fn partial_last_line_is_flushed_with_a_newline() {
        let (all, _) = run(&[b"x\nno newline"]);
        assert_eq!(all, "[rank 3] x\n[rank 3] no newline\n");
        let (all, _) = run(&[]);
        assert_eq!(all, "");
        let (all, _) = run(&[b"\n\n"]);
        assert_eq!(all, "[rank 3] \n[rank 3] \n");
    }

    #[test]
    fn whole_lines_per_write() {
        let (_, writes) = run(&[b"one\ntwo\nthr", b"ee\n"]);
        assert_eq!(
            writes,
            vec!["[rank 3] one\n[rank 3] two\n", "[rank 3] three\n"]
        );
    }

    #[test]
    fn very_long_lines_are_written_in_pieces() {
        let long = vec![b'z'; MAX_PENDING + 10];
        let (all, writes) = run(&[&long, &long, b"\nend\n"]);
        assert!(writes.len() >= 2);
        let expected = format!(
            "[rank 3] {}\n[rank 3] end\n",
            "z".repeat(2 * (MAX_PENDING + 10))
        );
        assert_eq!(all, expected);
    }
}
