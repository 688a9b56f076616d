use crate::*;

/// Bytes of per-peer protocol state (see `docs/protocol.md`).
pub const PEER_STATE_BYTES: usize = 0;

/// The protocol state machine of one rank. See the crate documentation for the call order.
pub struct Endpoint {}

impl Endpoint {
    /// Creates the endpoint of `rank` in a job of `size` ranks; `job` tags every frame so frames
    /// of another job are rejected. All tables are allocated here, none later.
    pub fn new(config: Config, job: u32, rank: Rank, size: u32) -> Result<Self, ConfigError> { todo!() }
    pub fn rank(&self) -> Rank { todo!() }
    pub fn size(&self) -> u32 { todo!() }
    pub fn config(&self) -> &Config { todo!() }

    /// Posts a send of the bytes described by `data` to `dst` with `tag`. The bytes must stay
    /// unchanged until the completion. Short messages may complete before the receive is posted.
    pub fn post_send(&mut self, now: Nanos, dst: Rank, tag: Tag, data: SgList, memory: &impl HostMemory) -> Result<OpId, PostError> { todo!() }
    /// Posts a receive into `buffer`; may match (and complete from) an already-buffered message.
    pub fn post_recv(&mut self, now: Nanos, source: Source, tag: TagMatch, buffer: SgList, memory: &mut impl HostMemory) -> Result<OpId, PostError> { todo!() }
    /// Non-blocking probe: the status of the first matching message available to a receive.
    pub fn iprobe(&self, source: Source, tag: TagMatch) -> Option<Status> { todo!() }
    /// Blocking probe as an operation: completes when a matching message is available.
    pub fn post_probe(&mut self, now: Nanos, source: Source, tag: TagMatch) -> Result<OpId, PostError> { todo!() }
    /// Cancels a pending receive, probe, or send not yet started; its completion reports `Cancelled`.
    pub fn cancel(&mut self, now: Nanos, op: OpId) -> Result<(), CancelError> { todo!() }

    /// Feeds one received datagram. Anything malformed is dropped and counted.
    pub fn handle_frame(&mut self, now: Nanos, bytes: &[u8], memory: &mut impl HostMemory) { todo!() }
    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos) { todo!() }
    /// Next frame to send, if any.
    pub fn poll_transmit(&mut self, now: Nanos, memory: &impl HostMemory) -> Option<Transmit> { todo!() }
    /// Next finished operation, if any.
    pub fn poll_completion(&mut self) -> Option<Completion> { todo!() }
    /// When `handle_timeout` must next be called, if any timer runs.
    pub fn poll_timeout(&self) -> Option<Nanos> { todo!() }

    pub fn stats(&self) -> &Stats { todo!() }
    pub fn peer_stats(&self, peer: Rank) -> Option<&Stats> { todo!() }
    pub fn usage(&self) -> Usage { todo!() }
    /// True when the peer has been declared unreachable.
    pub fn is_peer_unreachable(&self, peer: Rank) -> bool { todo!() }
}
