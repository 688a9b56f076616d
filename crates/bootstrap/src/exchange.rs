//! Address exchange through rank 0.
//!
//! Rank 0 listens on the bootstrap address (`NICMSG_BOOTSTRAP`, with `SO_REUSEADDR` so that a
//! quick rerun can take the same port) and accepts one TCP connection from each other rank. Each
//! rank sends a HELLO with its job, the job size, its rank and its data address. When all
//! `size - 1` hellos have arrived and are consistent, rank 0 answers every connection with the
//! TABLE of all data addresses (index = rank) and closes. If anything is inconsistent (another
//! size, a rank out of range, a rank twice, another protocol version) rank 0 sends an ERROR with
//! the reason to every connected rank and returns the same reason as its own error; when not
//! every rank arrives before the timeout, it does the same with the list of missing ranks.
//! Connections whose first bytes are not a nicmsg hello (port scanners, strays), and ranks of
//! another job (a stale rank of an earlier job retrying on the same port), are answered with
//! an ERROR and dropped without failing the job; the last rank of another job is named if the
//! wait then times out (NICMSG_JOB differing between the ranks of one job).
//!
//! Ranks other than 0 connect with retry and exponential backoff (10 ms doubling to 250 ms) until
//! the timeout, so rank 0 may start last. A job of one rank uses no network at all.
//!
//! An advertised data address whose IP is unspecified (`0.0.0.0`, `::`) is replaced by rank 0 with
//! the IP the rank's bootstrap connection came from (for rank 0 itself: the bootstrap IP), so
//! every table entry is reachable.
//!
//! Each entry may carry the rank's link-layer (Ethernet) address beside its data address: a
//! rank that frames its own datagrams (the AF_XDP transport) needs its peers' hardware
//! addresses, which no neighbour table holds before the ranks have talked.
//!
//! Each entry also says whether the rank receives through the kernel's UDP sockets, which
//! verify every datagram's checksum: its peers then leave payloads out of their frames'
//! checksums (a rank on AF_XDP, whose rings check nothing, says no).
//!
//! ## Wire format (version 3)
//!
//! Every message is a frame: a big-endian `u32` body length (at most 16 MiB) followed by the body.
//! Integers in the body are big-endian.
//!
//! ```text
//! body    = magic "NMBX" (4 bytes) | version u8 = 3 | kind u8 | payload
//! HELLO   (kind 1, rank -> rank 0): job u32 | size u32 | rank u32 | addr
//! TABLE   (kind 2, rank 0 -> rank): job u32 | size u32 | size x addr      (index = rank)
//! ERROR   (kind 3, rank 0 -> rank): UTF-8 reason, the rest of the body
//! addr    = data | link | checked
//! data    = family u8 = 4 | IPv4 (4 bytes) | port u16
//!         | family u8 = 6 | IPv6 (16 bytes) | port u16 | scope id u32
//! link    = length u8 = 0                          (none)
//!         | length u8 = 6 | Ethernet address (6 bytes)
//! checked = u8 = 0 | 1                             (1: the rank's link checks payloads)
//! ```

use std::io::{self, Read, Write};
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, SocketAddrV4, SocketAddrV6, TcpListener,
    TcpStream,
};
use std::thread;
use std::time::{Duration, Instant};

use crate::{BootstrapError, JobEnv};

/// The four bytes every body starts with.
pub const MAGIC: [u8; 4] = *b"NMBX";
/// Protocol version; a rank 0 of another version refuses the hello.
pub const VERSION: u8 = 3;
/// Largest body accepted (a table of about 880 000 IPv4 ranks).
pub const MAX_BODY: usize = 16 << 20;

const KIND_HELLO: u8 = 1;
const KIND_TABLE: u8 = 2;
const KIND_ERROR: u8 = 3;

/// Longest time rank 0 waits for the hello of one accepted connection.
const HELLO_READ_LIMIT: Duration = Duration::from_secs(10);

/// Where a rank can be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankAddress {
    /// The address its datagrams come from and go to.
    pub data: SocketAddr,
    /// The Ethernet address of the interface holding `data`, for ranks that frame their own
    /// datagrams; `None` when the rank does not say.
    pub link: Option<[u8; 6]>,
    /// The rank receives through the kernel's UDP sockets, which drop a datagram whose checksum
    /// fails: frames to it may leave their payload out of their own checksum. False (the safe
    /// answer) when the rank does not say.
    pub checks_payload: bool,
}

impl RankAddress {
    pub fn new(data: SocketAddr) -> Self {
        Self {
            data,
            link: None,
            checks_payload: false,
        }
    }
}

/// Exchanges data addresses with every rank of the job; returns the table (index = rank).
/// Like [`exchange_addresses`] for ranks with no link-layer address to give.
pub fn exchange(
    env: &JobEnv,
    my_addr: SocketAddr,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, BootstrapError> {
    let table = exchange_addresses(env, RankAddress::new(my_addr), timeout)?;
    Ok(table.into_iter().map(|a| a.data).collect())
}

/// Exchanges addresses with every rank of the job; returns the table (index = rank).
///
/// `my_addr` is this rank's address as peers should use it. Rank 0 serves at
/// `env.bootstrap`, the others connect to it; both give up after `timeout`. With `env.size == 1`
/// this returns `[my_addr]` without touching the network.
pub fn exchange_addresses(
    env: &JobEnv,
    my_addr: RankAddress,
    timeout: Duration,
) -> Result<Vec<RankAddress>, BootstrapError> {
    if env.rank >= env.size {
        return Err(BootstrapError::InvalidJob {
            rank: env.rank,
            size: env.size,
        });
    }
    if env.size == 1 {
        return Ok(vec![my_addr]);
    }
    let bootstrap = env
        .bootstrap
        .ok_or(BootstrapError::NoBootstrap { size: env.size })?;
    let deadline = Instant::now() + timeout;
    if env.rank == 0 {
        serve(env, bootstrap, my_addr, timeout, deadline)
    } else {
        join(env, bootstrap, my_addr, timeout, deadline)
    }
}

// ---------------------------------------------------------------------------------------------
// rank 0

fn serve(
    env: &JobEnv,
    bootstrap: SocketAddr,
    my_addr: RankAddress,
    timeout: Duration,
    deadline: Instant,
) -> Result<Vec<RankAddress>, BootstrapError> {
    let listener = bind(bootstrap)?;
    listener
        .set_nonblocking(true)
        .map_err(|source| BootstrapError::Io {
            peer: bootstrap,
            during: "setting up the listener",
            source,
        })?;

    let size = env.size as usize;
    let mut table: Vec<Option<RankAddress>> = vec![None; size];
    table[0] = Some(fill_unspecified(my_addr, bootstrap.ip()));
    let mut arrived = 1usize;
    let mut conns: Vec<(SocketAddr, TcpStream)> = Vec::with_capacity(size - 1);

    // The last rank of another job turned away, named if the wait times out.
    let mut turned_away: Option<String> = None;
    while arrived < size {
        let (mut stream, peer) = match listener.accept() {
            Ok(conn) => conn,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = table
                        .iter()
                        .enumerate()
                        .filter(|(_, a)| a.is_none())
                        .map(|(r, _)| r.to_string())
                        .collect();
                    let mut waiting_for = format!(
                        "waiting for rank{} {} ({arrived} of {size} arrived)",
                        if missing.len() == 1 { "" } else { "s" },
                        abbreviate(&missing),
                    );
                    if let Some(stray) = &turned_away {
                        waiting_for.push_str(&format!("; turned away: {stray}"));
                    }
                    abort(
                        &mut conns,
                        &format!("timed out after {timeout:?}: {waiting_for}"),
                    );
                    return Err(BootstrapError::Timeout {
                        rank: 0,
                        timeout,
                        waiting_for,
                    });
                }
                thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted
                        | io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::ConnectionReset
                ) =>
            {
                continue
            }
            Err(source) => {
                abort(&mut conns, "rank 0 failed to accept connections");
                return Err(BootstrapError::Io {
                    peer: bootstrap,
                    during: "accepting connections",
                    source,
                });
            }
        };

        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(100), HELLO_READ_LIMIT);
        let hello = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_read_timeout(Some(remaining)))
            .and_then(|()| stream.set_write_timeout(Some(HELLO_READ_LIMIT)))
            .and_then(|()| stream.set_nodelay(true))
            .and_then(|()| read_frame(&mut stream));
        let body = match hello {
            Ok(body) => body,
            // A connection that closes or stalls before saying anything is not one of ours.
            Err(_) => continue,
        };

        match check_hello(env, &body, &table, peer) {
            Hello::Accept { rank, addr } => {
                table[rank as usize] = Some(addr);
                arrived += 1;
                conns.push((peer, stream));
            }
            Hello::Foreign(reason) => {
                let _ = write_frame(&mut stream, &error_body(&reason));
            }
            Hello::Stray(reason) => {
                // Failing here let a stale rank of an earlier job, still retrying on this
                // port, take down a healthy job (rank 0 and every rank connected so far).
                tracing::warn!("bootstrap: turned away {reason}");
                let _ = write_frame(&mut stream, &error_body(&reason));
                turned_away = Some(reason);
            }
            Hello::Fatal(reason) => {
                let _ = write_frame(&mut stream, &error_body(&reason));
                abort(
                    &mut conns,
                    &format!("rank 0 aborted the exchange: {reason}"),
                );
                return Err(BootstrapError::InvalidPeer(reason));
            }
        }
    }

    let table: Vec<RankAddress> = table.into_iter().map(|a| a.expect("all arrived")).collect();
    let body = table_body(env, &table);
    let mut first_error = None;
    for (peer, stream) in &mut conns {
        let sent = write_frame(stream, &body).and_then(|()| stream.flush());
        let _ = stream.shutdown(Shutdown::Write);
        if let Err(source) = sent {
            first_error.get_or_insert(BootstrapError::Io {
                peer: *peer,
                during: "sending the address table",
                source,
            });
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(table),
    }
}

/// Binds the bootstrap address; when the address is not local (a name that resolved to a
/// public/NAT address), listens on all addresses at that port instead.
fn bind(addr: SocketAddr) -> Result<TcpListener, BootstrapError> {
    // std sets SO_REUSEADDR on Unix before binding.
    match TcpListener::bind(addr) {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
            let any: IpAddr = match addr {
                SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
                SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
            };
            TcpListener::bind(SocketAddr::new(any, addr.port()))
                .map_err(|source| BootstrapError::Bind { addr, source })
        }
        Err(source) => Err(BootstrapError::Bind { addr, source }),
    }
}

enum Hello {
    Accept {
        rank: u32,
        addr: RankAddress,
    },
    /// Not a nicmsg bootstrap hello at all: tell the sender, keep waiting for our ranks.
    Foreign(String),
    /// A rank of another job (a stale rank of an earlier job on the same port, or one whose
    /// NICMSG_JOB differs): tell it, keep waiting, and name it if the wait times out.
    Stray(String),
    /// A nicmsg rank that does not fit this job: the job cannot go on.
    Fatal(String),
}

fn check_hello(
    env: &JobEnv,
    body: &[u8],
    table: &[Option<RankAddress>],
    peer: SocketAddr,
) -> Hello {
    let mut r = Reader::new(body);
    if r.bytes(4) != Some(&MAGIC[..]) {
        return Hello::Foreign(format!(
            "{peer} sent something that is not a nicmsg bootstrap hello"
        ));
    }
    let version = r.u8();
    if version != Some(VERSION) {
        return Hello::Fatal(format!(
            "a rank at {peer} speaks bootstrap protocol version {}, rank 0 speaks {VERSION} \
             (mixed nicmsg versions?)",
            version.map_or("?".into(), |v| v.to_string())
        ));
    }
    if r.u8() != Some(KIND_HELLO) {
        return Hello::Foreign(format!(
            "{peer} sent a bootstrap message that is not a hello"
        ));
    }
    let (Some(job), Some(size), Some(rank), Some(addr)) = (r.u32(), r.u32(), r.u32(), r.addr())
    else {
        return Hello::Fatal(format!("a rank at {peer} sent a truncated hello"));
    };
    if !r.is_empty() {
        return Hello::Fatal(format!("a rank at {peer} sent a hello with trailing bytes"));
    }
    if job != env.job {
        return Hello::Stray(format!(
            "rank {rank} (from {peer}) belongs to job {job}, but rank 0 runs job {} \
             (two jobs sharing a bootstrap address, or NICMSG_JOB differs between ranks)",
            env.job
        ));
    }
    if size != env.size {
        return Hello::Fatal(format!(
            "rank {rank} (from {peer}) thinks the job has {size} ranks, but rank 0 has {}",
            env.size
        ));
    }
    if rank == 0 || rank >= env.size {
        return Hello::Fatal(format!(
            "a rank at {peer} claims rank {rank}, which is {} (job of {} ranks)",
            if rank == 0 {
                "rank 0's own"
            } else {
                "out of range"
            },
            env.size
        ));
    }
    if let Some(first) = table[rank as usize] {
        return Hello::Fatal(format!(
            "rank {rank} connected twice (data addresses {} and {}, the second from {peer})",
            first.data, addr.data
        ));
    }
    Hello::Accept {
        rank,
        addr: fill_unspecified(addr, peer.ip()),
    }
}

/// Sends `reason` to every connection and drops them.
fn abort(conns: &mut Vec<(SocketAddr, TcpStream)>, reason: &str) {
    let body = error_body(reason);
    for (_, stream) in conns.iter_mut() {
        let _ = write_frame(stream, &body);
        let _ = stream.shutdown(Shutdown::Write);
    }
    conns.clear();
}

fn fill_unspecified(addr: RankAddress, ip: IpAddr) -> RankAddress {
    if addr.data.ip().is_unspecified() && !ip.is_unspecified() {
        RankAddress {
            data: SocketAddr::new(ip, addr.data.port()),
            ..addr
        }
    } else {
        addr
    }
}

/// "1, 2, 3" for a few ranks, "1, 2, 3, 4, 5, 6, 7, 8 and 92 more" for many.
fn abbreviate(items: &[String]) -> String {
    const SHOWN: usize = 8;
    if items.len() <= SHOWN {
        items.join(", ")
    } else {
        format!(
            "{} and {} more",
            items[..SHOWN].join(", "),
            items.len() - SHOWN
        )
    }
}

// ---------------------------------------------------------------------------------------------
// ranks other than 0

fn join(
    env: &JobEnv,
    bootstrap: SocketAddr,
    my_addr: RankAddress,
    timeout: Duration,
    deadline: Instant,
) -> Result<Vec<RankAddress>, BootstrapError> {
    let mut backoff = Duration::from_millis(10);
    // The reason the last attempt failed: the pause after it usually runs into the deadline, and
    // the timeout must still say why ("Connection refused": nothing listens there; "timed out":
    // the host does not answer), not merely that time ran out.
    let mut last: Option<io::Error> = None;
    let mut stream = loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(BootstrapError::ConnectTimeout {
                rank: env.rank,
                addr: bootstrap,
                timeout,
                last: last.map_or_else(|| "no attempt finished in time".into(), |e| e.to_string()),
            });
        }
        match TcpStream::connect_timeout(&bootstrap, remaining.min(Duration::from_secs(2))) {
            Ok(stream) => break stream,
            Err(e) => {
                let remaining = deadline.saturating_duration_since(Instant::now());
                if remaining.is_zero() {
                    return Err(BootstrapError::ConnectTimeout {
                        rank: env.rank,
                        addr: bootstrap,
                        timeout,
                        last: e.to_string(),
                    });
                }
                last = Some(e);
                thread::sleep(backoff.min(remaining));
                backoff = (backoff * 2).min(Duration::from_millis(250));
            }
        }
    };

    let io_err = |during: &'static str| {
        move |source| BootstrapError::Io {
            peer: bootstrap,
            during,
            source,
        }
    };
    stream.set_nodelay(true).map_err(io_err("connecting"))?;
    let remaining = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    stream
        .set_write_timeout(Some(remaining))
        .map_err(io_err("connecting"))?;
    // A connection that ends without a word from rank 0 means rank 0 is gone (its kernel closed
    // the socket); the bare I/O error ("failed to fill whole buffer", "Connection reset by
    // peer") says neither which rank failed nor that rank 0 went away.
    // `during` for the I/O error, `before` for the closed connection.
    let closed = |during: &'static str, before: &'static str| {
        move |source: io::Error| match source.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe => BootstrapError::Rank0Closed {
                rank: env.rank,
                addr: bootstrap,
                during: before,
            },
            _ => io_err(during)(source),
        }
    };
    write_frame(&mut stream, &hello_body(env, my_addr)).map_err(closed(
        "sending the hello",
        "before taking this rank's hello",
    ))?;

    let remaining = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    stream
        .set_read_timeout(Some(remaining))
        .map_err(io_err("waiting for the address table"))?;
    let body = match read_frame(&mut stream) {
        Ok(body) => body,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            return Err(BootstrapError::Timeout {
                rank: env.rank,
                timeout,
                waiting_for: format!(
                    "connected to rank 0 at {bootstrap}, but the address table did not come \
                     (rank 0 is still waiting for other ranks)"
                ),
            })
        }
        // Only a length over MAX_BODY is InvalidData: the first four bytes of something that is
        // not nicmsg (an sshd's "SSH-" is 1397966893), so the address is not rank 0's service.
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            return Err(BootstrapError::Protocol {
                peer: bootstrap,
                reason: format!(
                    "rank {}: the reply is not from a nicmsg bootstrap service (is \
                     NICMSG_BOOTSTRAP rank 0's address?): {e}",
                    env.rank
                ),
            })
        }
        Err(e) => {
            return Err(closed(
                "waiting for the address table",
                "before sending the address table",
            )(e))
        }
    };
    parse_reply(env, bootstrap, &body)
}

fn parse_reply(
    env: &JobEnv,
    bootstrap: SocketAddr,
    body: &[u8],
) -> Result<Vec<RankAddress>, BootstrapError> {
    let protocol = |reason: String| BootstrapError::Protocol {
        peer: bootstrap,
        reason,
    };
    let mut r = Reader::new(body);
    if r.bytes(4) != Some(&MAGIC[..]) {
        return Err(protocol(
            "the reply is not from a nicmsg bootstrap service (is NICMSG_BOOTSTRAP right?)".into(),
        ));
    }
    match r.u8() {
        Some(VERSION) => {}
        v => {
            return Err(protocol(format!(
                "rank 0 speaks bootstrap protocol version {}, this rank {VERSION}",
                v.map_or("?".into(), |v| v.to_string())
            )))
        }
    }
    match r.u8() {
        Some(KIND_ERROR) => Err(BootstrapError::Rejected {
            rank: env.rank,
            addr: bootstrap,
            reason: String::from_utf8_lossy(r.rest()).into_owned(),
        }),
        Some(KIND_TABLE) => {
            let (Some(job), Some(size)) = (r.u32(), r.u32()) else {
                return Err(protocol("truncated address table".into()));
            };
            if job != env.job || size != env.size {
                return Err(protocol(format!(
                    "table for job {job} of {size} ranks, expected job {} of {}",
                    env.job, env.size
                )));
            }
            let table = (0..size)
                .map(|_| r.addr())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| protocol("truncated address table".into()))?;
            if !r.is_empty() {
                return Err(protocol("address table with trailing bytes".into()));
            }
            Ok(table)
        }
        other => Err(protocol(format!("unexpected message kind {other:?}"))),
    }
}

// ---------------------------------------------------------------------------------------------
// encoding

fn header(kind: u8) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.extend_from_slice(&MAGIC);
    b.push(VERSION);
    b.push(kind);
    b
}

fn hello_body(env: &JobEnv, addr: RankAddress) -> Vec<u8> {
    let mut b = header(KIND_HELLO);
    b.extend_from_slice(&env.job.to_be_bytes());
    b.extend_from_slice(&env.size.to_be_bytes());
    b.extend_from_slice(&env.rank.to_be_bytes());
    put_addr(&mut b, addr);
    b
}

fn table_body(env: &JobEnv, table: &[RankAddress]) -> Vec<u8> {
    let mut b = header(KIND_TABLE);
    b.extend_from_slice(&env.job.to_be_bytes());
    b.extend_from_slice(&env.size.to_be_bytes());
    for &a in table {
        put_addr(&mut b, a);
    }
    b
}

fn error_body(reason: &str) -> Vec<u8> {
    let mut b = header(KIND_ERROR);
    b.extend_from_slice(reason.as_bytes());
    b
}

fn put_addr(b: &mut Vec<u8>, addr: RankAddress) {
    match addr.data {
        SocketAddr::V4(a) => {
            b.push(4);
            b.extend_from_slice(&a.ip().octets());
            b.extend_from_slice(&a.port().to_be_bytes());
        }
        SocketAddr::V6(a) => {
            b.push(6);
            b.extend_from_slice(&a.ip().octets());
            b.extend_from_slice(&a.port().to_be_bytes());
            b.extend_from_slice(&a.scope_id().to_be_bytes());
        }
    }
    match addr.link {
        Some(mac) => {
            b.push(6);
            b.extend_from_slice(&mac);
        }
        None => b.push(0),
    }
    b.push(u8::from(addr.checks_payload));
}

fn write_frame(stream: &mut TcpStream, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len()).expect("bodies are small");
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(body);
    stream.write_all(&frame)
}

fn read_frame(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_BODY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is over the {MAX_BODY}-byte limit"),
        ));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    Ok(body)
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.buf.len() < n {
            return None;
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Some(head)
    }
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N).map(|b| b.try_into().expect("length checked"))
    }
    fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[b]| b)
    }
    fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_be_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_be_bytes)
    }
    fn addr(&mut self) -> Option<RankAddress> {
        let data = self.data_addr()?;
        let link = match self.u8()? {
            0 => None,
            6 => Some(self.array::<6>()?),
            _ => return None,
        };
        let checks_payload = match self.u8()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        Some(RankAddress {
            data,
            link,
            checks_payload,
        })
    }
    fn data_addr(&mut self) -> Option<SocketAddr> {
        match self.u8()? {
            4 => {
                let ip = Ipv4Addr::from(self.array::<4>()?);
                Some(SocketAddrV4::new(ip, self.u16()?).into())
            }
            6 => {
                let ip = Ipv6Addr::from(self.array::<16>()?);
                let port = self.u16()?;
                let scope = self.u32()?;
                Some(SocketAddrV6::new(ip, port, 0, scope).into())
            }
            _ => None,
        }
    }
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }
    fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(rank: u32, size: u32) -> JobEnv {
        JobEnv {
            rank,
            size,
            job: 5,
            bootstrap: None,
            bind_ip: None,
        }
    }

    fn plain(text: &str) -> RankAddress {
        RankAddress::new(text.parse().unwrap())
    }

    #[test]
    fn addresses_round_trip() {
        let addrs: Vec<RankAddress> = vec![
            plain("10.213.3.1:9000"),
            RankAddress {
                link: Some([0x02, 0x42, 0xac, 0x11, 0x00, 0xff]),
                ..plain("10.213.3.2:9001")
            },
            RankAddress {
                checks_payload: true,
                ..plain("10.213.3.3:9002")
            },
            plain("[fe80::1%7]:65535"),
            plain("[::1]:1"),
        ];
        let body = table_body(&env(0, 5), &addrs);
        let bs: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(parse_reply(&env(1, 5), bs, &body).unwrap(), addrs);
    }

    #[test]
    fn hello_is_checked() {
        let peer: SocketAddr = "127.0.0.9:4444".parse().unwrap();
        let table = vec![Some(plain("127.0.0.1:1")), None, None];
        let ok = hello_body(&env(2, 3), plain("0.0.0.0:7000"));
        match check_hello(&env(0, 3), &ok, &table, peer) {
            Hello::Accept { rank, addr } => {
                assert_eq!(rank, 2);
                assert_eq!(addr, plain("127.0.0.9:7000"), "unspecified IP filled");
            }
            _ => panic!("good hello refused"),
        }
        let mut other_job = env(2, 3);
        other_job.job = 6;
        let bad = hello_body(&other_job, plain("127.0.0.1:7000"));
        assert!(
            matches!(check_hello(&env(0, 3), &bad, &table, peer), Hello::Stray(r) if r.contains("job 6"))
        );
        let bad = hello_body(&env(2, 4), plain("127.0.0.1:7000"));
        assert!(
            matches!(check_hello(&env(0, 3), &bad, &table, peer), Hello::Fatal(r) if r.contains("4 ranks"))
        );
        let mut out_of_range = env(2, 3);
        out_of_range.rank = 3;
        let bad = hello_body(&out_of_range, plain("127.0.0.1:7000"));
        assert!(
            matches!(check_hello(&env(0, 3), &bad, &table, peer), Hello::Fatal(r) if r.contains("out of range"))
        );
        assert!(matches!(
            check_hello(&env(0, 3), b"GET / HTTP/1.1", &table, peer),
            Hello::Foreign(_)
        ));
        let mut truncated = ok.clone();
        truncated.pop();
        assert!(matches!(
            check_hello(&env(0, 3), &truncated, &table, peer),
            Hello::Fatal(_)
        ));
    }

    #[test]
    fn abbreviates_long_lists() {
        let items: Vec<String> = (1..=10).map(|i| i.to_string()).collect();
        assert_eq!(abbreviate(&items[..2]), "1, 2");
        assert_eq!(abbreviate(&items), "1, 2, 3, 4, 5, 6, 7, 8 and 2 more");
    }
}
