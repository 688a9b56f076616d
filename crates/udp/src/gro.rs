//! When the socket asks the kernel to coalesce received runs (`UDP_GRO`): only while peers
//! send runs.
//!
//! A socket with `UDP_GRO` set costs about 0.1 us more on every datagram it receives, coalesced
//! or not (a C ping-pong on loopback: 1.85 -> 1.97 us a half round trip, the same with no
//! control buffer offered). Without it, a run a peer sends as one GSO datagram is cut into its
//! datagrams on the way in, which costs far more: a 4 KiB message in three frames took 10.6 us
//! a half round trip instead of 6.9. So the option is on while runs arrive, and off after a
//! long stretch of receives that each brought one frame (ping-pong of small messages, the case
//! where the 0.1 us is a large share of a message's time).
//!
//! Turning it off races with a coalesced datagram the kernel queued just before: read after
//! the switch, it comes without its segment size and could not be split. So the socket turns
//! it off only when its queue is empty right after the switch, and turns it back on
//! otherwise. A datagram that slips in between the switch and that check (nanoseconds) is
//! dropped as malformed by the frame's length check and resent by the protocol, like a lost
//! one; nothing is taken wrongly.

/// Receives in a row that each brought exactly one frame before the option goes off. Turning
/// it off and on costs three system calls (about 1.5 us); the 0.1 us it saves per datagram
/// repays that within 15 receives, so a workload that flips between runs and single frames
/// every 256 receives loses at most 1 % of a single frame's time to the switching.
pub(crate) const SINGLE_FRAME_RECEIVES_BEFORE_OFF: u32 = 256;

/// Frames in one receive that show a peer sending runs: a GSO datagram cut up on the way in
/// arrives as consecutive datagrams, read by the same `recvmmsg`.
pub(crate) const RUN_FRAMES: usize = 2;

/// What the socket should do with `UDP_GRO` after a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Switch {
    On,
    Off,
}

/// The option's state on the socket and the stretch of single-frame receives seen with it on.
#[derive(Debug)]
pub(crate) struct GroSwitch {
    /// The socket may coalesce at all (asked for and supported by the kernel).
    capable: bool,
    on: bool,
    single_frame_receives: u32,
}

impl GroSwitch {
    /// Starts on when `capable`: a transport's first traffic is as likely a bulk transfer.
    pub(crate) fn new(capable: bool) -> Self {
        Self {
            capable,
            on: capable,
            single_frame_receives: 0,
        }
    }

    /// After a receive that brought `frames` frames: the switch to make, if any.
    pub(crate) fn after_receive(&mut self, frames: usize) -> Option<Switch> {
        if !self.capable || frames == 0 {
            return None;
        }
        if frames >= RUN_FRAMES {
            self.single_frame_receives = 0;
            return (!self.on).then_some(Switch::On);
        }
        if !self.on {
            return None;
        }
        self.single_frame_receives += 1;
        (self.single_frame_receives >= SINGLE_FRAME_RECEIVES_BEFORE_OFF).then_some(Switch::Off)
    }

    /// The socket's option is now `on`.
    pub(crate) fn switched(&mut self, on: bool) {
        self.on = on;
        self.single_frame_receives = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_stretch_of_single_frames_turns_it_off_and_a_run_turns_it_on() {
        let mut gro = GroSwitch::new(true);
        for _ in 1..SINGLE_FRAME_RECEIVES_BEFORE_OFF {
            assert_eq!(gro.after_receive(1), None);
        }
        assert_eq!(gro.after_receive(1), Some(Switch::Off));
        gro.switched(false);
        assert_eq!(
            gro.after_receive(1),
            None,
            "off stays off for single frames"
        );
        assert_eq!(gro.after_receive(RUN_FRAMES), Some(Switch::On));
        gro.switched(true);
        assert!(gro.on);
    }

    #[test]
    fn a_run_restarts_the_stretch() {
        let mut gro = GroSwitch::new(true);
        for _ in 1..SINGLE_FRAME_RECEIVES_BEFORE_OFF {
            assert_eq!(gro.after_receive(1), None);
        }
        assert_eq!(gro.after_receive(3), None, "already on");
        for _ in 1..SINGLE_FRAME_RECEIVES_BEFORE_OFF {
            assert_eq!(gro.after_receive(1), None);
        }
        assert_eq!(gro.after_receive(0), None, "an empty receive says nothing");
        assert_eq!(gro.after_receive(1), Some(Switch::Off));
    }

    #[test]
    fn a_socket_that_cannot_coalesce_never_switches() {
        let mut gro = GroSwitch::new(false);
        assert!(!gro.on);
        for _ in 0..2 * SINGLE_FRAME_RECEIVES_BEFORE_OFF {
            assert_eq!(gro.after_receive(1), None);
            assert_eq!(gro.after_receive(5), None);
        }
    }
}
