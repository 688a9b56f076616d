//! The verifier's rules, checked on a decoded module (docs/pdl.md, "Verifier rules"). The VM
//! runs this, or its own check of the same rules, on every module before loading it: modules
//! may come from the network. Every module the compiler emits passes.
//!
//! The check is one pass over the code in address order. Because `JMP`, `JZ` and `JNZ` only go
//! forward and `LOOP` only goes back, every way into an instruction except a `LOOP` comes from
//! an earlier address, so the stack depth at each instruction is known when the pass reaches it,
//! and an instruction nothing has reached by then is unreachable. This is the shape eBPF's
//! verifier accepts too (bounded stack, direct jumps, no unreachable code).

use thiserror::Error;

use crate::isa::{Flow, Instr, IsaError};
use crate::limits::MAX_STACK_DEPTH;
use crate::module::Module;

/// A broken rule, with the code offset of the instruction that breaks it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VerifyError {
    #[error(transparent)]
    Decode(#[from] IsaError),
    #[error("{what} entry {entry:#06x} is not at an instruction boundary")]
    EntryNotAtBoundary { what: String, entry: u32 },
    #[error(
        "{opcode} at {pc:#06x} jumps to {target:#06x}, not an instruction boundary within the code"
    )]
    BadTarget {
        pc: u32,
        opcode: &'static str,
        target: u32,
    },
    #[error("{opcode} at {pc:#06x} jumps {direction} to {target:#06x}: JMP, JZ and JNZ go forward, LOOP goes back")]
    WrongDirection {
        pc: u32,
        opcode: &'static str,
        target: u32,
        direction: &'static str,
    },
    #[error("{opcode} at {pc:#06x} addresses data {offset}+{len}, outside the {data_len}-byte data section or not whole words")]
    DataOutOfBounds {
        pc: u32,
        opcode: &'static str,
        offset: u32,
        len: u32,
        data_len: u32,
    },
    #[error("instruction at {pc:#06x} is unreachable")]
    Unreachable { pc: u32 },
    #[error("{opcode} at {pc:#06x} pops {pops} words from a stack of {depth}")]
    StackUnderflow {
        pc: u32,
        opcode: &'static str,
        pops: u8,
        depth: u16,
    },
    #[error("stack depth {depth} at {pc:#06x} exceeds the module's declared {declared}")]
    StackOverflow { pc: u32, depth: u16, declared: u16 },
    #[error("stack depth at {pc:#06x} differs between paths: {first} and {second}")]
    DepthMismatch { pc: u32, first: u16, second: u16 },
    #[error("{opcode} at {pc:#06x} ends the activation with {depth} words left on the stack")]
    StackNotEmptyAtEnd {
        pc: u32,
        opcode: &'static str,
        depth: u16,
    },
    #[error("execution runs past the end of the code after {pc:#06x}")]
    FallsOffEnd { pc: u32 },
    #[error("the module declares stack depth {0}, more than the limit {MAX_STACK_DEPTH}")]
    DeclaredStackTooDeep(u16),
}

/// What a verified module needs at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// The deepest operand stack any path reaches (at most the declared depth).
    pub max_stack_depth: u16,
    /// Number of instructions.
    pub instructions: usize,
}

/// Checks every rule; the first broken one is the error.
pub fn verify(module: &Module) -> Result<Verified, VerifyError> {
    if module.stack_depth > MAX_STACK_DEPTH {
        return Err(VerifyError::DeclaredStackTooDeep(module.stack_depth));
    }
    let instrs = Instr::decode_all(&module.code)?;
    let code_len = module.code.len();
    // Index of the instruction starting at each byte, for boundaries and targets.
    let mut index_at = vec![None; code_len];
    for (i, (pc, _)) in instrs.iter().enumerate() {
        index_at[*pc as usize] = Some(i);
    }
    let boundary = |offset: u32| index_at.get(offset as usize).copied().flatten();

    // Incoming stack depth of each instruction; None while nothing has reached it.
    let mut depth: Vec<Option<u16>> = vec![None; instrs.len()];
    let entries = std::iter::once(("init".to_string(), module.init_entry)).chain(
        module
            .triggers
            .iter()
            .map(|t| (format!("trigger {}", t.trigger), t.entry)),
    );
    for (what, entry) in entries {
        let i = boundary(entry).ok_or(VerifyError::EntryNotAtBoundary { what, entry })?;
        merge(&mut depth, i, 0, instrs[i].0)?;
    }

    let mut max_seen = 0u16;
    for (i, &(pc, instr)) in instrs.iter().enumerate() {
        let before = depth[i].ok_or(VerifyError::Unreachable { pc })?;
        check_data(module, pc, &instr)?;
        let after = apply(module, pc, &instr, before)?;
        max_seen = max_seen.max(after).max(before);
        let opcode = instr.opcode().mnemonic();
        let next = i + 1;
        let target_index =
            |target: u32| boundary(target).ok_or(VerifyError::BadTarget { pc, opcode, target });
        match instr.flow() {
            Flow::Next => fall_through(&mut depth, &instrs, next, after, pc)?,
            Flow::Branch(target) | Flow::Jump(target) => {
                let t = target_index(target)?;
                if t <= i {
                    return Err(wrong_direction(pc, opcode, target, "back"));
                }
                merge(&mut depth, t, after, target)?;
                if matches!(instr.flow(), Flow::Branch(_)) {
                    fall_through(&mut depth, &instrs, next, after, pc)?;
                }
            }
            Flow::Loop(target) => {
                let t = target_index(target)?;
                if t > i {
                    return Err(wrong_direction(pc, opcode, target, "forward"));
                }
                // The target is earlier, so its depth is already final.
                merge(&mut depth, t, after, target)?;
            }
            Flow::End => {
                if before != 0 {
                    return Err(VerifyError::StackNotEmptyAtEnd {
                        pc,
                        opcode,
                        depth: before,
                    });
                }
            }
        }
    }
    Ok(Verified {
        max_stack_depth: max_seen,
        instructions: instrs.len(),
    })
}

fn wrong_direction(
    pc: u32,
    opcode: &'static str,
    target: u32,
    direction: &'static str,
) -> VerifyError {
    VerifyError::WrongDirection {
        pc,
        opcode,
        target,
        direction,
    }
}

/// Records that instruction `i` is reached with `incoming` words; all ways in must agree.
fn merge(depth: &mut [Option<u16>], i: usize, incoming: u16, pc: u32) -> Result<(), VerifyError> {
    match depth[i] {
        None => depth[i] = Some(incoming),
        Some(first) if first != incoming => {
            return Err(VerifyError::DepthMismatch {
                pc,
                first,
                second: incoming,
            })
        }
        Some(_) => {}
    }
    Ok(())
}

fn fall_through(
    depth: &mut [Option<u16>],
    instrs: &[(u32, Instr)],
    next: usize,
    after: u16,
    pc: u32,
) -> Result<(), VerifyError> {
    let Some(&(next_pc, _)) = instrs.get(next) else {
        return Err(VerifyError::FallsOffEnd { pc });
    };
    merge(depth, next, after, next_pc)
}

/// The depth after the instruction, checked against underflow and the declared depth.
fn apply(module: &Module, pc: u32, instr: &Instr, before: u16) -> Result<u16, VerifyError> {
    let effect = instr.stack_effect();
    let pops = u16::from(effect.pops);
    if pops > before {
        return Err(VerifyError::StackUnderflow {
            pc,
            opcode: instr.opcode().mnemonic(),
            pops: effect.pops,
            depth: before,
        });
    }
    let after = before - pops + u16::from(effect.pushes);
    if after > module.stack_depth {
        return Err(VerifyError::StackOverflow {
            pc,
            depth: after,
            declared: module.stack_depth,
        });
    }
    Ok(after)
}

/// Static data operands lie within the data section, in whole words.
fn check_data(module: &Module, pc: u32, instr: &Instr) -> Result<(), VerifyError> {
    let (offset, len, fits) = match *instr {
        Instr::Load(offset) | Instr::Store(offset) => {
            let fits =
                offset.is_multiple_of(8) && u64::from(offset) + 8 <= u64::from(module.data_len);
            (offset, 8, fits)
        }
        _ => match instr.region() {
            Some(r) => (r.offset, r.len, r.fits(module.data_len)),
            None => return Ok(()),
        },
    };
    if fits {
        return Ok(());
    }
    Err(VerifyError::DataOutOfBounds {
        pc,
        opcode: instr.opcode().mnemonic(),
        offset,
        len,
        data_len: module.data_len,
    })
}
