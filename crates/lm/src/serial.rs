//! Serial-number arithmetic (RFC 1982) for the 32-bit numbers LM counts up and lets wrap:
//! transfer numbers and admission epochs.
//!
//! A long-running node passes 2^32 transfers to one receiver (eleven hours at 100,000 a
//! second), so a number is compared with another only by their difference, taken modulo 2^32
//! and read as signed: `a` is ahead of `b` if `a - b` lies in `1..2^31`. That is right across
//! the wrap as long as the numbers compared are less than 2^31 apart, which the windows that
//! use it keep them by far (a receiver's remembered numbers, a sender's unfinished ones).

/// How far `a` is ahead of `b` (negative: behind), for numbers less than 2^31 apart.
pub(crate) fn ahead(a: u32, b: u32) -> i32 {
    a.wrapping_sub(b) as i32
}

/// Whether `a` comes before `b`.
pub(crate) fn is_before(a: u32, b: u32) -> bool {
    ahead(a, b) < 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_across_the_wrap() {
        assert_eq!(ahead(2, u32::MAX - 1), 4);
        assert_eq!(ahead(u32::MAX - 1, 2), -4);
        assert!(is_before(u32::MAX, 0) && !is_before(0, u32::MAX));
        assert!(is_before(5, 6) && !is_before(6, 6) && !is_before(7, 6));
    }
}
