//! The send copies the engine lends the protocol core (`nicmsg_proto`'s `lent_copies.rs`): an
//! eager send above `nicmsg_proto::LENT_COPY_ABOVE` bytes is copied into one when posted and
//! completes as soon as it starts. The engine owns their memory and registers it as the
//! registry's last engine region, which PANIC's buffers leave free.

use std::sync::Arc;

use nicmsg_proto::{Endpoint, RegionId};

use crate::registry::Registry;

/// Registry regions the engine keeps, beyond PANIC's, for the send copies.
pub const SEND_COPY_REGIONS: usize = 1;

/// Largest eager message the engine copies so that its send completes at once: up to it a copy
/// costs a few microseconds at most, against the round trip a stream of such sends would
/// otherwise wait per message for its acknowledgement.
pub const SEND_COPY_MAX_BYTES: usize = 64 << 10;
/// Send copies the engine lends the protocol core: messages a stream keeps in flight without
/// waiting; with [`SEND_COPY_MAX_BYTES`] at most 2 MiB, whose pages are touched only as copies
/// fill them.
pub const SEND_COPIES: u32 = 32;

/// Memory of the send copies, registered while it lives.
pub(crate) struct SendCopies {
    registry: Arc<Registry>,
    region: RegionId,
    _memory: Box<[u8]>,
}

impl SendCopies {
    /// Lends `endpoint` [`SEND_COPIES`] pieces (no more than sends may complete early) of its
    /// eager limit, up to [`SEND_COPY_MAX_BYTES`]; `None`, lending nothing, if the registry
    /// keeps no region beyond PANIC's ([`SEND_COPY_REGIONS`]).
    pub(crate) fn lend(registry: &Arc<Registry>, endpoint: &mut Endpoint) -> Option<Self> {
        let config = endpoint.config();
        let piece_len = (config.eager_limit as usize).min(SEND_COPY_MAX_BYTES);
        let early = u32::try_from(config.max_early_sends).unwrap_or(u32::MAX);
        let pieces = SEND_COPIES.min(early);
        let regions = registry.engine_regions();
        if regions.len() < crate::programs::ENGINE_REGIONS + SEND_COPY_REGIONS || pieces == 0 {
            return None;
        }
        let region = RegionId(regions.end - 1);
        // Zeroed by the allocator: pages are touched only as copies fill them.
        let mut memory = vec![0u8; piece_len * pieces as usize].into_boxed_slice();
        // SAFETY: the memory lives as long as the value returned, which unregisters it when
        // dropped; only the engine writes it (the core, copying sends into it).
        unsafe { registry.register(region, memory.as_mut_ptr(), memory.len()) };
        endpoint.lend_send_copies(region, piece_len as u64, pieces);
        Some(Self {
            registry: Arc::clone(registry),
            region,
            _memory: memory,
        })
    }
}

impl Drop for SendCopies {
    fn drop(&mut self) {
        self.registry.unregister(self.region);
    }
}
