//! Which transfers of one sender were delivered: bounded, whatever the number of transfers.
//!
//! A sender numbers its transfers to each receiver from 1 and starts one only within
//! [`MAX_IN_FLIGHT_PER_PEER`](super::MAX_IN_FLIGHT_PER_PEER) numbers of its oldest unfinished
//! one there (a span, not a count: a long transfer overtaken by many short ones must not fall
//! behind), half of [`DEDUP_WINDOW`]: so when the receiver sees number `n`, every transfer below
//! `n - DEDUP_WINDOW` is finished at its sender (delivered, or given up), and the receiver may
//! take anything that old for delivered. A frame of it that comes late is answered with
//! DELIVERED and dropped, never delivered twice.

/// Numbers of one sender's transfers remembered exactly.
pub const DEDUP_WINDOW: u32 = 64;

#[derive(Debug, Clone, Copy)]
pub(crate) struct DeliveredWindow {
    /// Every number below this is taken for delivered.
    floor: u32,
    /// Bit `i`: number `floor + i` was delivered (bit 0 is always clear).
    bits: u64,
}

impl Default for DeliveredWindow {
    fn default() -> Self {
        Self { floor: 1, bits: 0 }
    }
}

impl DeliveredWindow {
    pub(crate) fn contains(&self, number: u32) -> bool {
        if number < self.floor {
            return true;
        }
        let at = number - self.floor;
        at < DEDUP_WINDOW && self.bits & (1 << at) != 0
    }

    pub(crate) fn insert(&mut self, number: u32) {
        if number < self.floor {
            return;
        }
        let ahead = number - self.floor;
        if ahead >= DEDUP_WINDOW {
            self.slide(ahead - DEDUP_WINDOW + 1);
        }
        self.bits |= 1 << (number - self.floor);
        let done = self.bits.trailing_ones();
        self.slide(done);
    }

    fn slide(&mut self, by: u32) {
        self.floor += by;
        self.bits = if by >= 64 { 0 } else { self.bits >> by };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_out_of_order_deliveries_and_slides() {
        let mut w = DeliveredWindow::default();
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
}
