//! # LM: zero-copy receive on NICs that cannot split headers
//!
//! The LM paper's mechanisms (`docs/lm.md`), sans-I/O like `nicmsg-proto`: no clock, socket or
//! thread, so the simulator runs the same code the AF_XDP transport will.
//!
//! * [`geometry`]: where each frame of a transfer sits in the message, in a send buffer with
//!   header holes, and in a receive region defragmented in place.
//! * [`send_buffer`]: the sending side, a buffer with a hole before each frame's payload that
//!   the application fills in place; each frame leaves as one contiguous piece, last first.
//! * [`fill`]: the receiving device's fill queue as the engine mirrors it, and the steering rule
//!   that decides, per arriving frame, whether it may take the next fill address (the rule an
//!   XDP program applies on the packet path).
//! * [`placement`]: one admitted transfer at its receiver: which fill addresses to post, what a
//!   landed frame did to its neighbours, and when a frame must come the one-copy way instead.
//! * [`admission`]: the admission control of the paper's table 1 and figure 3 (request, accept,
//!   reject, end, and telling the other nodes which receiver is busy), made reliable with
//!   retransmission and idempotent messages.
//! * [`station`]: all of it put together for one node: transfers sent and received end to
//!   end, placed when admitted and by copy otherwise, paced and made reliable.
//! * [`open`]: a station whose peers are socket addresses, bound as they are sent to or heard
//!   from and reused when they go, for applications written against sockets.

#![forbid(unsafe_code)]

pub mod admission;
mod bits;
pub mod fill;
pub mod geometry;
pub mod open;
pub mod placement;
pub mod send_buffer;
mod serial;
pub mod station;

pub use fill::{Arrival, FillQueue, Slot, Steer, TransferKey};
pub use geometry::{Geometry, GeometryError};
pub use placement::{Placement, PlacementError};
