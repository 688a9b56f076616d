//! Human-readable state of a pending operation, for hang diagnosis (the engine's watchdog).

use crate::ops::{Dest, RecvState, RxPhase, SendPhase};
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
            "send of {} bytes to rank {} tag {} ({protocol})",
            send.geometry.total_len, send.dst, send.tag
        );
        let peer = &self.peers[send.dst];
        let state = match send.phase {
            SendPhase::Queued if !peer.window_open() => {
                format!(
                    "queued: {} earlier messages to rank {} are unfinished (not yet matched by its receives, or still in flight)",
                    crate::MSG_WINDOW,
                    send.dst
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
            Source::Rank(rank) => format!("rank {rank}"),
            Source::Any => "any rank".to_string(),
        };
        let tag = match recv.tag {
            TagMatch::Tag(tag) => format!("tag {tag}"),
            TagMatch::Any => "any tag".to_string(),
            TagMatch::Masked { tag, ignore } => format!("tag {tag:#x} ignoring bits {ignore:#x}"),
        };
        let head = format!(
            "{what} from {source} with {tag} into {} bytes",
            recv.buffer.total_len()
        );
        let state = match recv.state {
            RecvState::Posted => "posted, no matching message has arrived".to_string(),
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
                        "matched message {} from rank {} ({} bytes): {phase}, {arrived} of {} frames in order, {} granted",
                        entry.msg_id, entry.peer, entry.geometry.total_len, entry.frames, entry.granted
                    )
                }
                None => "matched".to_string(),
            },
        };
        Some(format!("{head}: {state}"))
    }
}
