//! Message-id windows: which messages of one direction of a peer pair are finished.
//!
//! Ids are assigned in order per (sender, receiver). At most [`MSG_WINDOW`] are unfinished at a
//! time, so a bitmap of that many bits above a base id says which are finished. Anything older
//! than the base is finished; a frame for it is a duplicate.

use crate::config::MSG_WINDOW;

const WORDS: usize = (MSG_WINDOW / 64) as usize;
const _: () = assert!(
    WORDS <= u8::MAX as usize,
    "`IdWindow::used` counts words in a byte"
);
const _: () = assert!(
    MSG_WINDOW.is_multiple_of(64),
    "the done bitmap is whole u64 words"
);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdWindow {
    /// Oldest id not yet finished.
    pub base: u32,
    /// Bit i: id `base + i` is finished.
    done: [u64; WORDS],
    /// Words of `done` from this one on are all zero (a bound, not always the least one), so
    /// moving the base touches only the words in use: usually the first alone. A byte: it fits
    /// in the padding after `base`, so a peer's state does not grow.
    used: u8,
}

impl Default for IdWindow {
    fn default() -> Self {
        Self {
            base: 0,
            done: [0; WORDS],
            used: 0,
        }
    }
}

/// Where an id lies relative to a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdPlace {
    Finished,
    Open,
    /// Beyond the window: no honest peer sends it.
    Beyond,
}

impl IdWindow {
    pub fn place(&self, id: u32) -> IdPlace {
        let distance = id.wrapping_sub(self.base);
        if distance >= 1 << 31 {
            IdPlace::Finished
        } else if distance >= MSG_WINDOW {
            IdPlace::Beyond
        } else if self.is_done(distance) {
            IdPlace::Finished
        } else {
            IdPlace::Open
        }
    }

    fn is_done(&self, distance: u32) -> bool {
        self.done[(distance / 64) as usize] & (1 << (distance % 64)) != 0
    }

    pub fn finish(&mut self, id: u32) {
        let distance = id.wrapping_sub(self.base);
        if distance >= MSG_WINDOW {
            return;
        }
        let word = (distance / 64) as usize;
        self.done[word] |= 1 << (distance % 64);
        self.used = self.used.max(word as u8 + 1);
        self.advance();
    }

    /// Moves the base past every finished id at its front: whole words at a time, then bits.
    fn advance(&mut self) {
        while self.done[0] == u64::MAX {
            let used = usize::from(self.used);
            self.done.copy_within(1..used, 0);
            self.done[used - 1] = 0;
            self.used -= 1;
            self.base = self.base.wrapping_add(64);
        }
        let finished = self.done[0].trailing_ones();
        if finished > 0 {
            self.shift_right(finished);
            self.base = self.base.wrapping_add(finished);
        }
    }

    /// Shifts the bitmap right by `bits` (< 64), over the words that hold any bit: usually the
    /// first alone (ids finish mostly in order), so finishing an id costs a few instructions
    /// whatever the window's size.
    fn shift_right(&mut self, bits: u32) {
        for word in 0..usize::from(self.used) {
            let carry = self
                .done
                .get(word + 1)
                .map_or(0, |next| next << (64 - bits));
            self.done[word] = (self.done[word] >> bits) | carry;
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

    #[test]
    fn ids_finished_across_words_move_the_base_past_them_all() {
        let mut window = IdWindow::default();
        for id in (1..200).rev() {
            window.finish(id);
            assert_eq!(window.base, 0);
        }
        assert_eq!(window.place(130), IdPlace::Finished);
        assert_eq!(window.place(200), IdPlace::Open);
        window.finish(0);
        assert_eq!(window.base, 200);
        assert_eq!(window.place(199), IdPlace::Finished);
        assert_eq!(window.place(200 + MSG_WINDOW - 1), IdPlace::Open);
        assert_eq!(window.place(200 + MSG_WINDOW), IdPlace::Beyond);
        window.finish(201);
        window.finish(200 + MSG_WINDOW - 1);
        assert_eq!(window.base, 200);
        assert_eq!(window.place(200 + MSG_WINDOW - 1), IdPlace::Finished);
        window.finish(200);
        assert_eq!(window.base, 202);
    }

    #[test]
    fn ids_wrap_around() {
        let mut window = IdWindow {
            base: u32::MAX - 1,
            ..IdWindow::default()
        };
        window.finish(u32::MAX - 1);
        window.finish(u32::MAX);
        window.finish(0);
        assert_eq!(window.base, 1);
        assert_eq!(window.place(u32::MAX), IdPlace::Finished);
    }

    proptest::proptest! {
        /// Against a model (the set of finished ids): the base is the oldest unfinished id and
        /// every id's place agrees, whatever order ids finish in within runs of `block` (the
        /// protocol finishes ids within one window, mostly in order), across many windows.
        #[test]
        fn the_window_agrees_with_a_set_of_finished_ids(seed: u64, block in 1usize..300) {
            let mut ids: Vec<u32> = (0..2_000).collect();
            let mut state = seed | 1;
            for run in ids.chunks_mut(block) {
                for i in (1..run.len()).rev() {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    run.swap(i, (state % (i as u64 + 1)) as usize);
                }
            }
            let mut window = IdWindow::default();
            let mut finished = std::collections::BTreeSet::new();
            let mut base = 0;
            for id in ids {
                window.finish(id);
                finished.insert(id);
                while finished.contains(&base) {
                    base += 1;
                }
                proptest::prop_assert_eq!(window.base, base);
                for probe in [base, id, base + 63, base + 64, base + MSG_WINDOW - 1] {
                    let expected = if finished.contains(&probe) {
                        IdPlace::Finished
                    } else {
                        IdPlace::Open
                    };
                    proptest::prop_assert_eq!(window.place(probe), expected, "id {}", probe);
                }
            }
        }
    }
}
