//! Which transfers of one sender were delivered: bounded, whatever the number of transfers.
//!
//! A sender numbers its transfers to each receiver from [`StationConfig::first_number`] and
//! starts one only within [`MAX_IN_FLIGHT_PER_PEER`](super::MAX_IN_FLIGHT_PER_PEER) numbers of
//! its oldest unfinished one there (a span, not a count: a long transfer overtaken by many short
//! ones must not fall behind), half of [`DEDUP_WINDOW`]: so when the receiver sees number `n`,
//! every transfer before `n - DEDUP_WINDOW` is finished at its sender (delivered, or given up),
//! and the receiver may take anything that old for delivered. A frame of it that comes late is
//! answered with DELIVERED and dropped, never delivered twice.
//!
//! Numbers wrap past `u32::MAX` (a long-running sender passes 2^32 transfers to one receiver),
//! so "before" is serial-number order (`crate::serial`): the window's floor is never more than
//! [`DEDUP_WINDOW`] behind the newest number delivered, and the sender keeps its unfinished
//! numbers within half of that ahead of the oldest, so every number compared with the floor is
//! far less than 2^31 from it.
//!
//! [`StationConfig::first_number`]: super::StationConfig::first_number

use crate::serial;

/// Numbers of one sender's transfers remembered exactly.
pub const DEDUP_WINDOW: u32 = 64;

#[derive(Debug, Clone, Copy)]
pub(crate) struct DeliveredWindow {
    /// Every number before this is taken for delivered.
    floor: u32,
    /// Bit `i`: number `floor + i` was delivered (bit 0 is always clear).
    bits: u64,
}

impl DeliveredWindow {
    /// The window of a sender whose first number is `first`: every number before it counts
    /// as delivered, none from it on.
    pub(crate) fn starting_at(first: u32) -> Self {
        Self {
            floor: first,
            bits: 0,
        }
    }

    pub(crate) fn contains(&self, number: u32) -> bool {
        match self.offset(number) {
            None => true,
            Some(at) => at < DEDUP_WINDOW && self.bits & (1 << at) != 0,
        }
    }

    pub(crate) fn insert(&mut self, number: u32) {
        let Some(ahead) = self.offset(number) else {
            return;
        };
        if ahead >= DEDUP_WINDOW {
            self.slide(ahead - DEDUP_WINDOW + 1);
        }
        self.bits |= 1 << number.wrapping_sub(self.floor);
        let done = self.bits.trailing_ones();
        self.slide(done);
    }

    /// How far `number` is from the floor, or `None` if it comes before it.
    fn offset(&self, number: u32) -> Option<u32> {
        let ahead = serial::ahead(number, self.floor);
        u32::try_from(ahead).ok()
    }

    fn slide(&mut self, by: u32) {
        self.floor = self.floor.wrapping_add(by);
        self.bits = if by >= 64 { 0 } else { self.bits >> by };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_out_of_order_deliveries_and_slides() {
        let mut w = DeliveredWindow::starting_at(1);
        assert!(!w.contains(1));
        w.insert(3);
        assert!(w.contains(3) && !w.contains(1) && !w.contains(2));
        w.insert(1);
        w.insert(2);
        assert!(w.contains(1) && w.contains(2) && w.contains(3) && !w.contains(4));
        // Far ahead: everything more than a window behind it counts as finished.
        w.insert(200);
        assert!(w.contains(200) && w.contains(200 - DEDUP_WINDOW) && !w.contains(199));
        w.insert(200);
        assert!(w.contains(200));
    }

    #[test]
    fn numbers_across_the_wrap_are_neither_lost_nor_taken_twice() {
        let first = u32::MAX - 2;
        let mut w = DeliveredWindow::starting_at(first);
        assert!(w.contains(first - 1) && !w.contains(first));
        // Numbers past the wrap are ahead of those before it, not behind them.
        for number in [1, 0, u32::MAX] {
            assert!(!w.contains(number), "{number} is new");
            w.insert(number);
        }
        assert!(w.contains(1) && w.contains(u32::MAX) && !w.contains(first));
        assert!(!w.contains(u32::MAX - 1) && !w.contains(2));
        w.insert(first);
        w.insert(u32::MAX - 1);
        assert!((0..=1).chain(first..=u32::MAX).all(|n| w.contains(n)));
        assert!(!w.contains(2));
        // Sliding far ahead across the wrap keeps the window's span.
        let mut w = DeliveredWindow::starting_at(first);
        w.insert(100);
        let floor = 100 - DEDUP_WINDOW + 1;
        assert!(w.contains(floor - 1) && !w.contains(floor) && !w.contains(99));
        assert!(w.contains(first) && w.contains(u32::MAX));
    }
}
