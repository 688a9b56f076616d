//! Fixed-capacity table with generation-checked handles: all memory is allocated at start-up,
//! insertion fails (instead of growing) when the table is full.

use crate::usage::TableUsage;

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

pub(crate) struct Slab<T> {
    slots: Vec<Slot<T>>,
    /// Free slot indices, used as a stack so recently freed (cache-warm) slots are reused first.
    free: Vec<u32>,
    pub(crate) usage: TableUsage,
}

impl<T> Slab<T> {
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
        }
    }

    /// Stores `value`; returns (index, generation), or `None` when full.
    pub(crate) fn insert(&mut self, value: T) -> Option<(u32, u32)> {
        let index = self.free.pop()?;
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.value.is_none());
        slot.value = Some(value);
        self.usage.set(self.usage.in_use + 1);
        Some((index, slot.generation))
    }

    /// `insert` of the value `make` builds, built where it is stored when the compiler can
    /// (the large entries are not built on the stack and copied in).
    #[inline(always)]
    pub(crate) fn insert_with(&mut self, make: impl FnOnce() -> T) -> Option<(u32, u32)> {
        let index = self.free.pop()?;
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.value.is_none());
        slot.value = Some(make());
        self.usage.set(self.usage.in_use + 1);
        Some((index, slot.generation))
    }

    pub(crate) fn remove(&mut self, index: u32) -> Option<T> {
        let slot = self.slots.get_mut(index as usize)?;
        let value = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.usage.set(self.usage.in_use - 1);
        Some(value)
    }

    pub(crate) fn get(&self, index: u32) -> Option<&T> {
        self.slots.get(index as usize)?.value.as_ref()
    }

    pub(crate) fn get_mut(&mut self, index: u32) -> Option<&mut T> {
        self.slots.get_mut(index as usize)?.value.as_mut()
    }

    /// The entry only if `generation` still names it (a stale handle gets `None`).
    pub(crate) fn get_checked(&self, index: u32, generation: u32) -> Option<&T> {
        let slot = self.slots.get(index as usize)?;
        if slot.generation != generation {
            return None;
        }
        slot.value.as_ref()
    }

    pub(crate) fn generation(&self, index: u32) -> u32 {
        self.slots[index as usize].generation
    }

    /// One past the highest occupied index: index loops over the table stop there (the free
    /// stack keeps live entries at low indices, so this is small when few are live).
    pub(crate) fn scan_end(&self) -> u32 {
        self.occupied().last().map_or(0, |index| index + 1)
    }

    /// Indices of occupied slots, in index order (deterministic). Stops at the last occupied
    /// one: the free stack keeps live entries at low indices, so walking a mostly idle table
    /// (every turn of a spinning engine asks for the next deadline) touches a few slots, not
    /// all of them.
    pub(crate) fn occupied(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.value.is_some())
            .map(|(index, _)| index as u32)
            .take(self.usage.in_use)
    }
}
