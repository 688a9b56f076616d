//! The floor of the AF_XDP path: a busy-polling ping-pong of raw UDP frames through two
//! AF_XDP sockets, no protocol. Run one side in each of two namespaces:
//! `xdp_pingpong LOCAL_IP PORT PEER_IP PEER_MAC (serve|ping) [ROUND_TRIPS] [SIZE] [udp]`.
//! With `udp` last, the same ping-pong runs through connected, non-blocking kernel UDP sockets
//! instead (busy-polling `recv`), for comparison on the same link.

use nicmsg_xdp::{
    parse, redirect_program, AttachMode, Counter, HeaderTemplate, Interface, Program, SocketMap,
    Station, Steering, XskSocket, HEADERS_LEN,
};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let local: Ipv4Addr = args[1].parse().unwrap();
    let port: u16 = args[2].parse().unwrap();
    let peer_ip: Ipv4Addr = args[3].parse().unwrap();
    let peer_mac: Vec<u8> = args[4]
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    let ping = args[5] == "ping";
    let round_trips: usize = args.get(6).map_or(10_000, |a| a.parse().unwrap());
    let size: usize = args.get(7).map_or(8, |a| a.parse().unwrap());
    if args.get(8).is_some_and(|a| a == "udp") {
        return udp_pingpong(local, port, peer_ip, ping, round_trips, size);
    }
    if args.get(8).is_some_and(|a| a == "udp-pass") {
        let interface = Interface::with_address(local)?.expect("an Ethernet interface has it");
        let map = SocketMap::create(1)?;
        let passed = Counter::create()?;
        let steering = Steering {
            ip: local,
            port,
            sockets_map_fd: map.fd(),
            ring_max_udp_len: 0,
            passed_counter_fd: passed.fd(),
        };
        let program = Program::load(&redirect_program(&steering), "nicmsg_steer")?;
        let _link = program.attach(interface.index, AttachMode::Generic)?;
        udp_pingpong(local, port, peer_ip, ping, round_trips, size)?;
        eprintln!("passed {}", passed.read());
        return Ok(());
    }
    let interface = Interface::with_address(local)?.expect("an Ethernet interface has it");
    // Keep the port ours in the kernel too.
    let _udp = std::net::UdpSocket::bind(SocketAddrV4::new(local, port))?;
    let map = SocketMap::create(1)?;
    let mut socket = XskSocket::open(interface.index, 0)?;
    map.insert(0, socket.fd())?;
    let passed = Counter::create()?;
    let steering = Steering {
        ip: local,
        port,
        sockets_map_fd: map.fd(),
        // Every frame to the ring: this measures the ring alone.
        ring_max_udp_len: u16::MAX,
        passed_counter_fd: passed.fd(),
    };
    let program = Program::load(&redirect_program(&steering), "nicmsg_steer")?;
    let _link = program.attach(interface.index, AttachMode::Generic)?;
    let me = Station {
        mac: interface.mac,
        addr: SocketAddrV4::new(local, port),
    };
    let peer = Station {
        mac: peer_mac.try_into().unwrap(),
        addr: SocketAddrV4::new(peer_ip, port),
    };
    let template = HeaderTemplate::new(&me, &peer);
    let payload = vec![7u8; size];
    let send = |socket: &mut XskSocket| {
        let (chunk, bytes) = socket.tx_chunk().expect("free chunk");
        template.write(bytes, size, 0);
        bytes[HEADERS_LEN..HEADERS_LEN + size].copy_from_slice(&payload);
        socket.queue_send(chunk, HEADERS_LEN + size);
        socket.flush().expect("send");
    };
    let wait = |socket: &mut XskSocket| loop {
        let mut got = false;
        socket.receive(1, |frame| got = parse(frame).is_ok());
        if got {
            return;
        }
    };
    let samples = time_round_trips(ping, round_trips, &mut socket, send, wait);
    report(ping, size, samples);
    Ok(())
}

fn udp_pingpong(
    local: Ipv4Addr,
    port: u16,
    peer: Ipv4Addr,
    ping: bool,
    round_trips: usize,
    size: usize,
) -> std::io::Result<()> {
    let socket = std::net::UdpSocket::bind(SocketAddrV4::new(local, port))?;
    socket.connect(SocketAddrV4::new(peer, port))?;
    socket.set_nonblocking(true)?;
    let payload = vec![7u8; size];
    let mut inbox = vec![0u8; size.max(1)];
    let wait = |inbox: &mut Vec<u8>| loop {
        if socket.recv(inbox).is_ok() {
            return;
        }
    };
    let send = |_: &mut Vec<u8>| {
        socket.send(&payload).expect("send");
    };
    let samples = time_round_trips(ping, round_trips, &mut inbox, send, wait);
    report(ping, size, samples);
    Ok(())
}

/// Round trips after 1,000 of warm-up: the pinging side sends then waits, the serving side
/// waits then sends. Returns half of each timed round trip in microseconds.
fn time_round_trips<S>(
    ping: bool,
    round_trips: usize,
    state: &mut S,
    send: impl Fn(&mut S),
    wait: impl Fn(&mut S),
) -> Vec<f64> {
    const WARM_UP: usize = 1000;
    // Both sides start within this of each other (they are launched one after the other).
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut samples = Vec::with_capacity(round_trips);
    for i in 0..round_trips + WARM_UP {
        let start = Instant::now();
        if ping {
            send(state);
            wait(state);
        } else {
            wait(state);
            send(state);
        }
        if i >= WARM_UP {
            samples.push(start.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    samples
}

fn report(ping: bool, size: usize, mut samples: Vec<f64>) {
    if ping {
        samples.sort_by(f64::total_cmp);
        println!(
            "{size} B: median {:.2} us, min {:.2}, p99 {:.2}",
            samples[samples.len() / 2],
            samples[0],
            samples[samples.len() * 99 / 100]
        );
    }
}
