//! TCP sockets written the way a simple message layer would: each message is an 8-byte length
//! header and the payload, written with one `writev` and read with `readv`, `TCP_NODELAY` on.
//!
//! The socket is non-blocking in both variants so that two ranks sending windows at each other
//! cannot deadlock on full socket buffers (as plain blocking writes can); what differs is what a
//! wait does when the socket is not ready:
//! * [`Waiting::Blocking`] sleeps in `poll(2)`, like a blocking socket (the papers' base case);
//! * [`Waiting::Busy`] retries at once, burning the core like an OS-bypass library.
//!
//! Socket buffers are left to the kernel's autotuning, which is what a TCP user gets.

use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::{Buffers, Messenger, Waiting, MAX_WINDOW, STALL_LIMIT};
use crate::BenchError;

/// Length of the header in front of every message.
const HEADER: usize = 8;
/// How long one `poll(2)` sleeps before the stall check looks at the clock again.
const POLL_SLICE_MS: i32 = 100;

struct Outgoing {
    len: usize,
    done: usize,
}

struct Incoming {
    slot: usize,
    len: usize,
    header: [u8; HEADER],
    done: usize,
}

/// One TCP connection between ranks 0 and 1.
pub struct TcpMessenger {
    stream: TcpStream,
    waiting: Waiting,
    buffers: Buffers,
    outgoing: VecDeque<Outgoing>,
    incoming: VecDeque<Incoming>,
}

impl TcpMessenger {
    /// Rank 0 listens on `listener`, rank 1 connects to `server` (retrying until the listener
    /// is there).
    pub fn connect(
        rank: u32,
        listener: Option<TcpListener>,
        server: SocketAddr,
        waiting: Waiting,
        max_len: usize,
    ) -> Result<Self, BenchError> {
        let stream = match listener {
            Some(listener) => listener.accept().map_err(BenchError::io("accepting"))?.0,
            None => connect_with_retry(server)?,
        };
        debug_assert!(rank <= 1);
        stream
            .set_nodelay(true)
            .map_err(BenchError::io("setting TCP_NODELAY"))?;
        stream
            .set_nonblocking(true)
            .map_err(BenchError::io("making the socket non-blocking"))?;
        Ok(Self {
            stream,
            waiting,
            buffers: Buffers::new(max_len),
            outgoing: VecDeque::with_capacity(MAX_WINDOW),
            incoming: VecDeque::with_capacity(MAX_WINDOW),
        })
    }

    /// Moves as many bytes as the socket takes now; `true` if anything moved.
    fn progress(&mut self) -> Result<bool, BenchError> {
        let wrote = self.write_some()?;
        let read = self.read_some()?;
        Ok(wrote || read)
    }

    fn write_some(&mut self) -> Result<bool, BenchError> {
        let mut moved = false;
        while let Some(head) = self.outgoing.front_mut() {
            let header = (head.len as u64).to_le_bytes();
            let total = HEADER + head.len;
            let slices = remaining_out(&header, &self.buffers.send[..head.len], head.done);
            match self.stream.write_vectored(&slices) {
                Ok(0) => return Err(BenchError::PeerClosed),
                Ok(n) => {
                    moved = true;
                    head.done += n;
                    if head.done == total {
                        self.outgoing.pop_front();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(BenchError::io("writing")(e)),
            }
        }
        Ok(moved)
    }

    fn read_some(&mut self) -> Result<bool, BenchError> {
        let mut moved = false;
        while let Some(head) = self.incoming.front_mut() {
            let total = HEADER + head.len;
            let payload = &mut self.buffers.slots[head.slot][..head.len];
            let result = if head.done < HEADER {
                let mut slices = [
                    IoSliceMut::new(&mut head.header[head.done..]),
                    IoSliceMut::new(payload),
                ];
                self.stream.read_vectored(&mut slices)
            } else {
                self.stream.read(&mut payload[head.done - HEADER..])
            };
            match result {
                Ok(0) => return Err(BenchError::PeerClosed),
                Ok(n) => {
                    moved = true;
                    let had_header = head.done >= HEADER;
                    head.done += n;
                    if !had_header && head.done >= HEADER {
                        check_header(head)?;
                    }
                    if head.done == total {
                        self.incoming.pop_front();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(BenchError::io("reading")(e)),
            }
        }
        Ok(moved)
    }

    /// Sleeps until the socket can move what is pending (blocking variant only).
    fn sleep_until_ready(&self) -> Result<(), BenchError> {
        let mut events = 0;
        if !self.outgoing.is_empty() {
            events |= libc::POLLOUT;
        }
        if !self.incoming.is_empty() {
            events |= libc::POLLIN;
        }
        super::sleep_until_ready(self.stream.as_raw_fd(), events, POLL_SLICE_MS)
    }

    fn idle(&self) -> bool {
        self.outgoing.is_empty() && self.incoming.is_empty()
    }
}

impl Messenger for TcpMessenger {
    fn buffers(&mut self) -> &mut Buffers {
        &mut self.buffers
    }

    fn post_send(&mut self, len: usize) -> Result<(), BenchError> {
        self.buffers.outgoing(len)?;
        self.outgoing.push_back(Outgoing { len, done: 0 });
        // Like a send call: start writing now.
        self.write_some()?;
        Ok(())
    }

    fn post_recv(&mut self, slot: usize, len: usize) -> Result<(), BenchError> {
        let busy = self.incoming.iter().any(|r| r.slot == slot);
        self.buffers.incoming(slot, len, busy)?;
        self.incoming.push_back(Incoming {
            slot,
            len,
            header: [0; HEADER],
            done: 0,
        });
        Ok(())
    }

    fn wait_all(&mut self) -> Result<(), BenchError> {
        let mut last_progress = Instant::now();
        while !self.idle() {
            if self.progress()? {
                last_progress = Instant::now();
                continue;
            }
            if last_progress.elapsed() > STALL_LIMIT {
                return Err(BenchError::Stalled(STALL_LIMIT));
            }
            match self.waiting {
                Waiting::Blocking => self.sleep_until_ready()?,
                Waiting::Busy => std::hint::spin_loop(),
            }
        }
        Ok(())
    }

    fn test_all(&mut self) -> Result<bool, BenchError> {
        self.progress()?;
        Ok(self.idle())
    }
}

/// The part of header + payload not yet written.
fn remaining_out<'a>(header: &'a [u8; HEADER], payload: &'a [u8], done: usize) -> [IoSlice<'a>; 2] {
    if done < HEADER {
        [IoSlice::new(&header[done..]), IoSlice::new(payload)]
    } else {
        [IoSlice::new(&payload[done - HEADER..]), IoSlice::new(&[])]
    }
}

fn check_header(incoming: &Incoming) -> Result<(), BenchError> {
    let got = u64::from_le_bytes(incoming.header);
    if got != incoming.len as u64 {
        return Err(BenchError::OutOfStep {
            expected: incoming.len as u64,
            got,
        });
    }
    Ok(())
}

fn connect_with_retry(server: SocketAddr) -> Result<TcpStream, BenchError> {
    let deadline = Instant::now() + STALL_LIMIT;
    loop {
        match TcpStream::connect(server) {
            Ok(stream) => return Ok(stream),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(BenchError::io("connecting to rank 0")(e)),
        }
    }
}
