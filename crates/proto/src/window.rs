//! Message-id windows: which messages of one direction of a peer pair are finished.
//!
//! Ids are assigned in order per (sender, receiver). At most [`MSG_WINDOW`] are unfinished at a
//! time, so one 64-bit bitmap above a base id says which are finished. Anything older than the
//! base is finished; a frame for it is a duplicate.

use crate::config::MSG_WINDOW;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct IdWindow {
    /// Oldest id not yet finished.
    pub base: u32,
    /// Bit i: id `base + i` is finished.
    done: u64,
}

/// Where an id lies relative to a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdPlace {
    Finished,
    Open,
    /// Beyond the window: no honest peer sends it.
    Beyond,
}

const _: () = assert!(MSG_WINDOW == 64, "the done bitmap is a u64");

impl IdWindow {
    pub fn place(&self, id: u32) -> IdPlace {
        let distance = id.wrapping_sub(self.base);
        if distance >= 1 << 31 {
            IdPlace::Finished
        } else if distance >= MSG_WINDOW {
            IdPlace::Beyond
        } else if self.done & (1 << distance) != 0 {
            IdPlace::Finished
        } else {
            IdPlace::Open
        }
    }

    pub fn finish(&mut self, id: u32) {
        let distance = id.wrapping_sub(self.base);
        if distance >= MSG_WINDOW {
            return;
        }
        self.done |= 1 << distance;
        while self.done & 1 != 0 {
            self.done >>= 1;
            self.base = self.base.wrapping_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finishes_out_of_order() {
        let mut window = IdWindow::default();
        window.finish(2);
        assert_eq!(window.base, 0);
        assert_eq!(window.place(2), IdPlace::Finished);
        window.finish(0);
        window.finish(1);
        assert_eq!(window.base, 3);
        assert_eq!(window.place(1), IdPlace::Finished);
        assert_eq!(window.place(3), IdPlace::Open);
        assert_eq!(window.place(3 + MSG_WINDOW), IdPlace::Beyond);
    }
}
