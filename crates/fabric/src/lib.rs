//! nicmsg as a libfabric provider (`libnicmsg-fi.so`): reliable datagram endpoints
//! (`FI_EP_RDM`) with tagged and untagged messages, so programs written against libfabric,
//! Open MPI's `ofi` MTL among them, run on the nicmsg engine. libfabric loads it from
//! `FI_PROVIDER_PATH` ([docs/mpi.md](../../docs/mpi.md)).
//!
//! Two halves: `provider/` (C, a file per object: `provider.h` lists them) holds the objects
//! libfabric's API works on, laid out by libfabric's own headers (fabric, domain, endpoint,
//! completion queue, address vector, event queue, and their operation tables); [`endpoint`]
//! runs each endpoint's operations on a
//! [`nicmsg::tagged::TaggedEndpoint`] and hands finished ones back as completions. Built only
//! where libfabric's headers are installed (`libfabric-dev`); elsewhere the library has the
//! Rust half alone and libfabric would not load it.

pub mod endpoint;
mod held;
mod held_sends;
mod in_engine;

#[cfg(nicmsg_libfabric)]
extern "C" {
    /// `provider/fabric.c`: the provider's description (`struct fi_provider`).
    fn nicmsg_provider_ini() -> *mut std::ffi::c_void;
}

/// The entry point libfabric looks up in a provider library (`FI_EXT_INI`).
#[cfg(nicmsg_libfabric)]
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut std::ffi::c_void {
    // SAFETY: returns the address of a static; no arguments, no other effect.
    unsafe { nicmsg_provider_ini() }
}
