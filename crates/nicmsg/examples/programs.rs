//! PANIC's example programs (`examples/pdl/`) on a real job, every result checked: figure 2's
//! ping against a pong on rank 1 (loaded there by rank 0), figure 4's delivertest into rank 1's
//! segment, a key-value look-up rank 1's engine answers without its host, a filter that drops
//! messages without the token, and a barrier and an all-reduce completed on the engines while
//! every host computes.
//! Run: `nicmsg run -n 2 -- target/release/examples/programs` (any size from 2; `--netns`,
//! `--loss 5%` as for any job).

use nicmsg::{Comm, Error, ProgramId, Programs};
use std::time::{Duration, Instant};

fn module(name: &str, source: &str) -> Vec<u8> {
    let compiled = nicmsg_pdl::compile(source)
        .unwrap_or_else(|errors| panic!("{}", nicmsg_pdl::render_all(name, source, &errors)));
    compiled.encode().expect("a compiled module encodes")
}

const PING: &str = include_str!("../../../examples/pdl/ping.pdl");
const PONG: &str = include_str!("../../../examples/pdl/pong.pdl");
const DELIVERTEST: &str = include_str!("../../../examples/pdl/delivertest.pdl");
const KVLOOKUP: &str = include_str!("../../../examples/pdl/kvlookup.pdl");
const FILTER: &str = include_str!("../../../examples/pdl/filter.pdl");
const BARRIER: &str = include_str!("../../../examples/pdl/barrier.pdl");
const ALLREDUCE: &str = include_str!("../../../examples/pdl/allreduce.pdl");

/// How long a step may take before the example gives up (a hang is a failure, with a reason).
const STEP_LIMIT: Duration = Duration::from_secs(60);

fn main() -> Result<(), Error> {
    let comm = Comm::init()?;
    if comm.size() < 2 {
        eprintln!("programs needs at least 2 ranks");
        std::process::exit(2);
    }
    let programs = comm.programs();
    figure_2_ping(&comm, &programs)?;
    comm.barrier()?;
    figure_4_delivertest(&comm, &programs)?;
    comm.barrier()?;
    key_value_lookup(&comm, &programs)?;
    comm.barrier()?;
    token_filter(&comm, &programs)?;
    comm.barrier()?;
    engine_barrier_and_allreduce(&comm, &programs)?;
    comm.barrier()?;
    if comm.rank() == 0 {
        println!("programs: all examples verified");
    }
    Ok(())
}

/// Rank 0 loads figure 2's pong on rank 1 (as id 415, which ping addresses), and ping, as
/// printed in the paper, on itself; ping's 100 round trips are timed with CLOCK and read back
/// through DISPLAY.
fn figure_2_ping(comm: &Comm, programs: &Programs<'_>) -> Result<(), Error> {
    if comm.rank() != 0 {
        return Ok(());
    }
    let pong = programs.load_as(1, ProgramId(415), &module("pong.pdl", PONG))?;
    programs.run(1, pong)?;
    let ping = programs.load(0, &module("ping.pdl", PING))?;
    programs.run(0, ping)?;
    let mut shown = Vec::new();
    let started = Instant::now();
    while shown.len() < 200 {
        shown.extend(programs.output(0, Some(ping))?);
        assert!(
            started.elapsed() < STEP_LIMIT,
            "ping: {} of 200 values",
            shown.len()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(shown.len(), 200, "ping displays 100 pairs");
    let mut round_trips: Vec<i64> = shown
        .chunks(2)
        .map(|pair| pair[1].value - pair[0].value)
        .collect();
    assert!(round_trips.iter().all(|&rtt| rtt > 0), "{round_trips:?}");
    round_trips.sort_unstable();
    println!(
        "ping: 100 round trips engine to engine, median {:.1} us (min {:.1}, max {:.1})",
        round_trips[50] as f64 / 1e3,
        round_trips[0] as f64 / 1e3,
        round_trips[99] as f64 / 1e3
    );
    programs.unload(1, pong)
}

/// Rank 1 shares segment 2; rank 0 loads figure 4's delivertest on rank 1 and triggers it.
fn figure_4_delivertest(comm: &Comm, programs: &Programs<'_>) -> Result<(), Error> {
    let mut memory = [0u8; 64];
    let segment = if comm.rank() == 1 {
        Some(programs.share(2, &mut memory)?)
    } else {
        None
    };
    comm.barrier()?;
    if comm.rank() == 0 {
        let id = programs.load(1, &module("delivertest.pdl", DELIVERTEST))?;
        programs.run(1, id)?;
        programs.send(1, id, 10, b"deliver")?;
    }
    if let Some(segment) = &segment {
        let mut words = [0u8; 24];
        wait_until("delivertest's delivery", || {
            segment.read(0, &mut words).map(|()| words[0] == 2)
        })?;
        let word = |i: usize| i64::from_le_bytes(words[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!([word(0), word(1), word(2)], [2, 3, 4]);
        println!("delivertest: delivered into rank 1's segment 2");
    }
    comm.barrier()?;
    drop(segment);
    Ok(())
}

/// Rank 1's host fills a table and loads the look-up on its engine; every other rank asks it
/// for keys and gets the answers from the engine.
fn key_value_lookup(comm: &Comm, programs: &Programs<'_>) -> Result<(), Error> {
    const SLOTS: usize = 1024;
    let value_of = |key: i64| key * 1000 + 7;
    let mut table = vec![0u8; SLOTS * 16];
    let segment = if comm.rank() == 1 {
        let segment = programs.share(1, &mut table)?;
        for key in 1..=500i64 {
            let slot = key as usize % SLOTS;
            segment.write(slot * 16, &key.to_le_bytes())?;
            segment.write(slot * 16 + 8, &value_of(key).to_le_bytes())?;
        }
        let id = programs.load(1, &module("kvlookup.pdl", KVLOOKUP))?;
        programs.run(1, id)?;
        Some(segment)
    } else {
        None
    };
    comm.barrier()?;
    if comm.rank() != 1 {
        let kv = ProgramId::of_name("kvlookup");
        for key in [1i64, 250, 500, 501, 9999] {
            let mut answer = [0u8; 16];
            let reply = programs.call((1, kv, 20), &key.to_le_bytes(), 21, &mut answer)?;
            let found = (1..=500).contains(&key);
            assert_eq!(reply.len, if found { 16 } else { 8 }, "key {key}");
            assert_eq!(i64::from_le_bytes(answer[..8].try_into().unwrap()), key);
            if found {
                let value = i64::from_le_bytes(answer[8..].try_into().unwrap());
                assert_eq!(value, value_of(key));
            }
        }
        if comm.rank() == 0 {
            println!("kvlookup: 5 keys answered by rank 1's engine, its host not involved");
        }
    }
    comm.barrier()?;
    if comm.rank() == 1 {
        // The look-ups reached rank 1's engine only: its host posted no receive and was not
        // woken; the engine counts the messages its programs took.
        let stats = comm.stats()?;
        let (engine, vm) = stats.programs.expect("programs are on");
        let asked = 5 * u64::from(comm.size() - 1);
        assert!(engine.messages >= asked, "{engine:?}");
        println!(
            "kvlookup: rank 1's engine answered {asked} look-ups ({} messages, {} instructions so far); its host took none",
            engine.messages, vm.instructions
        );
    }
    drop(segment);
    Ok(())
}

/// Rank 1 sets a token and loads the filter; rank 0 sends messages with and without it; rank 1's
/// host receives only the good ones, and the program's counts say how many it dropped.
fn token_filter(comm: &Comm, programs: &Programs<'_>) -> Result<(), Error> {
    const TOKEN: i64 = 0x5eed_cafe;
    let mut keys = [0u8; 24];
    let segment = if comm.rank() == 1 {
        let segment = programs.share(1, &mut keys)?;
        segment.write(0, &TOKEN.to_le_bytes())?;
        let id = programs.load(1, &module("filter.pdl", FILTER))?;
        programs.run(1, id)?;
        Some(segment)
    } else {
        None
    };
    comm.barrier()?;
    let filter = ProgramId::of_name("filter");
    if comm.rank() == 0 {
        for i in 0..6i64 {
            let token = if i % 2 == 0 { TOKEN } else { TOKEN + 1 };
            let mut message = token.to_le_bytes().to_vec();
            message.extend_from_slice(&i.to_le_bytes());
            programs.send(1, filter, 30, &message)?;
        }
    }
    if let Some(segment) = &segment {
        for expected in [0i64, 2, 4] {
            let mut message = [0u8; 16];
            let reply = programs.receive(30, &mut message)?;
            assert_eq!(reply.len, 16);
            assert_eq!(reply.origin, 0, "a passed message keeps its origin");
            assert_eq!(
                i64::from_le_bytes(message[8..].try_into().unwrap()),
                expected
            );
        }
        let mut counts = [0u8; 16];
        wait_until("the filter's counts", || {
            segment.read(8, &mut counts).map(|()| counts[8] == 3)
        })?;
        assert_eq!((counts[0], counts[8]), (3, 3), "passed, dropped");
        println!("filter: 3 messages passed to rank 1's host, 3 dropped by its engine");
    }
    comm.barrier()?;
    drop(segment);
    Ok(())
}

/// Every rank loads the barrier and the all-reduce on its own engine, enters both, computes,
/// and then finds them complete.
fn engine_barrier_and_allreduce(comm: &Comm, programs: &Programs<'_>) -> Result<(), Error> {
    let me = comm.rank();
    let mut results = [0u8; 8];
    let segment = programs.share(1, &mut results)?;
    let barrier = programs.load(me, &module("barrier.pdl", BARRIER))?;
    programs.run(me, barrier)?;
    let allreduce = programs.load(me, &module("allreduce.pdl", ALLREDUCE))?;
    programs.run(me, allreduce)?;
    comm.barrier()?;
    for round in 0..3i64 {
        programs.send(me, barrier, 50, &[])?;
        let mine = 100 * round + i64::from(me);
        programs.send(me, allreduce, 40, &mine.to_le_bytes())?;
        // The host computes; the engines complete both meanwhile.
        let busy_until = Instant::now() + Duration::from_millis(5);
        while Instant::now() < busy_until {
            std::hint::spin_loop();
        }
        programs.wait_flag(barrier, 0)?;
        programs.clear_flag(barrier, 0)?;
        programs.wait_flag(allreduce, 0)?;
        programs.clear_flag(allreduce, 0)?;
        let mut sum = [0u8; 8];
        segment.read(0, &mut sum)?;
        let ranks = i64::from(comm.size());
        let expected = 100 * round * ranks + ranks * (ranks - 1) / 2;
        assert_eq!(i64::from_le_bytes(sum), expected, "round {round}");
    }
    comm.barrier()?;
    drop(segment);
    if me == 0 {
        println!("barrier, allreduce: 3 rounds each completed on the engines");
    }
    Ok(())
}

/// Polls `done` (which may fail) until it holds, for at most [`STEP_LIMIT`].
fn wait_until(what: &str, mut done: impl FnMut() -> Result<bool, Error>) -> Result<(), Error> {
    let started = Instant::now();
    while !done()? {
        assert!(
            started.elapsed() < STEP_LIMIT,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}
