//! Human-readable event traces for replaying one seed (`--trace`).

use crate::net::Fate;
use crate::report::fmt_ns;
use nicmsg_proto::Nanos;
use nicmsg_wire::Frame;

pub fn line(now: Nanos, text: impl AsRef<str>) {
    println!("{:>14} {}", fmt_ns(now), text.as_ref());
}

/// One-line summary of a frame's headers (or why it does not parse).
pub fn describe_frame(bytes: &[u8]) -> String {
    match Frame::parse(bytes) {
        Ok(frame) => {
            let h = frame.header;
            let mut text = format!(
                "{:?} msg {} idx {} off {} len {} aux {} flags {:#x}",
                h.kind, h.msg_id, h.frame_index, h.offset, h.payload_len, h.aux, h.flags
            );
            if let Some(msg) = frame.msg {
                text.push_str(&format!(
                    " [tag {} total {} fp {} unit {}]",
                    msg.tag, msg.total_len, msg.frame_payload, msg.ack_unit
                ));
            }
            text
        }
        Err(error) => format!("<{} bytes: {error}>", bytes.len()),
    }
}

pub fn describe_fate(fate: &Fate) -> String {
    if fate.too_big {
        return "DROPPED(mtu)".into();
    }
    if fate.partitioned {
        return "DROPPED(partition)".into();
    }
    let mut parts = Vec::new();
    if fate.lost > 0 {
        parts.push(format!("lost {}", fate.lost));
    }
    if fate.corrupted > 0 {
        parts.push(format!("corrupted {}", fate.corrupted));
    }
    if fate.copies + fate.lost > 1 {
        parts.push("duplicated".into());
    }
    format!(
        "depart {} copies {}{}",
        fmt_ns(fate.depart),
        fate.copies,
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join(", "))
        }
    )
}
