//! Compiles the provider's libfabric half (`src/provider/`, C) against the installed libfabric
//! headers and links libfabric, whose `fi_dupinfo`/`fi_freeinfo` it calls: libfabric opens
//! providers with `RTLD_NOW`, so every symbol must resolve. Without the headers
//! (`libfabric-dev`), the library is built without that half and says so.

use std::path::{Path, PathBuf};

/// Where Debian's `libfabric-dev` puts the header the provider needs most.
const PROVIDER_HEADER: &str = "rdma/providers/fi_prov.h";

/// Where the provider's C half lies: a file per libfabric object (`provider.h` says which
/// holds what), every `.c` of it compiled.
const PROVIDER_DIR: &str = "src/provider";

/// The C files of [`PROVIDER_DIR`], in name order (a stable build).
fn provider_files() -> Vec<PathBuf> {
    let entries = std::fs::read_dir(PROVIDER_DIR).expect("the provider's C directory is readable");
    let mut files: Vec<PathBuf> = entries
        .map(|entry| {
            entry
                .expect("the provider's C directory is readable")
                .path()
        })
        .filter(|path| path.extension().is_some_and(|ext| ext == "c"))
        .collect();
    files.sort();
    files
}

fn main() {
    println!("cargo:rerun-if-changed={PROVIDER_DIR}");
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
        .files(provider_files())
        .include(include)
        .flag_if_supported("-std=gnu11")
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(true)
        .compile("nicmsg_provider");
    println!("cargo:rustc-link-lib=dylib=fabric");
    println!("cargo:rustc-cfg=nicmsg_libfabric");
}
