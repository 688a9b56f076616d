//! Bounded table with generation-checked handles: insertion fails (instead of growing past it)
//! when the table holds its limit. Slots are allocated as the table first needs them and kept,
//! so its memory follows the most entries it ever held, not its limit: an MPI rank's tables
//! are sized for thousands of operations in flight and most programs keep a few. Each table
//! has its own key type (`SendKey`, `RecvKey`, `IncomingKey`), so a send's key cannot index the
//! receive table.

use std::marker::PhantomData;
use std::num::NonZeroU32;
use std::ops::{Index, IndexMut};

use crate::usage::TableUsage;

/// A table's key: a slot index of one particular table. Stored as index + 1 in a `NonZeroU32`,
/// so an `Option` of a key (the links between entries, a peer's start queue) costs no more
/// than the key.
pub(crate) trait Key: Copy {
    fn from_slot(slot: u32) -> Self;
    /// The slot index, as the host's `OpId` carries it.
    fn slot(self) -> u32;
}

macro_rules! table_key {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub(crate) struct $name(NonZeroU32);

        impl Key for $name {
            fn from_slot(slot: u32) -> Self {
                debug_assert!(slot < u32::MAX);
                Self(NonZeroU32::MIN.saturating_add(slot))
            }
            fn slot(self) -> u32 {
                self.0.get() - 1
            }
        }
    };
}

table_key!(
    /// A send's entry in the send table (`SendSide`).
    SendKey
);
table_key!(
    /// A receive's or probe's entry in the receive table (`RecvSide`).
    RecvKey
);
table_key!(
    /// An incoming message's entry in the incoming table (`RecvSide`).
    IncomingKey
);

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Slots a table allocates when it is made (fewer if its limit is lower): a ping-pong, and any
/// program that keeps a few dozen operations in flight, never allocates after start-up.
const FIRST_SLOTS: usize = 64;

pub(crate) struct Slab<K, T> {
    /// Every slot allocated so far; grows by one when no freed slot is left, up to the limit.
    slots: Vec<Slot<T>>,
    /// Free slot indices, used as a stack so recently freed (cache-warm) slots are reused first.
    free: Vec<u32>,
    pub(crate) usage: TableUsage,
    key: PhantomData<fn(K)>,
}

impl<K: Key, T> Slab<K, T> {
    /// A table of at most `limit` entries, with room for the first few allocated now.
    pub(crate) fn with_limit(limit: usize) -> Self {
        debug_assert!(limit < u32::MAX as usize);
        let first = limit.min(FIRST_SLOTS);
        Self {
            slots: Vec::with_capacity(first),
            free: Vec::with_capacity(first),
            usage: TableUsage::new(limit),
            key: PhantomData,
        }
    }

    /// Stores `value`; returns its key and generation, or `None` when full.
    pub(crate) fn insert(&mut self, value: T) -> Option<(K, u32)> {
        self.insert_with(|| value)
    }

    /// `insert` of the value `make` builds, built where it is stored when the compiler can
    /// (the large entries are not built on the stack and copied in).
    #[inline(always)]
    pub(crate) fn insert_with(&mut self, make: impl FnOnce() -> T) -> Option<(K, u32)> {
        let index = match self.free.pop() {
            Some(index) => index,
            None => self.new_slot()?,
        };
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.value.is_none());
        slot.value = Some(make());
        self.usage.set(self.usage.in_use + 1);
        Some((K::from_slot(index), slot.generation))
    }

    /// A slot never used before, if the table is below its limit. Only when the table holds
    /// more entries than it ever did: the vector's doubling makes that a handful of
    /// allocations in a table's life.
    #[cold]
    fn new_slot(&mut self) -> Option<u32> {
        let index = self.slots.len();
        if index >= self.usage.limit {
            return None;
        }
        self.slots.push(Slot {
            generation: 0,
            value: None,
        });
        Some(index as u32)
    }

    /// Slots allocated so far: every key handed out is below it.
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn remove(&mut self, key: K) -> Option<T> {
        let index = key.slot();
        let slot = self.slots.get_mut(index as usize)?;
        let value = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.usage.set(self.usage.in_use - 1);
        Some(value)
    }

    pub(crate) fn get(&self, key: K) -> Option<&T> {
        self.slots.get(key.slot() as usize)?.value.as_ref()
    }

    pub(crate) fn get_mut(&mut self, key: K) -> Option<&mut T> {
        self.slots.get_mut(key.slot() as usize)?.value.as_mut()
    }

    /// The key of the entry a host handle (slot and generation) names, if it still names one
    /// (a stale handle, of an entry freed and reused since, gets `None`).
    pub(crate) fn key_checked(&self, index: u32, generation: u32) -> Option<K> {
        let slot = self.slots.get(index as usize)?;
        (slot.generation == generation && slot.value.is_some()).then(|| K::from_slot(index))
    }

    /// The entry only if `generation` still names it (a stale handle gets `None`).
    pub(crate) fn get_checked(&self, index: u32, generation: u32) -> Option<&T> {
        self.get(self.key_checked(index, generation)?)
    }

    pub(crate) fn generation(&self, key: K) -> u32 {
        self.slots[key.slot() as usize].generation
    }

    /// Indices of occupied slots, in index order (deterministic). Stops at the last occupied
    /// one: the free stack keeps live entries at low indices, so walking a mostly idle table
    /// (every turn of a spinning engine asks for the next deadline) touches a few slots, not
    /// all of them.
    pub(crate) fn occupied(&self) -> impl Iterator<Item = K> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.value.is_some())
            .map(|(index, _)| K::from_slot(index as u32))
            .take(self.usage.in_use)
    }
}

/// A live entry by its key. Keys are held only by the entry's own bookkeeping (queues, maps,
/// links between entries) and removed with it, so a key that names no entry is a bug in this
/// crate, not bad input: it panics, as an out-of-bounds index does.
impl<K: Key + std::fmt::Debug, T> Index<K> for Slab<K, T> {
    type Output = T;

    fn index(&self, key: K) -> &T {
        match self.get(key) {
            Some(value) => value,
            None => dead_key(key),
        }
    }
}

impl<K: Key + std::fmt::Debug, T> IndexMut<K> for Slab<K, T> {
    fn index_mut(&mut self, key: K) -> &mut T {
        match self.get_mut(key) {
            Some(value) => value,
            None => dead_key(key),
        }
    }
}

#[cold]
#[inline(never)]
fn dead_key(key: impl std::fmt::Debug) -> ! {
    panic!("{key:?} names no live entry")
}

/// Per-entry side data of a table, beside it (kept apart so the hot entry stays small). Grows
/// with its table: [`cover`](Self::cover) each key the table hands out.
pub(crate) struct SideTable<K, T> {
    values: Vec<T>,
    /// What a slot holds when it is first allocated.
    blank: T,
    key: PhantomData<fn(K)>,
}

impl<K: Key, T: Clone> SideTable<K, T> {
    pub(crate) fn new(blank: T) -> Self {
        Self {
            values: vec![blank.clone(); FIRST_SLOTS],
            blank,
            key: PhantomData,
        }
    }

    /// Makes sure `key` has its value, as its table just handed it out.
    #[inline]
    pub(crate) fn cover(&mut self, key: K) {
        let needed = key.slot() as usize + 1;
        if needed > self.values.len() {
            self.grow_to(needed);
        }
    }

    #[cold]
    fn grow_to(&mut self, len: usize) {
        self.values.resize(len, self.blank.clone());
    }
}

impl<K: Key, T> Index<K> for SideTable<K, T> {
    type Output = T;

    fn index(&self, key: K) -> &T {
        &self.values[key.slot() as usize]
    }
}

impl<K: Key, T> IndexMut<K> for SideTable<K, T> {
    fn index_mut(&mut self, key: K) -> &mut T {
        &mut self.values[key.slot() as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_of_a_freed_entry_names_nothing_after_reuse() {
        let mut table: Slab<SendKey, &str> = Slab::with_limit(2);
        let (first, generation) = table.insert("first").unwrap();
        assert_eq!(table.key_checked(first.slot(), generation), Some(first));
        table.remove(first);
        let (reused, _) = table.insert("second").unwrap();
        assert_eq!(reused, first, "the freed slot is reused first");
        assert_eq!(table.key_checked(first.slot(), generation), None);
        assert_eq!(table.get_checked(first.slot(), generation), None);
    }

    #[test]
    fn a_full_table_refuses_instead_of_growing() {
        let mut table: Slab<RecvKey, u8> = Slab::with_limit(1);
        assert!(table.insert(1).is_some());
        assert!(table.insert(2).is_none());
        assert_eq!(table.usage.in_use, 1);
    }

    #[test]
    fn a_table_allocates_slots_as_it_first_needs_them_and_reuses_freed_ones() {
        let mut table: Slab<SendKey, u32> = Slab::with_limit(1000);
        let keys: Vec<SendKey> = (0..200).map(|v| table.insert(v).unwrap().0).collect();
        assert_eq!(table.allocated(), 200);
        for key in &keys[..100] {
            table.remove(*key);
        }
        for v in 0..100 {
            let (key, _) = table.insert(v).unwrap();
            assert!(key.slot() < 100, "a freed slot is taken before a new one");
        }
        assert_eq!(table.allocated(), 200);
        while table.insert(0).is_some() {}
        assert_eq!((table.allocated(), table.usage.in_use), (1000, 1000));
    }

    #[test]
    fn a_side_table_has_a_blank_value_for_every_key_its_table_hands_out() {
        let mut table: Slab<SendKey, ()> = Slab::with_limit(500);
        let mut side: SideTable<SendKey, u8> = SideTable::new(7);
        for _ in 0..500 {
            let (key, _) = table.insert(()).unwrap();
            side.cover(key);
            assert_eq!(side[key], 7);
            side[key] = 1;
        }
    }

    #[test]
    fn an_optional_key_costs_no_more_than_a_key() {
        assert_eq!(size_of::<Option<IncomingKey>>(), size_of::<u32>());
    }
}
