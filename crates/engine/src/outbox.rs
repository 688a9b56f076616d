//! Frames the protocol core has built and the transport has not yet taken: a fixed ring of
//! frames built in place. A frame is a 700-byte value (headers, a piece list, room for a short
//! payload); queueing built frames by value would copy each twice on its way out.

use nicmsg_proto::Transmit;

pub struct Outbox {
    frames: Box<[Transmit]>,
    head: usize,
    len: usize,
}

impl Outbox {
    pub fn with_capacity(capacity: usize) -> Self {
        assert!(capacity > 0);
        Self {
            frames: (0..capacity).map(|_| Transmit::default()).collect(),
            head: 0,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slot(&self, position: usize) -> usize {
        (self.head + position) % self.frames.len()
    }

    /// Lets `build` fill the next free frame in place and keeps it if `build` returns true.
    /// False (nothing built) when full.
    pub fn push_with(&mut self, build: impl FnOnce(&mut Transmit) -> bool) -> bool {
        if self.len == self.frames.len() {
            return false;
        }
        let slot = self.slot(self.len);
        if !build(&mut self.frames[slot]) {
            return false;
        }
        self.len += 1;
        true
    }

    /// The waiting frames, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Transmit> {
        (0..self.len).map(|position| &self.frames[self.slot(position)])
    }

    /// Forgets the `count` oldest frames (the transport took them).
    pub fn drop_front(&mut self, count: usize) {
        let count = count.min(self.len);
        self.head = self.slot(count);
        self.len -= count;
    }

    /// Keeps only the frames `keep` accepts, in order; returns how many were dropped.
    pub fn retain(&mut self, mut keep: impl FnMut(&Transmit) -> bool) -> usize {
        let mut kept = 0;
        for position in 0..self.len {
            let at = self.slot(position);
            if keep(&self.frames[at]) {
                let to = self.slot(kept);
                self.frames.swap(to, at);
                kept += 1;
            }
        }
        let dropped = self.len - kept;
        self.len = kept;
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(outbox: &mut Outbox, dst: u32) -> bool {
        outbox.push_with(|t| {
            *t = Transmit::new(dst);
            true
        })
    }

    fn destinations(outbox: &Outbox) -> Vec<u32> {
        outbox.iter().map(|t| t.dst).collect()
    }

    #[test]
    fn keeps_order_across_the_wrap() {
        let mut outbox = Outbox::with_capacity(4);
        for dst in 0..4 {
            assert!(push(&mut outbox, dst));
        }
        assert!(!push(&mut outbox, 9), "full");
        outbox.drop_front(3);
        assert!(push(&mut outbox, 4));
        assert!(push(&mut outbox, 5));
        assert_eq!(destinations(&outbox), [3, 4, 5]);
    }

    #[test]
    fn a_refused_build_keeps_nothing() {
        let mut outbox = Outbox::with_capacity(2);
        assert!(!outbox.push_with(|_| false));
        assert!(outbox.is_empty());
    }

    #[test]
    fn retain_drops_in_place_and_keeps_order() {
        let mut outbox = Outbox::with_capacity(5);
        for dst in 0..5 {
            push(&mut outbox, dst);
        }
        outbox.drop_front(2);
        push(&mut outbox, 5);
        push(&mut outbox, 6);
        assert_eq!(outbox.retain(|t| t.dst % 2 == 0), 2);
        assert_eq!(destinations(&outbox), [2, 4, 6]);
        push(&mut outbox, 8);
        assert_eq!(destinations(&outbox), [2, 4, 6, 8]);
    }
}
