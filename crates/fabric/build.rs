//! Compiles the provider's libfabric half (`src/provider/`, C) against the installed libfabric
//! headers and links libfabric, whose `fi_dupinfo`/`fi_freeinfo` it calls: libfabric opens
//! providers with `RTLD_NOW`, so every symbol must resolve. Without the headers
//! (`libfabric-dev`), the library is built without that half and says so.

use std::path::Path;

/// Where Debian's `libfabric-dev` puts the header the provider needs most.
const PROVIDER_HEADER: &str = "rdma/providers/fi_prov.h";

/// The provider's C files, an object of libfabric's each (`src/provider/provider.h` says
/// which holds what).
const PROVIDER_FILES: [&str; 8] = [
    "common.c",
    "info.c",
    "fabric.c",
    "domain.c",
    "av.c",
    "cq.c",
    "ep.c",
    "messages.c",
];

fn main() {
    println!("cargo:rerun-if-changed=src/provider");
    println!("cargo:rustc-check-cfg=cfg(nicmsg_libfabric)");
    let include = ["/usr/include", "/usr/local/include"]
        .into_iter()
        .find(|dir| Path::new(dir).join(PROVIDER_HEADER).exists());
    let Some(include) = include else {
        println!(
            "cargo:warning=libfabric headers ({PROVIDER_HEADER}) not found: the nicmsg \
             provider is built without its libfabric half (install libfabric-dev)"
        );
        return;
    };
    cc::Build::new()
        .files(PROVIDER_FILES.map(|file| format!("src/provider/{file}")))
        .include(include)
        .flag_if_supported("-std=gnu11")
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(true)
        .compile("nicmsg_provider");
    println!("cargo:rustc-link-lib=dylib=fabric");
    println!("cargo:rustc-cfg=nicmsg_libfabric");
}
