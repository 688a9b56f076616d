//! Fuzz target for the PDL compiler: `nicmsg_pdl::compile` on arbitrary text.
//!
//! Oracle: compiling never panics, whatever the input; a program it accepts yields a module that
//! passes the verifier and reads back from its encoding unchanged (the compiler only emits what
//! the VM's loader accepts); a program it refuses has between 1 and `MAX_ERRORS` errors, and
//! each renders with a position.
//!
//! Bytes that are not UTF-8 become U+FFFD, as `nicmsg pdl compile` reads files.
//!
//! Run: `cargo +nightly fuzz run pdl_compile -- -max_total_time=600`
//! from the repository's root (seed corpus: `mkdir -p fuzz/corpus/pdl_compile &&
//! cp examples/pdl/*.pdl fuzz/corpus/pdl_compile/`)

#![no_main]

use libfuzzer_sys::fuzz_target;
use nicmsg_pdl::{compile, limits::MAX_ERRORS, render_all, verify, Module};

fuzz_target!(|data: &[u8]| {
    let source = String::from_utf8_lossy(data);
    match compile(&source) {
        Ok(module) => {
            verify(&module).expect("the compiler emits only modules the verifier accepts");
            let bytes = module.encode().expect("an emitted module encodes");
            assert_eq!(Module::decode(&bytes), Ok(module));
        }
        Err(errors) => {
            assert!(!errors.is_empty() && errors.len() <= MAX_ERRORS);
            let text = render_all("fuzz.pdl", &source, &errors);
            assert_eq!(text.matches("--> fuzz.pdl:").count(), errors.len());
        }
    }
});
