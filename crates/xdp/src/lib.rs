//! # nicmsg AF_XDP transport (Linux)
//!
//! Receiving through the kernel's UDP stack costs a system call per batch and the stack's work
//! per datagram; polling an empty socket costs a system call too. This transport attaches a
//! small XDP program, built and loaded by the library itself, to the interface that holds the
//! rank's address. The program steers frames for the rank's UDP port into an AF_XDP socket's
//! receive ring in user memory; everything else (ARP, the bootstrap's TCP, other ports) goes
//! on to the kernel as before. Polling for frames is then a read of a ring index.
//!
//! Frames are sent through the socket's transmit ring, built here with their Ethernet, IPv4
//! and UDP headers: on the wire they are the datagrams the UDP transport would send, so ranks
//! using either transport talk to each other.
//!
//! The transport's socket runs in copy mode, which every driver supports (veth included) and
//! which its program, attached in generic mode, needs. LM's placing socket, whose filter is
//! attached in native mode, binds in zero-copy mode where the driver has it and says which
//! mode runs (`LmSocketStats::zero_copy`).
//!
//! Requirements, checked when the transport opens (any miss is an error the caller answers by
//! using UDP): an Ethernet interface holding the rank's IPv4 address, frames of at most
//! [`MAX_FRAME_BYTES`], and the privilege to load BPF programs (root or `CAP_BPF` +
//! `CAP_NET_ADMIN`).

mod assembly;
mod bpf;
mod engine;
mod interface;
mod lm;
mod neighbours;
mod packet;
mod placing;
mod program;
mod ring;
mod socket;
mod transport;

pub use bpf::{AttachMode, Counter, Link, MappedArray, Program, SocketMap};
pub use interface::Interface;
pub use lm::{LmOpenConfig, LmSocket, LmSocketConfig, LmSocketStats, MAX_REGIONS};
pub use neighbours::ethernet_address;
pub use packet::{parse, Datagram, HeaderTemplate, NotOurs, Station, HEADERS_LEN};
pub use placing::{
    placing_program, PlacingSteering, PlacingTable, KEPT_HEADERS_LEN, PLACING_POSITIONS,
};
pub use program::{redirect_program, Steering};
pub use socket::{
    Binding, ReceiveMode, XskSocket, CHUNK_BYTES, KERNEL_HEADROOM, MAX_FRAME_BYTES, RX_CHUNKS,
    TX_CHUNKS,
};
pub use transport::{OpenError, XdpStats, XdpTransport, RECEIVE_BATCH, RING_MAX_PAYLOAD};
