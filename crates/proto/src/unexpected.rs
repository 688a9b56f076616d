//! The unexpected queue: messages no receive has taken yet, in the order MPI matches them.
//!
//! Two lists run through the same entries: every message in arrival order, and each sender's
//! messages apart. A receive that names its source (every receive of Open MPI's `ofi` layer
//! with directed receives, and most of any program) looks only at that sender's messages, and
//! a message leaves both lists at once, wherever it is in them. One queue alone made a rank
//! that takes three senders' 8,000 messages one sender at a time walk the other senders'
//! 16,000 at every receive, and walk the queue again to take each message out: 1.7 s where
//! Open MPI on TCP, which keeps a queue per sender too, takes a tenth of that.
//!
//! The links live in a side table of the incoming table, so the queue allocates nothing but
//! the links of entries the incoming table never held before.

use crate::slab::{IncomingKey, SideTable};
use crate::Rank;

/// The first and last message of a list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Ends {
    first: Option<IncomingKey>,
    last: Option<IncomingKey>,
}

/// A message's neighbours in one list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Link {
    prev: Option<IncomingKey>,
    next: Option<IncomingKey>,
}

/// A message's places in both lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Links {
    all: Link,
    sender: Link,
}

/// Which of the two lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    All,
    Sender,
}

fn link(links: &mut SideTable<IncomingKey, Links>, key: IncomingKey, list: List) -> &mut Link {
    match list {
        List::All => &mut links[key].all,
        List::Sender => &mut links[key].sender,
    }
}

fn link_of(links: &SideTable<IncomingKey, Links>, key: IncomingKey, list: List) -> Link {
    match list {
        List::All => links[key].all,
        List::Sender => links[key].sender,
    }
}

/// Appends `key` to the list `ends` begins and ends.
fn push_back(
    ends: &mut Ends,
    links: &mut SideTable<IncomingKey, Links>,
    key: IncomingKey,
    list: List,
) {
    *link(links, key, list) = Link {
        prev: ends.last,
        next: None,
    };
    match ends.last {
        Some(last) => link(links, last, list).next = Some(key),
        None => ends.first = Some(key),
    }
    ends.last = Some(key);
}

/// Takes `key` out of the list `ends` begins and ends, joining its neighbours.
fn unlink(
    ends: &mut Ends,
    links: &mut SideTable<IncomingKey, Links>,
    key: IncomingKey,
    list: List,
) {
    let Link { prev, next } = link_of(links, key, list);
    match prev {
        Some(prev) => link(links, prev, list).next = next,
        None => ends.first = next,
    }
    match next {
        Some(next) => link(links, next, list).prev = prev,
        None => ends.last = prev,
    }
    *link(links, key, list) = Link::default();
}

pub(crate) struct UnexpectedQueue {
    all: Ends,
    /// Each sender's list, by rank (or open-mode peer slot).
    by_sender: Vec<Ends>,
    links: SideTable<IncomingKey, Links>,
}

impl UnexpectedQueue {
    /// An empty queue for messages from `senders` ranks.
    pub(crate) fn new(senders: u32) -> Self {
        Self {
            all: Ends::default(),
            by_sender: vec![Ends::default(); senders as usize],
            links: SideTable::new(Links::default()),
        }
    }

    /// Queues `key`, a message from `sender`, behind every message queued before it.
    pub(crate) fn push_back(&mut self, key: IncomingKey, sender: Rank) {
        self.links.cover(key);
        push_back(&mut self.all, &mut self.links, key, List::All);
        let ends = &mut self.by_sender[sender as usize];
        push_back(ends, &mut self.links, key, List::Sender);
    }

    /// Takes `key`, a queued message from `sender`, out of the queue.
    pub(crate) fn remove(&mut self, key: IncomingKey, sender: Rank) {
        unlink(&mut self.all, &mut self.links, key, List::All);
        let ends = &mut self.by_sender[sender as usize];
        unlink(ends, &mut self.links, key, List::Sender);
    }

    /// Every queued message, oldest first.
    pub(crate) fn iter(&self) -> Walk<'_> {
        Walk {
            links: &self.links,
            at: self.all.first,
            list: List::All,
        }
    }

    /// The messages queued from `sender`, oldest first.
    pub(crate) fn of_sender(&self, sender: Rank) -> Walk<'_> {
        Walk {
            links: &self.links,
            at: self
                .by_sender
                .get(sender as usize)
                .and_then(|ends| ends.first),
            list: List::Sender,
        }
    }
}

/// A walk along one of the queue's lists.
pub(crate) struct Walk<'a> {
    links: &'a SideTable<IncomingKey, Links>,
    at: Option<IncomingKey>,
    list: List,
}

impl Iterator for Walk<'_> {
    type Item = IncomingKey;

    fn next(&mut self) -> Option<IncomingKey> {
        let key = self.at?;
        self.at = link_of(self.links, key, self.list).next;
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slab::Key;

    fn key(slot: u32) -> IncomingKey {
        IncomingKey::from_slot(slot)
    }

    fn slots(walk: Walk<'_>) -> Vec<u32> {
        walk.map(|key| key.slot()).collect()
    }

    /// Messages keep their order in both lists whichever leaves, first, last or between.
    #[test]
    fn both_lists_keep_arrival_order_as_messages_leave_anywhere() {
        let mut queue = UnexpectedQueue::new(3);
        for (slot, sender) in [(0, 0), (1, 1), (2, 0), (3, 2), (4, 1), (5, 0)] {
            queue.push_back(key(slot), sender);
        }
        assert_eq!(slots(queue.iter()), [0, 1, 2, 3, 4, 5]);
        assert_eq!(slots(queue.of_sender(0)), [0, 2, 5]);
        queue.remove(key(2), 0);
        queue.remove(key(0), 0);
        queue.remove(key(4), 1);
        assert_eq!(slots(queue.iter()), [1, 3, 5]);
        assert_eq!(slots(queue.of_sender(0)), [5]);
        assert_eq!(slots(queue.of_sender(1)), [1]);
        queue.remove(key(5), 0);
        queue.push_back(key(0), 0);
        assert_eq!(slots(queue.iter()), [1, 3, 0]);
        assert_eq!(slots(queue.of_sender(0)), [0]);
        assert_eq!(queue.iter().count(), 3);
        for (slot, sender) in [(1, 1), (3, 2), (0, 0)] {
            queue.remove(key(slot), sender);
        }
        assert_eq!(queue.all, Ends::default());
        assert!(queue.by_sender.iter().all(|ends| *ends == Ends::default()));
    }

    /// A sender beyond the job has no messages (the queue is not asked of one, but a walk
    /// from it must not panic).
    #[test]
    fn a_sender_outside_the_job_has_an_empty_list() {
        let queue = UnexpectedQueue::new(2);
        assert_eq!(queue.of_sender(7).count(), 0);
    }
}
