//! Message-id windows: which messages of one direction of a peer pair are finished.
//!
//! Ids are assigned in order per (sender, receiver). At most [`MSG_WINDOW`] are unfinished at a
//! time, so a bitmap of that many bits above a base id says which are finished. Anything older
//! than the base is finished; a frame for it is a duplicate.
//!
//! Ids finish mostly in order, so the bitmap's first words are nearly always the only ones in
//! use: those live in the peer's state, and the rest of the map is allocated the first time an
//! id 128 or more above the base ([`NEAR_WORDS`] words) finishes, and kept for the peer's
//! lifetime. A job's every peer thus costs a few dozen bytes a direction, a pair with many
//! messages open that finish in order allocates nothing, and a pair that takes one of
//! thousands of unmatched messages out of order gets the whole window.

use crate::config::MSG_WINDOW;

const WORDS: usize = (MSG_WINDOW / 64) as usize;
/// Words of the map kept in the peer's state: a pair whose ids never finish 128 or more past
/// the oldest open one (a ping-pong, a stream finishing in order) never allocates.
const NEAR_WORDS: usize = 2;
/// Ids above the base whose bits live in the peer's state.
#[cfg(test)]
const NEAR_IDS: u32 = NEAR_WORDS as u32 * 64;
const _: () = assert!(
    WORDS <= u16::MAX as usize,
    "`IdWindow::used` counts words in a u16"
);
const _: () = assert!(
    MSG_WINDOW.is_multiple_of(64) && WORDS > NEAR_WORDS,
    "the done bitmap is whole u64 words, and reaches past the ones kept near"
);

#[derive(Debug, Clone, Default)]
pub(crate) struct IdWindow {
    /// Oldest id not yet finished.
    pub base: u32,
    /// Words of the map from this one on are all zero, and the one before it is not: moving
    /// the base touches only the words in use, usually the first alone.
    used: u16,
    /// Bit i of word w (w < `NEAR_WORDS`): id `base + 64 w + i` is finished.
    near: [u64; NEAR_WORDS],
    /// The map's words from `NEAR_WORDS` on, once an id that far above the base finished.
    far: Option<Box<[u64; WORDS - NEAR_WORDS]>>,
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

    /// True once the map's far words were needed: an id finished 128 or more above the base
    /// (so more than 128 were unfinished at once).
    #[cfg(test)]
    pub fn reaches_far(&self) -> bool {
        self.far.is_some()
    }

    fn is_done(&self, distance: u32) -> bool {
        self.word((distance / 64) as usize) & (1 << (distance % 64)) != 0
    }

    /// Word `index` of the map; far words never allocated are zero.
    fn word(&self, index: usize) -> u64 {
        match index.checked_sub(NEAR_WORDS) {
            None => self.near[index],
            Some(far) => self.far.as_ref().map_or(0, |words| words[far]),
        }
    }

    /// Word `index` of the map to change, allocating the far words the first time one is
    /// needed. Only `finish` asks for a word at or past `used`; moving the base rewrites words
    /// below `used`, whose far part exists if `used` reaches it.
    fn word_mut(&mut self, index: usize) -> &mut u64 {
        match index.checked_sub(NEAR_WORDS) {
            None => &mut self.near[index],
            Some(far) => &mut self
                .far
                .get_or_insert_with(|| Box::new([0; WORDS - NEAR_WORDS]))[far],
        }
    }

    pub fn finish(&mut self, id: u32) {
        let distance = id.wrapping_sub(self.base);
        if distance >= MSG_WINDOW {
            return;
        }
        let word = (distance / 64) as usize;
        *self.word_mut(word) |= 1 << (distance % 64);
        self.used = self.used.max(word as u16 + 1);
        self.advance();
    }

    /// Moves the base past every finished id at its front: whole words at a time, then bits.
    fn advance(&mut self) {
        while self.near[0] == u64::MAX {
            let used = usize::from(self.used);
            for word in 1..used {
                *self.word_mut(word - 1) = self.word(word);
            }
            *self.word_mut(used - 1) = 0;
            self.used -= 1;
            self.base = self.base.wrapping_add(64);
        }
        let finished = self.near[0].trailing_ones();
        if finished > 0 {
            self.shift_right(finished);
            self.base = self.base.wrapping_add(finished);
        }
        // Shifting empties the top words as the base nears the far ids finished: stop
        // counting them, or every later id shifts the whole map.
        while self.used > 0 && self.word(usize::from(self.used) - 1) == 0 {
            self.used -= 1;
        }
    }

    /// Shifts the map right by `bits` (< 64), over the words that hold any bit: usually the
    /// first alone (ids finish mostly in order), so finishing an id costs a few instructions
    /// whatever the window's size.
    fn shift_right(&mut self, bits: u32) {
        for word in 0..usize::from(self.used) {
            let next = if word + 1 < WORDS {
                self.word(word + 1)
            } else {
                0
            };
            let carry = next << (64 - bits);
            *self.word_mut(word) = (self.word(word) >> bits) | carry;
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

    /// A pair with few messages open keeps its map in the peer's state; the far words are
    /// allocated once an id past them finishes, and an id beyond the window changes nothing.
    #[test]
    fn the_far_words_are_allocated_only_when_an_id_needs_them() {
        let mut window = IdWindow::default();
        for id in 1..NEAR_IDS {
            window.finish(id);
        }
        window.finish(MSG_WINDOW);
        assert!(!window.reaches_far());
        assert_eq!(window.place(NEAR_IDS), IdPlace::Open);
        window.finish(NEAR_IDS + 1);
        assert!(window.reaches_far());
        assert_eq!(window.place(NEAR_IDS + 1), IdPlace::Finished);
        assert_eq!(window.place(NEAR_IDS), IdPlace::Open);
        window.finish(0);
        assert_eq!(window.base, NEAR_IDS);
        window.finish(NEAR_IDS);
        assert_eq!(window.base, NEAR_IDS + 2);
        assert_eq!(window.place(NEAR_IDS + 2 + MSG_WINDOW - 1), IdPlace::Open);
    }

    /// Once the base has passed a far id, ids that finish in order touch the first word alone
    /// again: `used` comes back down as the words above empty, or every later finish shifts
    /// the whole map (256 words, ~0.5 us an id, for as long as ids finish in order).
    #[test]
    fn the_words_in_use_shrink_once_the_base_passes_a_far_id() {
        let mut window = IdWindow::default();
        window.finish(MSG_WINDOW - 1);
        assert_eq!(usize::from(window.used), WORDS);
        for id in 0..MSG_WINDOW - 1 {
            window.finish(id);
            let used = usize::from(window.used);
            assert!(
                used == 0 || window.word(used - 1) != 0,
                "id {id}: used {used}"
            );
        }
        assert_eq!(window.base, MSG_WINDOW);
        window.finish(MSG_WINDOW);
        assert_eq!(window.used, 0);
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
        /// protocol finishes ids within one window, mostly in order), across many windows,
        /// with runs open in the near words alone and far past them.
        #[test]
        fn the_window_agrees_with_a_set_of_finished_ids(seed: u64, block in 1usize..2_500) {
            let mut ids: Vec<u32> = (0..6_000).collect();
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
                let probes = [
                    base,
                    id,
                    base + 63,
                    base + 64,
                    base + NEAR_IDS - 1,
                    base + NEAR_IDS,
                    id + 1,
                    base + MSG_WINDOW - 1,
                ];
                for probe in probes {
                    let expected = if finished.contains(&probe) {
                        IdPlace::Finished
                    } else {
                        IdPlace::Open
                    };
                    proptest::prop_assert_eq!(window.place(probe), expected, "id {}", probe);
                }
            }
        }

        /// Any id at all, as a broken or hostile peer may send, from a base anywhere (the wrap
        /// of the id space included): ids beyond the window and older than the base change
        /// nothing, the base is the oldest unfinished id, every id's place agrees with a
        /// model, the words past `used` are zero and the one before it is not, and the far
        /// words exist once, and only once, an id finished 128 or more above the base.
        #[test]
        fn any_ids_from_any_base_agree_with_a_model(
            start in proptest::prop_oneof![
                proptest::prelude::Just(0u32),
                (u32::MAX - 2 * MSG_WINDOW)..=u32::MAX,
                proptest::prelude::any::<u32>(),
            ],
            seed: u64,
            near in 1u32..2 * NEAR_IDS,
        ) {
            let mut state = seed | 1;
            let mut random = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state
            };
            let mut window = IdWindow { base: start, ..IdWindow::default() };
            let mut finished = std::collections::BTreeSet::new();
            let mut far = false;
            for _ in 0..3_000 {
                let base = window.base;
                let distance = match random() % 8 {
                    0..=3 => random() as u32 % near,
                    4 | 5 => random() as u32 % MSG_WINDOW,
                    6 => random() as u32,
                    _ => MSG_WINDOW - 1 - random() as u32 % 64,
                };
                let id = base.wrapping_add(distance);
                window.finish(id);
                if distance < MSG_WINDOW {
                    finished.insert(distance);
                    far |= distance >= NEAR_IDS;
                }
                let mut moved = 0;
                while finished.contains(&moved) {
                    moved += 1;
                }
                if moved > 0 {
                    finished = finished
                        .into_iter()
                        .filter(|&d| d > moved)
                        .map(|d| d - moved)
                        .collect();
                }
                proptest::prop_assert_eq!(window.base, base.wrapping_add(moved));
                proptest::prop_assert_eq!(window.reaches_far(), far);
                let used = usize::from(window.used);
                proptest::prop_assert!(used == 0 || window.word(used - 1) != 0);
                proptest::prop_assert!((used..WORDS).all(|word| window.word(word) == 0));
                let base = window.base;
                let probes = [0, 1, distance.wrapping_sub(moved), random() as u32 % MSG_WINDOW];
                for probe in probes.into_iter().filter(|&d| d < MSG_WINDOW) {
                    let expected = if finished.contains(&probe) {
                        IdPlace::Finished
                    } else {
                        IdPlace::Open
                    };
                    proptest::prop_assert_eq!(window.place(base.wrapping_add(probe)), expected);
                }
                proptest::prop_assert_eq!(window.place(base.wrapping_sub(1)), IdPlace::Finished);
                let beyond = window.place(base.wrapping_add(MSG_WINDOW));
                proptest::prop_assert_eq!(beyond, IdPlace::Beyond);
            }
            for distance in 0..MSG_WINDOW {
                let expected = if finished.contains(&distance) {
                    IdPlace::Finished
                } else {
                    IdPlace::Open
                };
                let place = window.place(window.base.wrapping_add(distance));
                proptest::prop_assert_eq!(place, expected);
            }
        }
    }
}
