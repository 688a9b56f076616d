//! The engine's control socket: how `nicmsg pdl load|unload|run|send|list|output` reaches the
//! programs of a running rank from a shell on the same machine.
//!
//! Each rank's engine binds a Unix datagram socket at [`control_socket_path`] (a path, not the
//! abstract namespace, so a shell outside the job's network namespaces reaches it too). A
//! request is one datagram: the target rank's [`ProgramHeader`] and its payload (a module, a
//! message); the answer is one datagram: an [`nicmsg_wire::program::Answer`] and its text. The
//! driver looks at the socket every [`CONTROL_CHECK_NS`] (one non-blocking system call), so
//! the messaging path pays nothing for it.

pub use nicmsg_wire::program::{control_socket_dir, control_socket_path};
use nicmsg_wire::program::{ProgramHeader, PROGRAM_HEADER_LEN};
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

/// How often the driver looks for control requests: a request waits at most this long, and an
/// idle engine makes 100 system calls a second for it.
pub const CONTROL_CHECK_NS: u64 = 10_000_000;
/// Requests served per look: a burst of requests cannot hold up a turn for long.
pub const CONTROL_REQUESTS_PER_CHECK: usize = 4;
/// The largest request: a header and the largest module.
pub const CONTROL_REQUEST_MAX: usize = super::REQUEST_BUFFER_LEN;

/// A rank's control socket; its file is removed when it is dropped.
pub struct ControlSocket {
    socket: UnixDatagram,
    path: PathBuf,
    buffer: Vec<u8>,
}

impl ControlSocket {
    /// Binds the socket of rank `rank` of job `job` (replacing a file a killed process left).
    pub fn bind(dir: &Path, job: u32, rank: u32) -> io::Result<Self> {
        let path = control_socket_path(dir, job, rank);
        match std::fs::remove_file(&path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
        let socket = UnixDatagram::bind(&path)?;
        socket.set_nonblocking(true)?;
        Ok(Self {
            socket,
            path,
            buffer: vec![0; CONTROL_REQUEST_MAX],
        })
    }

    /// Serves the requests waiting (at most [`CONTROL_REQUESTS_PER_CHECK`]) with `answer`,
    /// which carries out a parsed request and returns the answer's bytes. Malformed requests
    /// are answered with nothing and counted by the caller (returned count).
    pub fn serve(&mut self, mut answer: impl FnMut(&ProgramHeader, &[u8]) -> Vec<u8>) -> usize {
        let mut malformed = 0;
        for _ in 0..CONTROL_REQUESTS_PER_CHECK {
            let Ok((len, from)) = self.socket.recv_from(&mut self.buffer) else {
                break;
            };
            let request = &self.buffer[..len];
            let Ok(header) = ProgramHeader::parse(request) else {
                malformed += 1;
                continue;
            };
            let reply = answer(&header, &request[PROGRAM_HEADER_LEN..]);
            if let Some(path) = from.as_pathname() {
                if let Err(error) = self.socket.send_to(&reply, path) {
                    tracing::debug!(%error, "control answer not delivered");
                }
            }
        }
        malformed
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
