//! Names of a process's life on the wire: endpoints with peers added by address (the protocol
//! core's datagram sockets, LM's open stations) name their conversations from a number that
//! differs for every process and every open, so that a peer tells a restarted endpoint from
//! the one it talked to before.

use std::net::SocketAddr;

/// A nonzero number naming this endpoint's life on the wire: the time, the process and the
/// address hashed with the standard library's randomly keyed hasher. Random-looking in every
/// bit: conversation names are the incarnation XOR a slot number, so two lives whose numbers
/// differ only in low bits would name their conversations alike.
pub fn fresh(local: SocketAddr) -> u32 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    std::time::SystemTime::now().hash(&mut hasher);
    std::process::id().hash(&mut hasher);
    local.hash(&mut hasher);
    let word = hasher.finish();
    ((word >> 32) as u32 ^ word as u32).max(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_opens_at_one_address_are_named_apart() {
        let address = "127.0.0.1:7000".parse().expect("an address");
        let (a, b) = (super::fresh(address), super::fresh(address));
        assert!(a != 0 && b != 0);
        assert_ne!(a, b, "a 32-bit coincidence, or the hasher is not keyed");
    }
}
