//! # PDL: the language of PANIC's engine programs, its compiler and module format
//!
//! PANIC (Protocols Aboard Network Interface Cards) runs small user programs on the offload
//! engine, triggered by messages. Programs are written in PDL, compiled on the host into a
//! relocatable [`Module`], and loaded at run time into the engine's VM (crate `nicmsg-vm`),
//! which verifies them first. This crate is everything before loading, and depends on nothing
//! of the runtime:
//!
//! * [`compile`]: source text to a [`Module`], or every error found, each with its span
//!   ([`Diagnostic`]; [`render_all`] prints them as rustc does). Never panics on any input.
//! * [`isa`]: the VM's instruction set: opcodes, encoding, stack effects, control flow.
//! * [`module`]: the module's byte format, [`Module::encode`] and [`Module::decode`] (checked,
//!   never panics on hostile bytes), and how programs are identified ([`program_id`]).
//! * [`verify()`]: the verifier's rules, checked on a decoded module.
//! * [`disasm()`]: a readable listing of a module.
//!
//! The language, the module format, the instruction set and the verifier's rules are described
//! in `docs/pdl.md`; the limits are in [`limits`].

#![forbid(unsafe_code)]

pub mod ast;
mod codegen;
pub mod diag;
pub mod disasm;
pub mod isa;
mod lexer;
pub mod limits;
pub mod module;
mod parser;
pub mod verify;

pub use diag::{render_all, Diagnostic, Span};
pub use disasm::disasm;
pub use isa::{Instr, Opcode, Region};
pub use module::{program_id, Module, ModuleError};
pub use verify::{verify, VerifyError};

use limits::{MAX_ERRORS, MAX_SOURCE_BYTES};

/// Compiles a PDL program. On failure, returns every error found (up to
/// [`limits::MAX_ERRORS`]), in source order.
///
/// Syntax errors stop the compilation before the checks of meaning (undeclared names, bounds,
/// triggers), which would mostly repeat them on a half-read program.
pub fn compile(source: &str) -> Result<Module, Vec<Diagnostic>> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(vec![Diagnostic::error(
            Span::new(0, 0),
            "source file too large",
        )
        .label(format!(
            "{} bytes; at most {MAX_SOURCE_BYTES}",
            source.len()
        ))]);
    }
    let (tokens, mut errors) = lexer::lex(source);
    let (program, parse_errors) = parser::parse(source, tokens);
    errors.extend(parse_errors);
    let program = match program {
        Some(program) if errors.is_empty() => program,
        _ => return Err(in_order(errors)),
    };
    codegen::generate(source, &program).map_err(in_order)
}

fn in_order(mut errors: Vec<Diagnostic>) -> Vec<Diagnostic> {
    // Stable: errors at one position keep the order they were found in.
    errors.sort_by_key(|d| d.span.start);
    errors.truncate(MAX_ERRORS);
    errors
}
