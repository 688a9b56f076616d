//! The interpreter: one activation of a loaded program, from an entry to the instruction that
//! ends it, within an instruction budget.
//!
//! Verified code is translated once, at load, into [`Op`]s: the same instructions with jump
//! targets turned from byte offsets into instruction indices (relative to the program's code,
//! so code stays relocatable), so the dispatch loop neither decodes operands nor searches for
//! targets. The loop keeps the operand stack in a fixed array on the Rust stack and never
//! allocates.
//!
//! Every memory reference is checked although the verifier proved the static ones: a failed
//! check that the verifier should have made impossible traps with [`TrapKind::Fault`] instead of
//! panicking, so even a verifier bug cannot crash the engine.

use nicmsg_pdl::isa::{Instr, Region};
use nicmsg_pdl::limits::{MAX_LOCK, MAX_STACK_DEPTH, MAX_TRANSFER_BYTES};
use thiserror::Error;

use crate::host::{Destination, Host, Outgoing, ProgramId, SegmentError, SendRefused};

/// Words of the operand stack (the verifier bounds every module's depth by this).
const STACK_WORDS: usize = MAX_STACK_DEPTH as usize;

/// The operand stack.
pub(crate) type Stack = [i64; STACK_WORDS];

/// One instruction, ready to run. Jump targets are instruction indices relative to the start
/// of the program's code; data operands are byte offsets relative to its data section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Push(i64),
    Load(u32),
    Store(u32),
    LoadX(Region),
    StoreX(Region),
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Neg,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Not,
    Bool,
    Jmp(u32),
    Jz(u32),
    Jnz(u32),
    Loop(u32),
    Await,
    Stop,
    Drop,
    Pass,
    Clock,
    MsgLen,
    MsgSrc,
    Rank,
    NRanks,
    Locked,
    ClearLock,
    SetFlag,
    Display,
    Send(Region),
    Reply(Region),
    Deliver(Region),
    Get(Region),
    Receive(Region),
}

impl Op {
    /// The op of a decoded instruction; `index_of` turns a jump's byte target into an index
    /// (`None` when the target is no instruction boundary, which the verifier refuses).
    pub(crate) fn from_instr(instr: Instr, index_of: impl Fn(u32) -> Option<u32>) -> Option<Op> {
        Some(match instr {
            Instr::Push(v) => Op::Push(v),
            Instr::Load(o) => Op::Load(o),
            Instr::Store(o) => Op::Store(o),
            Instr::LoadX(r) => Op::LoadX(r),
            Instr::StoreX(r) => Op::StoreX(r),
            Instr::Add => Op::Add,
            Instr::Sub => Op::Sub,
            Instr::Mul => Op::Mul,
            Instr::Div => Op::Div,
            Instr::Mod => Op::Mod,
            Instr::Neg => Op::Neg,
            Instr::Eq => Op::Eq,
            Instr::Ne => Op::Ne,
            Instr::Lt => Op::Lt,
            Instr::Le => Op::Le,
            Instr::Gt => Op::Gt,
            Instr::Ge => Op::Ge,
            Instr::Not => Op::Not,
            Instr::Bool => Op::Bool,
            Instr::Jmp(t) => Op::Jmp(index_of(t)?),
            Instr::Jz(t) => Op::Jz(index_of(t)?),
            Instr::Jnz(t) => Op::Jnz(index_of(t)?),
            Instr::Loop(t) => Op::Loop(index_of(t)?),
            Instr::Await => Op::Await,
            Instr::Stop => Op::Stop,
            Instr::Drop => Op::Drop,
            Instr::Pass => Op::Pass,
            Instr::Clock => Op::Clock,
            Instr::MsgLen => Op::MsgLen,
            Instr::MsgSrc => Op::MsgSrc,
            Instr::Rank => Op::Rank,
            Instr::NRanks => Op::NRanks,
            Instr::Locked => Op::Locked,
            Instr::ClearLock => Op::ClearLock,
            Instr::SetFlag => Op::SetFlag,
            Instr::Display => Op::Display,
            Instr::Send(r) => Op::Send(r),
            Instr::Reply(r) => Op::Reply(r),
            Instr::Deliver(r) => Op::Deliver(r),
            Instr::Get(r) => Op::Get(r),
            Instr::Receive(r) => Op::Receive(r),
        })
    }
}

/// Why an activation trapped. The program is disabled ([`crate::ProgramState::Disabled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TrapKind {
    #[error("instruction budget of {budget} spent (a runaway loop?)")]
    BudgetExhausted { budget: u32 },
    #[error("division by zero")]
    DivisionByZero,
    #[error("index {index} outside an array of {words} elements")]
    IndexOutOfBounds { index: i64, words: u32 },
    #[error("length {len} out of range: 0 to {MAX_TRANSFER_BYTES} bytes")]
    LengthOutOfRange { len: i64 },
    #[error("{len} bytes from element {index} reach outside a variable of {bytes} bytes")]
    TransferOutOfBounds { index: i64, len: i64, bytes: u32 },
    #[error("trigger {0} out of range: 0 to 65535")]
    TriggerOutOfRange(i64),
    #[error("program id {0} out of range: 0 to 2^32 - 1")]
    ProgramOutOfRange(i64),
    #[error("rank {rank} does not exist: the job has {ranks} ranks")]
    RankOutOfRange { rank: i64, ranks: u32 },
    #[error("segment {0} out of range: 0 to 65535")]
    SegmentOutOfRange(i64),
    #[error("negative offset {0}")]
    NegativeOffset(i64),
    #[error("lock or flag {0} out of range: 0 to {MAX_LOCK}")]
    LockOutOfRange(i64),
    #[error("REPLY, DROP or PASS without a triggering message (in the initialisation block)")]
    NoMessage,
    #[error(transparent)]
    Segment(#[from] SegmentError),
    #[error(transparent)]
    SendRefused(#[from] SendRefused),
    /// A check the verifier should have made impossible failed (stack or data outside its
    /// bounds, a jump outside the code). Reported rather than panicking.
    #[error("memory fault: {0} (a module the verifier should have refused)")]
    Fault(&'static str),
}

/// How an activation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Await,
    Stop,
    Drop,
    Pass,
    /// At the op with this index.
    Trap(u32, TrapKind),
}

/// What an activation needs besides its code and data.
pub(crate) struct Context<'m> {
    pub program: ProgramId,
    pub rank: u32,
    pub ranks: u32,
    pub budget: u32,
    /// The triggering message; `None` in the initialisation block.
    pub message: Option<&'m crate::Message<'m>>,
}

/// Runs `code` from `entry` on `data` until the activation ends; returns how, and how many
/// instructions ran.
///
/// `stack` is the VM's operand stack, kept between activations so that starting one costs no
/// clearing: the verifier proves every activation starts and ends with it empty, and nothing
/// is read from it before it is written.
pub(crate) fn run<H: Host>(
    code: &[Op],
    data: &mut [u8],
    stack: &mut Stack,
    entry: u32,
    cx: &Context<'_>,
    host: &mut H,
) -> (End, u32) {
    let mut sp = 0usize;
    let mut pc = entry as usize;
    let mut executed = 0u32;

    macro_rules! trap {
        ($kind:expr) => {
            return (End::Trap((pc - 1) as u32, $kind), executed)
        };
    }
    macro_rules! pop {
        () => {{
            if sp == 0 {
                trap!(TrapKind::Fault("operand stack underflow"));
            }
            sp -= 1;
            stack[sp]
        }};
    }
    macro_rules! push {
        ($v:expr) => {{
            let v: i64 = $v;
            if sp == STACK_WORDS {
                trap!(TrapKind::Fault("operand stack overflow"));
            }
            stack[sp] = v;
            sp += 1;
        }};
    }
    macro_rules! binary {
        (|$a:ident, $b:ident| $e:expr) => {{
            let $b = pop!();
            let $a = pop!();
            push!($e);
        }};
    }
    macro_rules! check {
        ($r:expr) => {
            match $r {
                Ok(v) => v,
                Err(kind) => trap!(TrapKind::from(kind)),
            }
        };
    }

    loop {
        let Some(&op) = code.get(pc) else {
            // pc - 1 in trap!: point at the instruction that jumped or fell out.
            pc = pc.max(1);
            trap!(TrapKind::Fault("execution left the code"));
        };
        if executed == cx.budget {
            pc += 1;
            trap!(TrapKind::BudgetExhausted { budget: cx.budget });
        }
        executed += 1;
        pc += 1;
        match op {
            Op::Push(v) => push!(v),
            Op::Load(offset) => push!(check!(load(data, offset as usize))),
            Op::Store(offset) => {
                let v = pop!();
                check!(store(data, offset as usize, v));
            }
            Op::LoadX(r) => {
                let i = pop!();
                let at = check!(element(r, i));
                push!(check!(load(data, at)));
            }
            Op::StoreX(r) => {
                let v = pop!();
                let i = pop!();
                let at = check!(element(r, i));
                check!(store(data, at, v));
            }
            Op::Add => binary!(|a, b| a.wrapping_add(b)),
            Op::Sub => binary!(|a, b| a.wrapping_sub(b)),
            Op::Mul => binary!(|a, b| a.wrapping_mul(b)),
            Op::Div => {
                let b = pop!();
                let a = pop!();
                if b == 0 {
                    trap!(TrapKind::DivisionByZero);
                }
                push!(a.wrapping_div(b));
            }
            Op::Mod => {
                let b = pop!();
                let a = pop!();
                if b == 0 {
                    trap!(TrapKind::DivisionByZero);
                }
                push!(a.wrapping_rem(b));
            }
            Op::Neg => {
                let a = pop!();
                push!(a.wrapping_neg());
            }
            Op::Eq => binary!(|a, b| i64::from(a == b)),
            Op::Ne => binary!(|a, b| i64::from(a != b)),
            Op::Lt => binary!(|a, b| i64::from(a < b)),
            Op::Le => binary!(|a, b| i64::from(a <= b)),
            Op::Gt => binary!(|a, b| i64::from(a > b)),
            Op::Ge => binary!(|a, b| i64::from(a >= b)),
            Op::Not => {
                let a = pop!();
                push!(i64::from(a == 0));
            }
            Op::Bool => {
                let a = pop!();
                push!(i64::from(a != 0));
            }
            Op::Jmp(target) => pc = target as usize,
            Op::Jz(target) => {
                if pop!() == 0 {
                    pc = target as usize;
                }
            }
            Op::Jnz(target) => {
                if pop!() != 0 {
                    pc = target as usize;
                }
            }
            Op::Loop(target) => pc = target as usize,
            Op::Await => return (End::Await, executed),
            Op::Stop => return (End::Stop, executed),
            Op::Drop | Op::Pass => {
                if cx.message.is_none() {
                    trap!(TrapKind::NoMessage);
                }
                let end = if op == Op::Drop { End::Drop } else { End::Pass };
                return (end, executed);
            }
            Op::Clock => push!(host.now_ns()),
            Op::MsgLen => push!(cx.message.map_or(0, |m| m.payload.len() as i64)),
            Op::MsgSrc => push!(i64::from(cx.message.map_or(cx.rank, |m| m.source.rank))),
            Op::Rank => push!(i64::from(cx.rank)),
            Op::NRanks => push!(i64::from(cx.ranks)),
            Op::Locked => {
                let n = check!(lock_number(pop!()));
                push!(i64::from(host.locked(cx.program, n)));
            }
            Op::ClearLock => {
                let n = check!(lock_number(pop!()));
                host.clear_lock(cx.program, n);
            }
            Op::SetFlag => {
                let n = check!(lock_number(pop!()));
                host.set_flag(cx.program, n);
            }
            Op::Display => {
                let v = pop!();
                host.display(cx.program, v);
            }
            Op::Send(r) => {
                let node = pop!();
                let program = pop!();
                let trigger = pop!();
                let len = pop!();
                let i = pop!();
                let bytes = check!(transfer(r, i, len));
                let trigger = check!(trigger_number(trigger));
                let program = check!(
                    u32::try_from(program).map_err(|_| TrapKind::ProgramOutOfRange(program))
                );
                let rank = check!(rank_number(node, cx.ranks));
                let payload = check!(slice(data, bytes));
                check!(host.send(Outgoing {
                    from: cx.program,
                    rank,
                    to: Destination::Program(ProgramId(program)),
                    trigger,
                    payload,
                }));
            }
            Op::Reply(r) => {
                let trigger = pop!();
                let len = pop!();
                let i = pop!();
                let bytes = check!(transfer(r, i, len));
                let trigger = check!(trigger_number(trigger));
                let Some(message) = cx.message else {
                    trap!(TrapKind::NoMessage);
                };
                let payload = check!(slice(data, bytes));
                let to = message
                    .source
                    .program
                    .map_or(Destination::Host, Destination::Program);
                check!(host.send(Outgoing {
                    from: cx.program,
                    rank: message.source.rank,
                    to,
                    trigger,
                    payload,
                }));
            }
            Op::Deliver(r) | Op::Get(r) => {
                let offset = pop!();
                let segment = pop!();
                let len = pop!();
                let i = pop!();
                let bytes = check!(transfer(r, i, len));
                let segment = check!(
                    u16::try_from(segment).map_err(|_| TrapKind::SegmentOutOfRange(segment))
                );
                let offset =
                    check!(u64::try_from(offset).map_err(|_| TrapKind::NegativeOffset(offset)));
                if matches!(op, Op::Deliver(_)) {
                    let payload = check!(slice(data, bytes));
                    check!(host.deliver(cx.program, segment, offset, payload));
                } else {
                    let Some(into) = data.get_mut(bytes) else {
                        trap!(TrapKind::Fault("transfer outside the data section"));
                    };
                    check!(host.get(cx.program, segment, offset, into));
                }
            }
            Op::Receive(r) => {
                let offset = pop!();
                let len = pop!();
                let i = pop!();
                let bytes = check!(transfer(r, i, len));
                let offset =
                    check!(usize::try_from(offset).map_err(|_| TrapKind::NegativeOffset(offset)));
                let Some(into) = data.get_mut(bytes) else {
                    trap!(TrapKind::Fault("transfer outside the data section"));
                };
                let payload = cx.message.map_or(&[][..], |m| m.payload);
                let from = payload.get(offset..).unwrap_or(&[]);
                let n = from.len().min(into.len());
                into[..n].copy_from_slice(&from[..n]);
                into[n..].fill(0);
            }
        }
    }
}

fn load(data: &[u8], at: usize) -> Result<i64, TrapKind> {
    data.get(at..at.wrapping_add(8))
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(i64::from_le_bytes)
        .ok_or(TrapKind::Fault("data reference outside the data section"))
}

fn store(data: &mut [u8], at: usize, v: i64) -> Result<(), TrapKind> {
    data.get_mut(at..at.wrapping_add(8))
        .ok_or(TrapKind::Fault("data reference outside the data section"))?
        .copy_from_slice(&v.to_le_bytes());
    Ok(())
}

/// The byte offset of element `i` of the region.
fn element(r: Region, i: i64) -> Result<usize, TrapKind> {
    let words = r.len / 8;
    if i < 0 || i >= i64::from(words) {
        return Err(TrapKind::IndexOutOfBounds { index: i, words });
    }
    Ok(r.offset as usize + 8 * i as usize)
}

/// The bytes `len` bytes from element `i` of the region occupy in the data section.
fn transfer(r: Region, i: i64, len: i64) -> Result<std::ops::Range<usize>, TrapKind> {
    if !(0..=MAX_TRANSFER_BYTES).contains(&len) {
        return Err(TrapKind::LengthOutOfRange { len });
    }
    let words = r.len / 8;
    if i < 0 || i >= i64::from(words) || 8 * i + len > i64::from(r.len) {
        return Err(TrapKind::TransferOutOfBounds {
            index: i,
            len,
            bytes: r.len,
        });
    }
    let start = r.offset as usize + 8 * i as usize;
    Ok(start..start + len as usize)
}

fn slice(data: &[u8], bytes: std::ops::Range<usize>) -> Result<&[u8], TrapKind> {
    data.get(bytes)
        .ok_or(TrapKind::Fault("transfer outside the data section"))
}

fn trigger_number(t: i64) -> Result<u16, TrapKind> {
    u16::try_from(t).map_err(|_| TrapKind::TriggerOutOfRange(t))
}

fn rank_number(rank: i64, ranks: u32) -> Result<u32, TrapKind> {
    match u32::try_from(rank) {
        Ok(r) if r < ranks => Ok(r),
        _ => Err(TrapKind::RankOutOfRange { rank, ranks }),
    }
}

fn lock_number(n: i64) -> Result<u8, TrapKind> {
    if (0..=MAX_LOCK).contains(&n) {
        Ok(n as u8)
    } else {
        Err(TrapKind::LockOutOfRange(n))
    }
}
