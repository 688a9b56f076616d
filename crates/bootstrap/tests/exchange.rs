//! Address exchange over loopback, one thread per rank.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use nicmsg_bootstrap::{exchange, BootstrapError, JobEnv};

/// A loopback port nobody listens on right now.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn env(rank: u32, size: u32, job: u32, bootstrap: SocketAddr) -> JobEnv {
    JobEnv {
        rank,
        size,
        job,
        bootstrap: Some(bootstrap),
        bind_ip: Some("127.0.0.1".parse().unwrap()),
    }
}

/// A distinct fake data address per rank.
fn data_addr(rank: u32) -> SocketAddr {
    SocketAddr::new("127.0.0.1".parse().unwrap(), 20000 + rank as u16)
}

#[test]
fn four_ranks_rank0_last() {
    let bs = free_port();
    let size = 4;
    let mut handles = Vec::new();
    for rank in 1..size {
        let e = env(rank, size, 11, bs);
        handles.push(thread::spawn(move || {
            exchange(&e, data_addr(rank), Duration::from_secs(10))
        }));
    }
    // Rank 0 comes last: the others must retry until it listens.
    thread::sleep(Duration::from_millis(300));
    let e0 = env(0, size, 11, bs);
    let t0 = exchange(&e0, data_addr(0), Duration::from_secs(10)).unwrap();
    let expected: Vec<SocketAddr> = (0..size).map(data_addr).collect();
    assert_eq!(t0, expected);
    for h in handles {
        assert_eq!(h.join().unwrap().unwrap(), expected);
    }
}

#[test]
fn real_sockets_and_unspecified_addresses() {
    // Ranks advertise real UDP sockets bound to 0.0.0.0: rank 0 fills in the IP they came from.
    let bs = free_port();
    let size = 3;
    let handles: Vec<_> = (0..size)
        .map(|rank| {
            let e = env(rank, size, 12, bs);
            thread::spawn(move || {
                let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
                let port = sock.local_addr().unwrap().port();
                let table = exchange(&e, sock.local_addr().unwrap(), Duration::from_secs(10));
                (port, table)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ports: Vec<u16> = results.iter().map(|(p, _)| *p).collect();
    for (_, table) in results {
        let table = table.unwrap();
        assert_eq!(table.iter().map(|a| a.port()).collect::<Vec<_>>(), ports);
        assert!(table.iter().all(|a| a.ip().is_loopback()), "{table:?}");
    }
}

#[test]
fn size_one_needs_no_network() {
    let e = JobEnv {
        rank: 0,
        size: 1,
        job: 1,
        bootstrap: None,
        bind_ip: None,
    };
    let me: SocketAddr = "10.1.2.3:4".parse().unwrap();
    assert_eq!(exchange(&e, me, Duration::ZERO).unwrap(), vec![me]);
}

#[test]
fn missing_bootstrap_is_an_error() {
    let e = JobEnv {
        rank: 1,
        size: 2,
        job: 1,
        bootstrap: None,
        bind_ip: None,
    };
    let err = exchange(&e, data_addr(1), Duration::from_secs(1)).unwrap_err();
    assert!(
        matches!(err, BootstrapError::NoBootstrap { size: 2 }),
        "{err}"
    );
}

/// A rank of another job (a stale rank of an earlier job still retrying on the same port, or
/// one whose NICMSG_JOB differs) is told so and turned away, and the job goes on: it used to
/// make rank 0 fail, and with it every rank connected so far. If the job's own rank never
/// comes, the timeout names the rank turned away.
#[test]
fn a_rank_of_another_job_is_turned_away_and_the_job_goes_on() {
    let bs = free_port();
    let stray = env(1, 2, 6, bs);
    let e0 = env(0, 2, 5, bs);
    let rank0 = thread::spawn(move || exchange(&e0, data_addr(0), Duration::from_secs(10)));
    let err = exchange(&stray, data_addr(1), Duration::from_secs(10)).unwrap_err();
    assert!(
        matches!(err, BootstrapError::Rejected { rank: 1, .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("belongs to job 6, but rank 0 runs job 5"),
        "{err}"
    );
    let e1 = env(1, 2, 5, bs);
    let table = exchange(&e1, data_addr(1), Duration::from_secs(10)).expect("rank 1 joins");
    assert_eq!(rank0.join().unwrap().expect("rank 0 goes on"), table);

    let bs = free_port();
    let stray = env(1, 2, 6, bs);
    let e0 = env(0, 2, 5, bs);
    let rank0 = thread::spawn(move || exchange(&e0, data_addr(0), Duration::from_secs(1)));
    exchange(&stray, data_addr(1), Duration::from_secs(1)).unwrap_err();
    let err = rank0.join().unwrap().unwrap_err().to_string();
    assert!(
        err.contains("waiting for rank 1") && err.contains("turned away: rank 1"),
        "{err}"
    );
}

#[test]
fn wrong_size_and_duplicate_rank_are_rejected() {
    // Wrong size.
    let bs = free_port();
    let e1 = env(1, 3, 7, bs);
    let h = thread::spawn(move || exchange(&e1, data_addr(1), Duration::from_secs(10)));
    let err0 = exchange(&env(0, 2, 7, bs), data_addr(0), Duration::from_secs(10)).unwrap_err();
    let err1 = h.join().unwrap().unwrap_err();
    assert!(
        err0.to_string()
            .contains("thinks the job has 3 ranks, but rank 0 has 2"),
        "{err0}"
    );
    assert!(matches!(err1, BootstrapError::Rejected { .. }), "{err1}");

    // Rank 1 twice: the first waits, the second is refused and rank 0 aborts; both learn why.
    let bs = free_port();
    let first = {
        let e = env(1, 3, 7, bs);
        thread::spawn(move || exchange(&e, data_addr(1), Duration::from_secs(10)))
    };
    thread::sleep(Duration::from_millis(50));
    let server = {
        let e = env(0, 3, 7, bs);
        thread::spawn(move || exchange(&e, data_addr(0), Duration::from_secs(10)))
    };
    thread::sleep(Duration::from_millis(200));
    let second = exchange(&env(1, 3, 7, bs), data_addr(9), Duration::from_secs(10)).unwrap_err();
    let err0 = server.join().unwrap().unwrap_err();
    let first = first.join().unwrap().unwrap_err();
    assert!(
        err0.to_string().contains("rank 1 connected twice"),
        "{err0}"
    );
    assert!(
        second.to_string().contains("rank 1 connected twice"),
        "{second}"
    );
    assert!(
        first.to_string().contains("rank 1 connected twice"),
        "{first}"
    );
}

#[test]
fn timeout_when_rank0_never_comes() {
    let bs = free_port();
    let start = Instant::now();
    let err = exchange(&env(2, 3, 1, bs), data_addr(2), Duration::from_millis(300)).unwrap_err();
    let took = start.elapsed();
    assert!(
        matches!(err, BootstrapError::ConnectTimeout { rank: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains(&bs.to_string()), "{err}");
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

/// When nothing listens at the bootstrap address, the error gives the last attempt's reason
/// ("Connection refused": rank 0 is not running there), not "no attempt finished in time",
/// which the retry loop reported whenever its last pause ran into the deadline (nearly always)
/// and which reads as if rank 0's host did not answer at all.
#[test]
fn a_refused_connection_is_named_in_the_timeout() {
    let bs = free_port();
    let err = exchange(&env(1, 2, 1, bs), data_addr(1), Duration::from_millis(300)).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, BootstrapError::ConnectTimeout { rank: 1, .. }),
        "{text}"
    );
    assert!(text.contains("last error: Connection refused"), "{text}");
}

/// Rank 0 dies (its kernel closes its sockets) after taking a rank's hello, before the table:
/// the rank fails at once, saying which rank it is and that rank 0 went away, instead of
/// "bootstrap I/O error with ... while waiting for the address table: failed to fill whole
/// buffer" (the end of stream as `read_exact` reports it).
#[test]
fn rank0_closing_before_the_table_is_named() {
    use std::io::Read;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let bs = listener.local_addr().unwrap();
    let dying_rank0 = thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut hello = [0u8; 16];
        conn.read_exact(&mut hello).unwrap();
        // Closed unanswered, as when rank 0 crashes or is killed.
    });
    let start = Instant::now();
    let err = exchange(&env(1, 3, 1, bs), data_addr(1), Duration::from_secs(10)).unwrap_err();
    dying_rank0.join().unwrap();
    let text = err.to_string();
    assert!(start.elapsed() < Duration::from_secs(5), "{text}");
    assert!(
        matches!(err, BootstrapError::Rank0Closed { rank: 1, .. }),
        "{text}"
    );
    assert!(text.starts_with("rank 1: "), "{text}");
    assert!(text.contains(&bs.to_string()), "{text}");
    assert!(text.contains("closed the connection"), "{text}");
}

/// NICMSG_BOOTSTRAP names a port where another service answers (here one that greets like
/// sshd): the rank says the reply is not nicmsg's and to check NICMSG_BOOTSTRAP, instead of
/// "frame of 1397966893 bytes is over the 16777216-byte limit" ("SSH-" read as a length).
#[test]
fn another_service_at_the_bootstrap_address_is_named() {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let bs = listener.local_addr().unwrap();
    let sshd = thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.write_all(b"SSH-2.0-OpenSSH_9.2\r\n").unwrap();
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest);
    });
    let err = exchange(&env(1, 2, 1, bs), data_addr(1), Duration::from_secs(10)).unwrap_err();
    sshd.join().unwrap();
    let text = err.to_string();
    assert!(
        matches!(err, BootstrapError::Protocol { peer, .. } if peer == bs),
        "{text}"
    );
    assert!(
        text.contains("not from a nicmsg bootstrap service") && text.contains("NICMSG_BOOTSTRAP"),
        "{text}"
    );
}

#[test]
fn rank0_times_out_naming_missing_ranks() {
    let bs = free_port();
    let e1 = env(1, 4, 3, bs);
    let h = thread::spawn(move || exchange(&e1, data_addr(1), Duration::from_secs(5)));
    let start = Instant::now();
    let err0 = exchange(&env(0, 4, 3, bs), data_addr(0), Duration::from_millis(500)).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(4));
    let s0 = err0.to_string();
    assert!(
        s0.contains("waiting for ranks 2, 3 (2 of 4 arrived)"),
        "{s0}"
    );
    // Rank 1 was connected: it hears about it instead of waiting for its own timeout.
    let err1 = h.join().unwrap().unwrap_err();
    assert!(
        err1.to_string().contains("waiting for ranks 2, 3"),
        "{err1}"
    );
}

#[test]
fn strangers_do_not_break_the_exchange() {
    use std::io::Write;
    let bs = free_port();
    let server = {
        let e = env(0, 2, 8, bs);
        thread::spawn(move || exchange(&e, data_addr(0), Duration::from_secs(10)))
    };
    // Something that is not nicmsg connects first and says something odd.
    let mut stranger = loop {
        match std::net::TcpStream::connect(bs) {
            Ok(s) => break s,
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    };
    stranger.write_all(b"\0\0\0\x05hello").unwrap();
    // And one that connects and closes at once.
    drop(std::net::TcpStream::connect(bs).unwrap());
    let t1 = exchange(&env(1, 2, 8, bs), data_addr(1), Duration::from_secs(10)).unwrap();
    assert_eq!(t1, vec![data_addr(0), data_addr(1)]);
    assert_eq!(server.join().unwrap().unwrap(), t1);
}
