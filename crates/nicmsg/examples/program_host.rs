//! A job whose ranks wait for their engine's program `hello` to set its flag 0, for the
//! command-line management of programs (`nicmsg pdl load|run|send|list|output|unload`): load
//! `hello` into each rank's engine from a shell, start it, send it trigger 1, and each rank
//! ends.
//! Run: `nicmsg run -n 2 --job 7 -- target/release/examples/program_host`, then in another
//! shell `nicmsg pdl load --job 7 --rank 0 hello.pdl` and so on.

use nicmsg::{Comm, ProgramId};
use std::time::{Duration, Instant};

/// How long the ranks wait for the flag before giving up (with a message, not a hang).
const PATIENCE: Duration = Duration::from_secs(120);

fn main() -> Result<(), nicmsg::Error> {
    let comm = Comm::init()?;
    let programs = comm.programs();
    let hello = ProgramId::of_name("hello");
    println!(
        "program_host: rank {} waiting for hello's flag 0",
        comm.rank()
    );
    let started = Instant::now();
    while !programs.flag(hello, 0)? {
        if started.elapsed() > PATIENCE {
            eprintln!(
                "program_host: rank {}: no flag after {PATIENCE:?}",
                comm.rank()
            );
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    comm.barrier()?;
    println!("program_host: rank {} saw hello's flag", comm.rank());
    Ok(())
}
