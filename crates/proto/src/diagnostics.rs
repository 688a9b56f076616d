//! Human-readable state of a pending operation, for hang diagnosis (the engine's watchdog).
//!
//! The commonest hang of a valid-looking program is a receive whose message came with another
//! tag, or from another peer, or in another communicator: a posted receive's line therefore
//! names the messages that wait unmatched from the peers it accepts, so that the mismatch is
//! in the one line a user reads.

use crate::ops::{Dest, Incoming, RecvOp, RecvState, RxPhase, SendPhase};
use crate::state::Core;
use crate::*;

impl Core {
    /// What a pending operation waits for, or `None` if it is not pending.
    pub(crate) fn describe(&self, op: OpId) -> Option<String> {
        match op.kind {
            OpKind::Send => self.describe_send(op),
            OpKind::Recv | OpKind::Probe => self.describe_recv(op),
        }
    }

    fn describe_send(&self, op: OpId) -> Option<String> {
        let send = self.sends.get_checked(op.index, op.generation)?;
        let protocol = if send.is_eager() {
            "eager"
        } else {
            "rendezvous"
        };
        let head = format!(
            "send of {} bytes to {} tag {} ({protocol})",
            send.geometry.total_len,
            self.peer_text(send.dst),
            tag_text(send.tag)
        );
        let peer = &self.peers[send.dst];
        let state = match send.phase {
            SendPhase::Queued if !peer.window_open() => {
                format!(
                    "queued: {} earlier messages to {} are unfinished (not yet matched by its receives, or still in flight)",
                    crate::MSG_WINDOW,
                    self.peer_text(send.dst)
                )
            }
            SendPhase::Queued => "queued behind earlier sends to the same rank".to_string(),
            SendPhase::Streaming if send.cancel.is_some() => format!(
                "message {}: cancel asked for, waiting for the receiver to withdraw it (CANCEL-ACK)",
                send.msg_id
            ),
            SendPhase::Streaming if !send.is_eager() && !send.peer_matched => format!(
                "message {}: RTS sent, waiting for the receiver to post a matching receive (CTS)",
                send.msg_id
            ),
            SendPhase::Streaming => format!(
                "message {}: {} of {} frames sent, {} granted, waiting for acknowledgements",
                send.msg_id, send.next_new, send.frames, send.granted
            ),
            SendPhase::Local => "to this rank itself: waiting for a matching receive".to_string(),
            SendPhase::Ending => format!(
                "message {}: all data acknowledged, END sent, waiting for MSG-ACK",
                send.msg_id
            ),
        };
        Some(format!(
            "{head}: {state}; retransmission timeout {} us",
            peer.rto.rto_ns() / 1000
        ))
    }

    fn describe_recv(&self, op: OpId) -> Option<String> {
        let recv = self.rx.recv_checked(op.index, op.generation)?;
        let what = if recv.kind == OpKind::Probe {
            "probe"
        } else {
            "receive"
        };
        let source = match recv.source {
            Source::Rank(rank) => self.peer_text(rank),
            Source::Any if self.directory.is_some() => "any peer".to_string(),
            Source::Any => "any rank".to_string(),
        };
        let tag = match recv.tag {
            TagMatch::Tag(tag) => format!("tag {}", tag_text(tag)),
            TagMatch::Any => "any tag".to_string(),
            TagMatch::Masked { tag, ignore } => {
                format!("tag {} ignoring bits {ignore:#x}", tag_text(tag))
            }
        };
        let head = format!(
            "{what} from {source} with {tag} into {} bytes",
            recv.buffer.total_len()
        );
        let state = match recv.state {
            RecvState::Posted => format!(
                "posted, no matching message has arrived{}",
                self.unmatched_text(recv)
            ),
            RecvState::Bound(index) => match self.rx.incoming(index) {
                Some(entry) => {
                    let arrived = entry.contiguous;
                    let phase = match entry.phase {
                        RxPhase::Receiving if entry.dest == Dest::Nowhere => {
                            "waiting for the sender to resend"
                        }
                        RxPhase::Receiving => "receiving",
                        RxPhase::DataComplete | RxPhase::MsgAcked => "complete",
                        RxPhase::Cancelled => "withdrawn by its sender",
                    };
                    format!(
                        "matched message {} from {} ({} bytes): {phase}, {arrived} of {} frames in order, {} granted",
                        entry.msg_id,
                        self.peer_text(entry.peer),
                        entry.geometry.total_len,
                        entry.frames,
                        entry.granted
                    )
                }
                None => "matched".to_string(),
            },
        };
        Some(format!("{head}: {state}"))
    }

    /// A peer as a user knows it: its rank in a job, its address on an open endpoint (whose
    /// slot numbers mean nothing outside the library).
    fn peer_text(&self, peer: Rank) -> String {
        match self.directory.as_ref().and_then(|d| d.address(peer)) {
            Some(address) => format!("peer {address}"),
            None if self.directory.is_some() && peer == 0 => "this endpoint itself".to_string(),
            None => format!("rank {peer}"),
        }
    }

    /// The messages that wait unmatched from the peers `recv` accepts (any tag, any
    /// communicator), as a clause to append to its line: at most
    /// [`UNMATCHED_LISTED`] of them named, with how many there are.
    fn unmatched_text(&self, recv: &RecvOp) -> String {
        let waiting: Vec<&Incoming> = self
            .rx
            .unexpected_entries()
            .filter(|entry| recv.source.matches(entry.peer))
            .collect();
        if waiting.is_empty() {
            return String::new();
        }
        let listed: Vec<String> = waiting
            .iter()
            .take(UNMATCHED_LISTED)
            .map(|entry| self.unmatched_entry_text(recv, entry))
            .collect();
        let more = waiting.len().saturating_sub(UNMATCHED_LISTED);
        let more = if more > 0 {
            format!(", and {more} more")
        } else {
            String::new()
        };
        let count = waiting.len();
        let plural = if count == 1 { "" } else { "s" };
        format!(
            "; {count} message{plural} from the peers it accepts wait{} unmatched: {}{more}",
            if count == 1 { "s" } else { "" },
            listed.join(", ")
        )
    }

    fn unmatched_entry_text(&self, recv: &RecvOp, entry: &Incoming) -> String {
        let communicator = if entry.context == recv.context {
            String::new()
        } else {
            format!(" in another communicator (context {})", entry.context.0)
        };
        format!(
            "{} from {} ({} bytes){communicator}",
            tag_text(entry.tag),
            self.peer_text(entry.peer),
            entry.geometry.total_len
        )
    }
}

/// How many unmatched messages a receive's line names: enough to show a mismatch, few enough
/// that a receive behind thousands of queued messages stays one readable line.
pub const UNMATCHED_LISTED: usize = 3;

/// A tag as a user wrote it: small ones in decimal (MPI tags), wide ones in hexadecimal (a
/// libfabric tag packs a communicator and a source above the MPI tag).
fn tag_text(tag: Tag) -> String {
    if tag <= u64::from(u32::MAX) {
        format!("{tag}")
    } else {
        format!("{tag:#018x}")
    }
}
