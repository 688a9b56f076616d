//! A ping-pong in one thread, for counting the instructions a round trip costs: two tagged
//! endpoints with inline engines on loopback, each message received by a turn that certainly
//! finds it (loopback delivers within the sender's system call), so no poll depends on the
//! other side's timing. Only the protocol's timers read the clock: on a quiet machine the
//! counts repeat within a few instructions; on a busy one delayed acknowledgements fire a
//! varying number of times (up to 5 % more). Run under callgrind twice with different counts
//! and take the difference:
//!
//! ```sh
//! valgrind --tool=callgrind target/release/examples/round_trip_cost 8 1000
//! valgrind --tool=callgrind target/release/examples/round_trip_cost 8 4000
//! ```
//!
//! (totals of the second less the first) / 3000 is the cost of one round trip of both ends.

use std::net::{Ipv4Addr, SocketAddr};

use nicmsg::tagged::{SendOptions, Space, TagMatch, TaggedEndpoint};
use nicmsg::{EngineMode, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().map_or(Ok(8), |s| s.parse())?;
    let rounds: u64 = args.next().map_or(Ok(1000), |s| s.parse())?;
    let options = Options {
        engine: EngineMode::Inline,
        ..Options::default()
    };
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let a = TaggedEndpoint::bind(loopback, 4, options.clone())?;
    let b = TaggedEndpoint::bind(loopback, 4, options)?;
    let (to_a, to_b) = (a.local_addr(), b.local_addr());
    let mut buffer_a = vec![7u8; size];
    let mut buffer_b = vec![0u8; size];
    for _ in 0..rounds {
        bounce(&a, &b, to_b, &mut buffer_a, &mut buffer_b)?;
        bounce(&b, &a, to_a, &mut buffer_b, &mut buffer_a)?;
    }
    println!("{rounds} round trips of {size} bytes");
    Ok(())
}

/// `from` sends `out` to `to` (endpoint `at`), which receives it into `into`.
fn bounce(
    from: &TaggedEndpoint,
    at: &TaggedEndpoint,
    to: SocketAddr,
    out: &mut [u8],
    into: &mut [u8],
) -> Result<(), nicmsg::Error> {
    let send = from.isend(&[out], to, (Space::Tagged, 1), SendOptions::default())?;
    at.irecv([into], None, (Space::Tagged, TagMatch::Tag(1)))?
        .wait()?;
    send.wait()?;
    Ok(())
}
