//! The posted receives of one queue, in the order they were posted, by the source they name.
//!
//! MPI gives an arriving message to the first receive posted that takes it. The receives that
//! name its sender and those of any source are kept apart (`sender_lists.rs`), so an arrival
//! looks at those two lists only, walked together in posting order up to the first receive
//! that takes the message. A rank that posted receives from three senders, the last sender's
//! first, walked the other senders' receives at every message of the first.

use crate::sender_lists::SenderLists;
use crate::slab::{RecvKey, SideTable};
use crate::{Rank, Source};

pub(crate) struct PostedQueue {
    lists: SenderLists<RecvKey>,
    /// When each listed receive was posted (`None` once it left the queue): orders a receive
    /// naming the sender against one of any source.
    posted_at: SideTable<RecvKey, Option<u64>>,
    /// The next receive's place in posting order.
    next: u64,
    /// The list of receives of any source: one past the last rank.
    any_source: Rank,
}

impl PostedQueue {
    /// An empty queue for receives from `senders` ranks.
    pub(crate) fn new(senders: u32) -> Self {
        Self {
            lists: SenderLists::new(senders + 1),
            posted_at: SideTable::new(None),
            next: 0,
            any_source: senders,
        }
    }

    /// The list a receive from `source` waits in.
    fn list_of(&self, source: Source) -> Rank {
        match source {
            Source::Rank(rank) => rank,
            Source::Any => self.any_source,
        }
    }

    /// Queues `key`, a receive from `source`, behind every receive posted before it.
    pub(crate) fn push_back(&mut self, key: RecvKey, source: Source) {
        self.posted_at.cover(key);
        debug_assert!(self.posted_at[key].is_none(), "{key:?} is queued already");
        self.posted_at[key] = Some(self.next);
        self.next += 1;
        self.lists.push_back(key, self.list_of(source));
    }

    /// Takes `key`, a receive from `source`, off the queue if it is queued (a receive that
    /// matched, cancelled or failed).
    pub(crate) fn remove(&mut self, key: RecvKey, source: Source) {
        self.posted_at.cover(key);
        if self.posted_at[key].take().is_some() {
            self.lists.remove(key, self.list_of(source));
        }
    }

    /// The first receive, in posting order, that `takes` a message from `sender`: the first
    /// naming `sender` or the first of any source, whichever was posted first.
    ///
    /// The two lists are walked together in posting order, as one queue would be, so no
    /// receive posted after the one that takes the message is asked: walked apart, each to its
    /// first taker, a message that a receive naming its sender took asked every receive of any
    /// source posted after it too (and the other way round).
    pub(crate) fn first_taking(
        &self,
        sender: Rank,
        takes: impl Fn(RecvKey) -> bool,
    ) -> Option<RecvKey> {
        let mut named = self.lists.of_sender(sender).peekable();
        let mut any = self.lists.of_sender(self.any_source).peekable();
        loop {
            let next = match (named.peek(), any.peek()) {
                (Some(&n), Some(&a)) if self.posted_at[a] < self.posted_at[n] => any.next(),
                (Some(_), _) => named.next(),
                (None, _) => any.next(),
            }?;
            if takes(next) {
                return Some(next);
            }
        }
    }

    /// True if a receive naming `sender`, or one of any source, is queued.
    pub(crate) fn has_any_from(&self, sender: Rank) -> bool {
        self.lists.of_sender(sender).next().is_some()
            || self.lists.of_sender(self.any_source).next().is_some()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    /// Every queued receive, in posting order.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = RecvKey> + '_ {
        self.lists.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slab::Key;

    fn key(slot: u32) -> RecvKey {
        RecvKey::from_slot(slot)
    }

    /// A message goes to the receive posted first among those naming its sender and those of
    /// any source, whichever list it is in.
    #[test]
    fn the_receive_posted_first_takes_the_message_from_either_list() {
        let mut queue = PostedQueue::new(3);
        queue.push_back(key(0), Source::Rank(2));
        queue.push_back(key(1), Source::Any);
        queue.push_back(key(2), Source::Rank(1));
        queue.push_back(key(3), Source::Rank(1));
        let all = |_| true;
        assert_eq!(queue.first_taking(1, all), Some(key(1)));
        assert_eq!(queue.first_taking(2, all), Some(key(0)));
        queue.remove(key(1), Source::Any);
        queue.remove(key(1), Source::Any);
        assert_eq!(queue.first_taking(1, all), Some(key(2)));
        assert_eq!(queue.first_taking(0, all), None);
        assert!(!queue.has_any_from(0) && queue.has_any_from(1));
        // A receive no longer queued leaves it alone.
        queue.remove(key(7), Source::Rank(1));
        assert_eq!(queue.iter().count(), 3);
        // Only the receive it takes counts: slot 3 takes what slot 2 does not.
        assert_eq!(queue.first_taking(1, |k| k == key(3)), Some(key(3)));
        queue.push_back(key(1), Source::Any);
        assert_eq!(queue.first_taking(1, all), Some(key(2)), "posted before it");
        assert_eq!(queue.first_taking(0, all), Some(key(1)));
        let order: Vec<u32> = queue.iter().map(|k| k.slot()).collect();
        assert_eq!(order, [0, 2, 3, 1]);
    }

    /// An arrival looks at no more receives than a walk of the whole queue in posting order
    /// would before it finds the one that takes the message: not past the first that takes it
    /// in the other list. Each list walked to its first taker, a receive naming the sender
    /// posted first was found only after every receive of any source posted after it was
    /// asked, and the other way round.
    #[test]
    fn an_arrival_asks_no_receive_posted_after_the_one_that_takes_it() {
        use std::cell::Cell;
        for (first, rest) in [
            (Source::Rank(1), Source::Any),
            (Source::Any, Source::Rank(1)),
        ] {
            let mut queue = PostedQueue::new(3);
            queue.push_back(key(0), first);
            for slot in 1..1000 {
                queue.push_back(key(slot), rest);
            }
            let asked = Cell::new(0);
            let takes = |k: RecvKey| {
                asked.set(asked.get() + 1);
                k == key(0)
            };
            assert_eq!(queue.first_taking(1, takes), Some(key(0)));
            assert_eq!(
                asked.get(),
                1,
                "receives from {rest:?} posted after it were asked"
            );
        }
    }
}
