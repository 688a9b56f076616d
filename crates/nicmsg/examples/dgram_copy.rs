//! File transfer over nicmsg's datagram sockets, verified by a CRC32C checksum end to end.
//!
//! The client sends one datagram `NICMSG-COPY <length> <crc32c> <name>`, then the file's bytes
//! in datagrams of `--chunk` bytes (1 MiB by default; up to 2^30); the server keeps a transfer
//! per sender address (several clients may send at once), writes the file into its directory,
//! checks length and checksum, and answers `OK <crc32c>` or `BAD <crc32c>`.
//!
//! With `--lm` both sides use LM's zero-copy path (`nicmsg::lm_dgram`): the server writes each
//! chunk to the file from where it was placed; a client binds `--bind` (its interface's
//! address toward the server).
//!
//! ```text
//! dgram_copy server 0.0.0.0:7001 OUT_DIR [--files N] [--lm]   # exits after N files
//! dgram_copy client 10.0.0.1:7001 FILE [--chunk BYTES] [--lm] [--bind IP]
//! ```

#[path = "support/any_dgram.rs"]
mod any_dgram;

use any_dgram::AnyDgram;
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

const MAGIC: &str = "NICMSG-COPY";
/// Longest name and header datagram the server takes: a file name, not a path.
const MAX_HEADER: usize = 512;

/// A file arriving from one client.
struct Transfer {
    file: File,
    path: PathBuf,
    expected_len: u64,
    expected_crc: u32,
    received: u64,
    crc: u32,
}

fn parse_header(datagram: &[u8]) -> Option<(u64, u32, String)> {
    let text = std::str::from_utf8(datagram).ok()?;
    let mut words = text.splitn(4, ' ');
    (words.next()? == MAGIC).then_some(())?;
    let len = words.next()?.parse().ok()?;
    let crc = u32::from_str_radix(words.next()?, 16).ok()?;
    let name = words.next()?.to_string();
    let plain = !name.is_empty() && !name.contains('/') && name != "." && name != "..";
    plain.then_some((len, crc, name))
}

fn serve(bind: &str, dir: &Path, files: Option<u64>, lm: bool) -> Result<bool, nicmsg::Error> {
    let mut socket = AnyDgram::bind(bind, lm)?;
    println!(
        "dgram_copy server at {} ({}), into {}",
        socket.local_addr(),
        socket.path(),
        dir.display()
    );
    let mut transfers: HashMap<SocketAddr, Transfer> = HashMap::new();
    let (mut done, mut all_good) = (0u64, true);
    while files.is_none_or(|n| done < n) {
        // Each datagram is taken where the socket received it: a header opens a transfer, a
        // chunk goes to its file and checksum.
        let step = socket.with_next(|from, datagram| take(&mut transfers, dir, from, datagram))?;
        let (from, finished) = match step? {
            Step::Continue => continue,
            Step::Finished(from, transfer) => (from, transfer),
        };
        all_good &= finish(&mut socket, from, finished)?;
        done += 1;
    }
    Ok(all_good)
}

/// What one datagram did.
enum Step {
    Continue,
    /// The transfer from this client is whole (or was empty).
    Finished(SocketAddr, Transfer),
}

/// Takes one datagram from `from`: a header opens a transfer, a chunk goes to its file.
fn take(
    transfers: &mut HashMap<SocketAddr, Transfer>,
    dir: &Path,
    from: SocketAddr,
    datagram: &[u8],
) -> Result<Step, nicmsg::Error> {
    let Some(transfer) = transfers.get_mut(&from) else {
        let header = (datagram.len() <= MAX_HEADER)
            .then(|| parse_header(datagram))
            .flatten();
        let Some((len, crc, name)) = header else {
            eprintln!("dgram_copy server: {from} sent no valid header; ignored");
            return Ok(Step::Continue);
        };
        let path = dir.join(&name);
        let transfer = Transfer {
            file: File::create(&path)?,
            path,
            expected_len: len,
            expected_crc: crc,
            received: 0,
            crc: 0,
        };
        if len == 0 {
            return Ok(Step::Finished(from, transfer));
        }
        transfers.insert(from, transfer);
        return Ok(Step::Continue);
    };
    transfer.file.write_all(datagram)?;
    transfer.crc = crc32c::crc32c_append(transfer.crc, datagram);
    transfer.received += datagram.len() as u64;
    if transfer.received < transfer.expected_len {
        return Ok(Step::Continue);
    }
    let transfer = transfers.remove(&from).expect("present");
    Ok(Step::Finished(from, transfer))
}

/// Checks a finished file and answers its client.
fn finish(
    socket: &mut AnyDgram,
    to: SocketAddr,
    mut transfer: Transfer,
) -> Result<bool, nicmsg::Error> {
    transfer.file.flush()?;
    let good = transfer.received == transfer.expected_len && transfer.crc == transfer.expected_crc;
    let verdict = if good { "OK" } else { "BAD" };
    println!(
        "dgram_copy server: {} from {to}: {} bytes, crc32c {:08x}: {verdict}",
        transfer.path.display(),
        transfer.received,
        transfer.crc
    );
    socket.send_to(format!("{verdict} {:08x}", transfer.crc).as_bytes(), to)?;
    Ok(good)
}

fn send_file(
    server: SocketAddr,
    path: &Path,
    chunk: usize,
    (lm, bind): (bool, Option<std::net::IpAddr>),
) -> Result<bool, nicmsg::Error> {
    let mut content = Vec::new();
    File::open(path)?.read_to_end(&mut content)?;
    let crc = crc32c::crc32c(&content);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| nicmsg::Error::Config("the file needs a plain name".into()))?;
    let bind = match (bind, server) {
        (Some(ip), _) => SocketAddr::new(ip, 0).to_string(),
        (None, SocketAddr::V4(_)) => "0.0.0.0:0".into(),
        (None, SocketAddr::V6(_)) => "[::]:0".into(),
    };
    let mut socket = AnyDgram::bind(&bind, lm)?;
    let started = Instant::now();
    let header = format!("{MAGIC} {} {crc:08x} {name}", content.len());
    socket.send_to(header.as_bytes(), server)?;
    let pieces: Vec<&[u8]> = content.chunks(chunk.max(1)).collect();
    socket.send_each(&pieces, server)?;
    let mut answer = [0u8; 64];
    let (len, _) = socket.recv_from(&mut answer)?;
    let seconds = started.elapsed().as_secs_f64();
    let answer = String::from_utf8_lossy(&answer[..len]).to_string();
    let good = answer == format!("OK {crc:08x}");
    println!(
        "dgram_copy client: {} ({} bytes, crc32c {crc:08x}) in {:.3} s ({:.1} MB/s, {}): server says {answer}",
        path.display(),
        content.len(),
        seconds,
        content.len() as f64 / seconds / 1e6,
        socket.path()
    );
    Ok(good)
}

fn option(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|at| args.get(at + 1).cloned())
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: dgram_copy server ADDRESS OUT_DIR [--files N] [--lm]\n       \
         dgram_copy client SERVER FILE [--chunk BYTES] [--lm] [--bind IP]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(role), Some(address), Some(path)) = (args.first(), args.get(1), args.get(2)) else {
        return usage();
    };
    let lm = args.iter().any(|a| a == "--lm");
    let outcome = match role.as_str() {
        "server" => {
            let files = option(&args, "--files").and_then(|n| n.parse().ok());
            serve(address, Path::new(path), files, lm)
        }
        "client" => {
            let chunk = option(&args, "--chunk").map_or(Some(1 << 20), |c| c.parse().ok());
            let bind = option(&args, "--bind").map(|ip| ip.parse());
            let (Some(chunk), Ok(server), Ok(bind)) =
                (chunk, address.parse::<SocketAddr>(), bind.transpose())
            else {
                return usage();
            };
            send_file(server, Path::new(path), chunk, (lm, bind))
        }
        _ => return usage(),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("dgram_copy: {error}");
            ExitCode::FAILURE
        }
    }
}
