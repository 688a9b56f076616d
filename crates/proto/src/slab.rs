//! Fixed-capacity table with generation-checked handles: all memory is allocated at start-up,
//! insertion fails (instead of growing) when the table is full. Each table has its own key type
//! (`SendKey`, `RecvKey`, `IncomingKey`), so a send's key cannot index the receive table.

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

pub(crate) struct Slab<K, T> {
    slots: Vec<Slot<T>>,
    /// Free slot indices, used as a stack so recently freed (cache-warm) slots are reused first.
    free: Vec<u32>,
    pub(crate) usage: TableUsage,
    key: PhantomData<fn(K)>,
}

impl<K: Key, T> Slab<K, T> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let slots = (0..capacity)
            .map(|_| Slot {
                generation: 0,
                value: None,
            })
            .collect();
        let free = (0..capacity as u32).rev().collect();
        Self {
            slots,
            free,
            usage: TableUsage::new(capacity),
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
        let index = self.free.pop()?;
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.value.is_none());
        slot.value = Some(make());
        self.usage.set(self.usage.in_use + 1);
        Some((K::from_slot(index), slot.generation))
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

    /// Keys of every slot up to the last occupied one, live or not, not borrowing the table:
    /// for loops that free entries as they go (skip the keys `get` finds empty). The free stack
    /// keeps live entries at low indices, so this is short when few are live.
    pub(crate) fn slots_in_use_range(&self) -> impl Iterator<Item = K> {
        let end = self.occupied().last().map_or(0, |key| key.slot() + 1);
        (0..end).map(K::from_slot)
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

/// Per-entry side data of a table, beside it (kept apart so the hot entry stays small).
pub(crate) struct SideTable<K, T> {
    values: Vec<T>,
    key: PhantomData<fn(K)>,
}

impl<K: Key, T: Clone> SideTable<K, T> {
    pub(crate) fn new(capacity: usize, value: T) -> Self {
        Self {
            values: vec![value; capacity],
            key: PhantomData,
        }
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
        let mut table: Slab<SendKey, &str> = Slab::with_capacity(2);
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
        let mut table: Slab<RecvKey, u8> = Slab::with_capacity(1);
        assert!(table.insert(1).is_some());
        assert!(table.insert(2).is_none());
        assert_eq!(table.usage.in_use, 1);
    }

    #[test]
    fn an_optional_key_costs_no_more_than_a_key() {
        assert_eq!(size_of::<Option<IncomingKey>>(), size_of::<u32>());
    }
}
