//! The placing socket's fill addresses as runs, and the buffers that land in them put back
//! together into frames.
//!
//! Each slot the station posts is a run of consecutive fill addresses one buffer
//! ([`BUFFER_BYTES`]) apart: one address for a frame that fits a buffer, several on a socket
//! bound with scatter-gather (MTU 9000: a 9,014-byte frame fills three). The kernel writes a
//! frame's buffers at the run's addresses in order, each full but the last, so the frame lies
//! in one piece from the run's first address on. Positions count fill addresses in the order
//! posted, as the placing filter's cursor does.
//!
//! A void run (a given-up place) may be taken by a shorter frame: it fills the run's first
//! addresses, and the rest stays a run of its own, as `nicmsg_lm::fill::FillQueue::device_take`
//! splits the slot.

use std::collections::VecDeque;

use crate::placing::BUFFER_BYTES;
use crate::socket::KERNEL_HEADROOM;

/// A run of fill addresses posted for one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// The first fill address (the frame's first byte lands `KERNEL_HEADROOM` after it).
    pub address: u64,
    pub addresses: u32,
}

/// A whole frame that landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LandedFrame {
    /// Where its first byte is in the UMEM.
    pub at: usize,
    pub len: usize,
    /// The position of its first address (where the filter kept its headers).
    pub position: u64,
    /// Addresses it filled.
    pub addresses: u32,
}

/// A buffer that landed where no run expected it: the filter's cursor and the kernel's count
/// of taken addresses disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RunError {
    #[error("a frame landed with no fill slot posted for it")]
    NothingPosted,
    #[error("a frame's buffer landed at {at}, its fill address is {expected}")]
    Elsewhere { at: usize, expected: usize },
    #[error("a frame's buffer of {len} B is followed by another (only full buffers are)")]
    ShortBuffer { len: usize },
    #[error("a frame filled more addresses than its slot's run of {addresses}")]
    LongerThanItsRun { addresses: u32 },
}

/// A frame whose first buffers landed and whose last has not yet been seen.
#[derive(Debug, Clone, Copy)]
struct Partial {
    len: usize,
    addresses: u32,
}

/// The runs posted and not yet seen landed, oldest first.
#[derive(Debug, Default)]
pub(crate) struct FillRuns {
    runs: VecDeque<Run>,
    /// Positions of the whole frames seen landed.
    taken: u64,
    /// Positions posted.
    posted: u64,
    partial: Option<Partial>,
}

impl FillRuns {
    /// Posts a run behind the others; returns the position of its first address.
    pub fn post(&mut self, run: Run) -> u64 {
        let position = self.posted;
        self.posted += u64::from(run.addresses);
        self.runs.push_back(run);
        position
    }

    /// Runs posted and not yet seen landed.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Positions the whole frames seen landed filled.
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// The runs with the position of their first address, oldest first.
    pub fn runs(&self) -> impl Iterator<Item = (u64, &Run)> {
        self.runs.iter().scan(self.taken, |position, run| {
            let first = *position;
            *position += u64::from(run.addresses);
            Some((first, run))
        })
    }

    /// A buffer of `len` bytes landed at `at` (`continues`: the frame goes on in the next).
    /// Returns the frame once its last buffer is in.
    pub fn land(
        &mut self,
        at: usize,
        len: usize,
        continues: bool,
    ) -> Result<Option<LandedFrame>, RunError> {
        let run = *self.runs.front().ok_or(RunError::NothingPosted)?;
        let partial = self.partial.take().unwrap_or(Partial {
            len: 0,
            addresses: 0,
        });
        let expected =
            run.address as usize + KERNEL_HEADROOM + partial.addresses as usize * BUFFER_BYTES;
        if at != expected {
            return Err(RunError::Elsewhere { at, expected });
        }
        if continues && len != BUFFER_BYTES {
            return Err(RunError::ShortBuffer { len });
        }
        let partial = Partial {
            len: partial.len + len,
            addresses: partial.addresses + 1,
        };
        if partial.addresses > run.addresses {
            return Err(RunError::LongerThanItsRun {
                addresses: run.addresses,
            });
        }
        if continues {
            self.partial = Some(partial);
            return Ok(None);
        }
        Ok(Some(self.take_frame(run, partial)))
    }

    /// The frame of `partial` filled the start of the front run: the run leaves, or what the
    /// frame left of it stays in front.
    fn take_frame(&mut self, run: Run, partial: Partial) -> LandedFrame {
        let frame = LandedFrame {
            at: run.address as usize + KERNEL_HEADROOM,
            len: partial.len,
            position: self.taken,
            addresses: partial.addresses,
        };
        self.taken += u64::from(partial.addresses);
        if partial.addresses == run.addresses {
            self.runs.pop_front();
        } else {
            let front = self.runs.front_mut().expect("the run landed in");
            front.address += u64::from(partial.addresses) * BUFFER_BYTES as u64;
            front.addresses -= partial.addresses;
        }
        frame
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: usize = BUFFER_BYTES;

    fn landed(at: u64) -> usize {
        at as usize + KERNEL_HEADROOM
    }

    #[test]
    fn a_frame_of_three_buffers_lands_in_one_piece() {
        let mut runs = FillRuns::default();
        assert_eq!(
            runs.post(Run {
                address: 1000,
                addresses: 3
            }),
            0
        );
        assert_eq!(
            runs.post(Run {
                address: 50_000,
                addresses: 1
            }),
            3
        );
        assert_eq!(runs.land(landed(1000), B, true), Ok(None));
        assert_eq!(runs.land(landed(1000) + B, B, true), Ok(None));
        let frame = runs.land(landed(1000) + 2 * B, 100, false).unwrap();
        assert_eq!(
            frame,
            Some(LandedFrame {
                at: landed(1000),
                len: 2 * B + 100,
                position: 0,
                addresses: 3
            })
        );
        assert_eq!(runs.taken(), 3);
        let next = runs.land(landed(50_000), 60, false).unwrap().unwrap();
        assert_eq!(next.position, 3);
        assert_eq!(runs.land(0, 1, false), Err(RunError::NothingPosted));
    }

    #[test]
    fn a_shorter_frame_leaves_the_rest_of_its_run_in_front() {
        let mut runs = FillRuns::default();
        runs.post(Run {
            address: 0,
            addresses: 3,
        });
        runs.post(Run {
            address: 90_000,
            addresses: 1,
        });
        let first = runs.land(landed(0), 90, false).unwrap().unwrap();
        assert_eq!(first.addresses, 1);
        let rest: Vec<_> = runs.runs().map(|(at, run)| (at, *run)).collect();
        assert_eq!(
            rest,
            [
                (
                    1,
                    Run {
                        address: B as u64,
                        addresses: 2
                    }
                ),
                (
                    3,
                    Run {
                        address: 90_000,
                        addresses: 1
                    }
                )
            ]
        );
    }

    #[test]
    fn buffers_out_of_place_are_refused() {
        let mut runs = FillRuns::default();
        runs.post(Run {
            address: 0,
            addresses: 2,
        });
        assert_eq!(
            runs.land(landed(0) + 8, 10, false),
            Err(RunError::Elsewhere {
                at: landed(0) + 8,
                expected: landed(0)
            })
        );
        assert_eq!(
            runs.land(landed(0), 10, true),
            Err(RunError::ShortBuffer { len: 10 })
        );
        runs.land(landed(0), B, true).unwrap();
        runs.land(landed(0) + B, B, true).unwrap();
        assert_eq!(
            runs.land(landed(0) + 2 * B, 1, false),
            Err(RunError::LongerThanItsRun { addresses: 2 })
        );
    }
}
