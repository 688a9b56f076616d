//! What the core hands out besides data frames: control frames waiting to be sent, and
//! completions waiting for the host. Both are bounded queues allocated at start-up, each with
//! its occupancy accounted as it changes, so `Usage` is read, never recomputed.

use std::collections::VecDeque;

use crate::ops::Control;
use crate::usage::TableUsage;
use crate::{Completion, OpError, OpId, Rank, Status};

/// The control queue and the completion queue of one endpoint.
pub(crate) struct Outputs {
    /// Control frames in the order they were queued; sent before any data frame.
    control: VecDeque<Control>,
    control_usage: TableUsage,
    /// Finished operations not yet taken by `poll_completion`.
    completions: VecDeque<Completion>,
    completion_usage: TableUsage,
}

impl Outputs {
    /// Queues of at most `control_limit` control frames and `completions_limit` completions
    /// (every operation completes once, so the send and receive tables bound the latter).
    pub(crate) fn new(control_limit: usize, completions_limit: usize) -> Self {
        Self {
            control: VecDeque::with_capacity(control_limit),
            control_usage: TableUsage::new(control_limit),
            completions: VecDeque::with_capacity(completions_limit),
            completion_usage: TableUsage::new(completions_limit),
        }
    }

    // --- control frames ---

    /// Room for one more control frame.
    pub(crate) fn has_control_room(&self) -> bool {
        self.control.len() < self.control_usage.limit
    }

    /// Queues a control frame; the caller checked [`has_control_room`](Self::has_control_room).
    pub(crate) fn push_control(&mut self, control: Control) {
        debug_assert!(self.has_control_room(), "control queue overflows");
        self.control.push_back(control);
        self.control_usage.set(self.control.len());
    }

    /// The oldest queued control frame.
    pub(crate) fn pop_control(&mut self) -> Option<Control> {
        let control = self.control.pop_front();
        self.control_usage.set(self.control.len());
        control
    }

    /// `first`, an ACK_ALL just popped (of a run of `first.frame_index` more ids), is followed
    /// in the queue by ACK_ALLs to the same peer of the next message ids: joins them to its
    /// run while it stays at most `most` ids after its first (see `piggyback.rs`, "runs").
    /// Returns how many frames it took.
    pub(crate) fn take_ack_all_run(&mut self, first: &mut Control, most: u32) -> u32 {
        let mut taken = 0;
        loop {
            let next_id = first.msg_id.wrapping_add(first.frame_index + 1);
            let joins = self.control.front().is_some_and(|next| {
                next.is_ack_all()
                    && next.dst == first.dst
                    && next.msg_id == next_id
                    && first.frame_index + 1 + next.frame_index <= most
            });
            if !joins {
                break;
            }
            let next = self.control.pop_front().expect("looked at");
            first.frame_index += 1 + next.frame_index;
            taken += 1;
        }
        self.control_usage.set(self.control.len());
        taken
    }

    pub(crate) fn has_control(&self) -> bool {
        !self.control.is_empty()
    }

    /// Forgets every control frame to `peer` (declared unreachable: nothing more goes to it).
    pub(crate) fn drop_control_to(&mut self, peer: Rank) {
        self.control.retain(|c| c.dst != peer);
        self.control_usage.set(self.control.len());
    }

    pub(crate) fn control_usage(&self) -> TableUsage {
        self.control_usage
    }

    // --- completions ---

    /// Reports a finished operation. Each operation completes once and holds a table entry
    /// until then, so the queue cannot overflow.
    pub(crate) fn complete(&mut self, op: OpId, result: Result<Status, OpError>) {
        debug_assert!(self.completions.len() < self.completion_usage.limit);
        self.completions.push_back(Completion { op, result });
        self.completion_usage.set(self.completions.len());
    }

    /// The oldest completion not taken yet.
    pub(crate) fn pop_completion(&mut self) -> Option<Completion> {
        let completion = self.completions.pop_front();
        self.completion_usage.set(self.completions.len());
        completion
    }

    pub(crate) fn has_completions(&self) -> bool {
        !self.completions.is_empty()
    }

    /// True if a completion of `op` waits to be taken.
    pub(crate) fn is_completion_queued(&self, op: OpId) -> bool {
        self.completions.iter().any(|c| c.op == op)
    }

    pub(crate) fn completion_usage(&self) -> TableUsage {
        self.completion_usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OpKind;
    use nicmsg_wire::FrameKind;

    fn control(dst: Rank) -> Control {
        Control {
            dst,
            kind: FrameKind::Credit,
            flags: 0,
            msg_id: 0,
            frame_index: 0,
        }
    }

    fn op(index: u32) -> OpId {
        OpId {
            kind: OpKind::Send,
            index,
            generation: 0,
        }
    }

    #[test]
    fn control_frames_leave_in_order_and_the_queue_is_bounded() {
        let mut outputs = Outputs::new(2, 1);
        outputs.push_control(control(1));
        outputs.push_control(control(2));
        assert!(!outputs.has_control_room());
        assert_eq!(outputs.control_usage().peak, 2);
        assert_eq!(outputs.pop_control().map(|c| c.dst), Some(1));
        assert_eq!(outputs.pop_control().map(|c| c.dst), Some(2));
        assert_eq!(outputs.pop_control(), None);
        assert!(!outputs.has_control());
        assert_eq!(outputs.control_usage().in_use, 0);
    }

    fn ack_all(dst: Rank, msg_id: u32, more: u32) -> Control {
        Control {
            dst,
            kind: FrameKind::Ack,
            flags: nicmsg_wire::Flags::ACK_ALL,
            msg_id,
            frame_index: more,
        }
    }

    /// Queued ACK_ALLs of the next ids to the same peer join a run, itself possibly a run,
    /// while it stays within the bound a receiver accepts; anything else stays queued.
    #[test]
    fn acknowledgements_join_a_run_up_to_its_bound() {
        let mut outputs = Outputs::new(8, 1);
        for control in [
            ack_all(1, 10, 2),
            ack_all(1, 13, 0),
            ack_all(1, 14, 3),
            ack_all(2, 18, 0),
        ] {
            outputs.push_control(control);
        }
        let mut first = outputs.pop_control().expect("queued");
        assert_eq!(outputs.take_ack_all_run(&mut first, 63), 2);
        assert_eq!((first.msg_id, first.frame_index), (10, 7), "ids 10 to 17");
        assert_eq!(
            outputs.pop_control().map(|c| c.dst),
            Some(2),
            "another peer's stays"
        );

        outputs.push_control(ack_all(1, 0, 61));
        outputs.push_control(ack_all(1, 62, 2));
        let mut first = outputs.pop_control().expect("queued");
        assert_eq!(
            outputs.take_ack_all_run(&mut first, 63),
            0,
            "64 after 0 is one too many"
        );
        assert_eq!(first.frame_index, 61);
        assert_eq!(outputs.control_usage().in_use, 1);
    }

    #[test]
    fn frames_to_a_dropped_peer_are_forgotten() {
        let mut outputs = Outputs::new(4, 1);
        for dst in [1, 2, 1] {
            outputs.push_control(control(dst));
        }
        outputs.drop_control_to(1);
        assert_eq!(outputs.control_usage().in_use, 1);
        assert_eq!(outputs.pop_control().map(|c| c.dst), Some(2));
    }

    #[test]
    fn completions_are_taken_in_order_and_can_be_looked_for() {
        let mut outputs = Outputs::new(1, 2);
        outputs.complete(op(0), Err(OpError::Cancelled));
        outputs.complete(op(1), Err(OpError::Cancelled));
        assert!(outputs.is_completion_queued(op(1)));
        assert_eq!(outputs.completion_usage().in_use, 2);
        assert_eq!(outputs.pop_completion().map(|c| c.op), Some(op(0)));
        assert!(!outputs.is_completion_queued(op(0)));
        assert_eq!(outputs.pop_completion().map(|c| c.op), Some(op(1)));
        assert!(!outputs.has_completions());
        assert_eq!(outputs.completion_usage().peak, 2);
    }
}
