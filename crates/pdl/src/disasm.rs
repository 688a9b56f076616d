//! A readable listing of a module: header, variables, entries, then the code with each entry
//! point labelled and each data operand named after its variable.
//!
//! ```text
//! module delivertest: format version 1, default id 0x8e309716
//!   data 408 bytes, stack 4 words, code 89 bytes, 1 trigger
//! variables:
//!        0  y
//!        8  msg[50]
//! entries:
//!   init        0000
//!   message 10  002b
//! code:
//! init:
//!   0000  PUSH 2
//!   0009  STORE 8                   msg[0]
//! ```
//!
//! Never fails: bytes that do not decode are shown as such, and the listing stops there.

use std::fmt::Write as _;

use crate::isa::Instr;
use crate::module::{Module, VERSION};

/// The listing of `module`.
pub fn disasm(module: &Module) -> String {
    let mut out = String::new();
    header(&mut out, module);
    let mut entries: Vec<(u32, String)> = vec![(module.init_entry, "init".to_string())];
    entries.extend(
        module
            .triggers
            .iter()
            .map(|t| (t.entry, format!("message {}", t.trigger))),
    );
    let _ = writeln!(out, "code:");
    let mut pc = 0usize;
    while pc < module.code.len() {
        for (_, label) in entries.iter().filter(|(entry, _)| *entry as usize == pc) {
            let _ = writeln!(out, "{label}:");
        }
        match Instr::decode(&module.code, pc) {
            Ok((instr, len)) => {
                let text = instr.to_string();
                let note = annotation(module, &instr);
                let line = format!("  {pc:04x}  {text:<24}  {note}");
                let _ = writeln!(out, "{}", line.trim_end());
                pc += len;
            }
            Err(e) => {
                let rest = module.code.len() - pc;
                let _ = writeln!(out, "  {pc:04x}  ??  {e}; {rest} bytes left undecoded");
                break;
            }
        }
    }
    out
}

fn header(out: &mut String, module: &Module) {
    let triggers = module.triggers.len();
    let plural = if triggers == 1 { "" } else { "s" };
    let _ = writeln!(
        out,
        "module {}: format version {VERSION}, default id {:#010x}",
        module.name,
        module.default_id()
    );
    let _ = writeln!(
        out,
        "  data {} bytes, stack {} words, code {} bytes, {triggers} trigger{plural}",
        module.data_len,
        module.stack_depth,
        module.code.len()
    );
    let _ = writeln!(out, "variables:");
    for s in &module.symbols {
        if s.array {
            let _ = writeln!(out, "  {:>6}  {}[{}]", s.offset, s.name, s.len / 8);
        } else {
            let _ = writeln!(out, "  {:>6}  {}", s.offset, s.name);
        }
    }
    let _ = writeln!(out, "entries:");
    let _ = writeln!(out, "  init        {:04x}", module.init_entry);
    for t in &module.triggers {
        let _ = writeln!(out, "  message {:<4}{:04x}", t.trigger, t.entry);
    }
}

/// The variable a data operand refers to: `i`, `msg[3]`, or `msg[]` for a whole region.
fn annotation(module: &Module, instr: &Instr) -> String {
    let offset = match *instr {
        Instr::Load(offset) | Instr::Store(offset) => offset,
        _ => {
            return instr
                .region()
                .and_then(|r| module.symbols.iter().find(|s| s.offset == r.offset))
                .map(|s| format!("{}[]", s.name))
                .unwrap_or_default()
        }
    };
    let Some(s) = module
        .symbols
        .iter()
        .find(|s| offset >= s.offset && offset < s.offset.saturating_add(s.len))
    else {
        return String::new();
    };
    if s.array {
        format!("{}[{}]", s.name, (offset - s.offset) / 8)
    } else {
        s.name.clone()
    }
}
