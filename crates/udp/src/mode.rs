//! How the socket receives: in batches while peers send runs, one datagram at a time while
//! single frames come and go (a ping-pong of small messages).
//!
//! Two costs of a batch receive fall on every datagram, run or not, and are a large share of a
//! small message's time (C ping-pong on loopback, half round trip):
//! - `UDP_GRO` set on the socket: about 0.1 us (1.85 -> 1.97 us), with or without a control
//!   buffer offered;
//! - a `recvmmsg` offering several slots tries the next one after the datagram it found, and
//!   that failed attempt costs about 0.08 us (1.75 us with one slot offered, 1.85 with eight).
//!
//! Both pay off only for runs: a GSO run arriving at a socket without `UDP_GRO` is cut up by
//! the kernel (a 4 KiB message in three frames: 10.6 us a half round trip instead of 6.9), and
//! one slot a call takes a system call per datagram of a burst. So a socket receives in
//! batches, and goes to single frames after a long stretch of receives that each brought one
//! frame; back to batches when several receives in a row each bring a frame (the queue held
//! more than one: a burst or a run cut up) or one brings several.
//!
//! Turning `UDP_GRO` off races with a coalesced datagram the kernel queued just before: read
//! after the switch, it comes without its segment size and could not be split. So the socket
//! goes to single frames only when its queue is empty right after the switch, and turns
//! `UDP_GRO` back on otherwise. A datagram that slips in between the switch and that check
//! (nanoseconds) is dropped as malformed by the frame's length check and resent by the
//! protocol, like a lost one; nothing is taken wrongly.

/// Receives in a row that each brought exactly one frame before the socket goes to single
/// frames. The switch there and back costs up to four system calls (about 2 us); the 0.18 us
/// it saves per datagram repays that within 12 receives, so a workload that flips between
/// runs and single frames every 256 receives loses under 1 % of a single frame's time to it.
pub(crate) const SINGLE_FRAME_RECEIVES_BEFORE_SWITCH: u32 = 256;

/// Receives in a row that each brought a frame, one datagram at a time, that show a backlog:
/// the queue held more than one datagram. Not two: a message's frame and the peer's
/// acknowledgement of an earlier one often follow each other that closely in a ping-pong; a
/// burst or a run cut up on the way in costs three system calls more before batches.
pub(crate) const BACKLOG_RECEIVES: u32 = 4;

/// How the socket receives now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Every slot offered, `UDP_GRO` on (where the socket can coalesce).
    Batches,
    /// One slot offered, `UDP_GRO` off.
    SingleFrames,
}

/// The mode and what the last receives brought.
#[derive(Debug)]
pub(crate) struct ReceiveMode {
    mode: Mode,
    /// Receives in a row, in batches, that each brought one frame.
    single_frame_receives: u32,
    /// Receives in a row that brought a frame (one datagram at a time: the queue may hold
    /// more).
    receives_with_frames: u32,
}

impl ReceiveMode {
    /// In batches: a socket's first traffic is as likely a bulk transfer.
    pub(crate) fn new() -> Self {
        Self {
            mode: Mode::Batches,
            single_frame_receives: 0,
            receives_with_frames: 0,
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// After a receive that brought `frames` frames (0: the socket was empty): the mode to
    /// switch to, if any.
    pub(crate) fn after_receive(&mut self, frames: usize) -> Option<Mode> {
        self.receives_with_frames = if frames > 0 {
            self.receives_with_frames + 1
        } else {
            0
        };
        match self.mode {
            Mode::Batches if frames == 1 => {
                self.single_frame_receives += 1;
                (self.single_frame_receives >= SINGLE_FRAME_RECEIVES_BEFORE_SWITCH)
                    .then_some(Mode::SingleFrames)
            }
            Mode::Batches => {
                if frames > 1 {
                    self.single_frame_receives = 0;
                }
                None
            }
            Mode::SingleFrames => {
                let backlog = frames > 1 || self.receives_with_frames >= BACKLOG_RECEIVES;
                backlog.then_some(Mode::Batches)
            }
        }
    }

    /// The socket now receives in `mode`.
    pub(crate) fn switched(&mut self, mode: Mode) {
        self.mode = mode;
        self.single_frame_receives = 0;
        self.receives_with_frames = 0;
    }

    /// A switch did not happen (the socket refused it, or a datagram was queued): the mode
    /// stays, and the stretch that asked for the switch starts again.
    pub(crate) fn stay(&mut self) {
        self.switched(self.mode);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` receives of one frame each, none of which switches.
    fn single_frames(receive: &mut ReceiveMode, count: u32) {
        for _ in 0..count {
            assert_eq!(receive.after_receive(1), None);
        }
    }

    /// A socket switched to single frames after the stretch, then found empty once.
    fn single_frames_after_the_stretch() -> ReceiveMode {
        let mut receive = ReceiveMode::new();
        for _ in 1..SINGLE_FRAME_RECEIVES_BEFORE_SWITCH {
            assert_eq!(receive.after_receive(1), None);
            assert_eq!(receive.after_receive(0), None);
        }
        assert_eq!(receive.after_receive(1), Some(Mode::SingleFrames));
        receive.switched(Mode::SingleFrames);
        assert_eq!(receive.after_receive(0), None);
        receive
    }

    #[test]
    fn a_long_stretch_of_single_frames_goes_to_single_frames() {
        let mut receive = single_frames_after_the_stretch();
        assert_eq!(
            receive.after_receive(1),
            None,
            "one frame after an empty socket"
        );
        assert_eq!(receive.after_receive(0), None);
        assert_eq!(receive.mode(), Mode::SingleFrames);
    }

    #[test]
    fn frames_in_a_row_go_back_to_batches() {
        let mut receive = single_frames_after_the_stretch();
        single_frames(&mut receive, BACKLOG_RECEIVES - 1);
        assert_eq!(
            receive.after_receive(0),
            None,
            "the socket was empty after all"
        );
        single_frames(&mut receive, BACKLOG_RECEIVES - 1);
        assert_eq!(receive.after_receive(1), Some(Mode::Batches));
        receive.switched(Mode::Batches);
        assert_eq!(receive.mode(), Mode::Batches);
    }

    #[test]
    fn several_frames_at_once_go_back_to_batches() {
        let mut receive = single_frames_after_the_stretch();
        assert_eq!(
            receive.after_receive(3),
            Some(Mode::Batches),
            "a coalesced run"
        );
    }

    #[test]
    fn a_run_restarts_the_stretch() {
        let mut receive = ReceiveMode::new();
        single_frames(&mut receive, SINGLE_FRAME_RECEIVES_BEFORE_SWITCH - 1);
        assert_eq!(receive.after_receive(3), None, "already in batches");
        single_frames(&mut receive, SINGLE_FRAME_RECEIVES_BEFORE_SWITCH - 1);
        assert_eq!(
            receive.after_receive(0),
            None,
            "an empty socket says nothing"
        );
        assert_eq!(receive.after_receive(1), Some(Mode::SingleFrames));
    }
}
