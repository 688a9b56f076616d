//! The instruction set of the PDL virtual machine: a stack machine, as the paper's (section
//! 3.1), whose code a verifier can check before it runs (docs/pdl.md, "Verifier rules";
//! [`crate::verify`] is the reference check).
//!
//! # Machine
//!
//! * An **operand stack** of signed 64-bit words, at most [`crate::limits::MAX_STACK_DEPTH`]
//!   deep; every instruction has a fixed [`StackEffect`], so the depth at each instruction is
//!   known statically, and it is 0 at every entry and every activation end.
//! * The program's **data section**: `data_len` bytes, zeroed at load, holding the variables as
//!   little-endian `i64` words. Data operands are byte offsets relative to the section's start;
//!   every one is static and checked by the verifier, except the element of an array, which
//!   `LOADX`/`STOREX` and the transfer instructions check at run time against the [`Region`]
//!   they carry (the array's whole extent, itself checked statically).
//! * **Code addresses** (jump targets, entries) are byte offsets relative to the start of the
//!   module's code, so code is relocatable. Jumps are direct (the target is an immediate);
//!   `JMP`, `JZ` and `JNZ` only go forward, and `LOOP` is the only backward jump: a loop costs
//!   one `LOOP` per iteration, and the per-activation instruction budget bounds them.
//!
//! # Encoding
//!
//! One opcode byte, then the operands, little-endian, with no padding: `PUSH` an `i64` (8
//! bytes); `LOAD`, `STORE` and the jumps a `u32` (4 bytes); the instructions with a [`Region`]
//! two `u32` (offset, then length; 8 bytes). The length of an instruction follows from its
//! opcode alone, so instruction boundaries are found by decoding from offset 0.
//!
//! # Traps
//!
//! A run-time check that fails (division by zero, an index or transfer outside its region, a
//! negative length, a segment, lock, rank, program or trigger that does not exist, the budget
//! spent) traps: the activation ends, the program is disabled (it stays loaded but runs no
//! more until it is unloaded or replaced), and the VM reports the trap and the offset of the
//! instruction to the engine (docs/vm.md).

use std::fmt;

use thiserror::Error;

/// Operation codes. The values are the encoding and never change within a module version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    Push = 0x01,
    Load = 0x10,
    Store = 0x11,
    LoadX = 0x12,
    StoreX = 0x13,
    Add = 0x20,
    Sub = 0x21,
    Mul = 0x22,
    Div = 0x23,
    Mod = 0x24,
    Neg = 0x25,
    Eq = 0x26,
    Ne = 0x27,
    Lt = 0x28,
    Le = 0x29,
    Gt = 0x2A,
    Ge = 0x2B,
    Not = 0x2C,
    Bool = 0x2D,
    Jmp = 0x30,
    Jz = 0x31,
    Jnz = 0x32,
    Loop = 0x33,
    Await = 0x40,
    Stop = 0x41,
    Drop = 0x42,
    Pass = 0x43,
    Clock = 0x50,
    MsgLen = 0x51,
    MsgSrc = 0x52,
    Rank = 0x53,
    NRanks = 0x54,
    Locked = 0x55,
    ClearLock = 0x56,
    SetFlag = 0x57,
    Display = 0x58,
    Send = 0x60,
    Reply = 0x61,
    Deliver = 0x62,
    Get = 0x63,
    Receive = 0x64,
}

/// What follows an opcode byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operands {
    None,
    /// An `i64`, 8 bytes.
    Imm64,
    /// A `u32`: a data offset (`LOAD`, `STORE`) or a code address (jumps).
    U32,
    /// A [`Region`]: two `u32`.
    Region,
}

impl Operands {
    /// Bytes of operands.
    pub const fn encoded_len(self) -> usize {
        match self {
            Operands::None => 0,
            Operands::Imm64 | Operands::Region => 8,
            Operands::U32 => 4,
        }
    }
}

impl Opcode {
    /// Every opcode, in encoding order.
    pub const ALL: [Opcode; 41] = [
        Opcode::Push,
        Opcode::Load,
        Opcode::Store,
        Opcode::LoadX,
        Opcode::StoreX,
        Opcode::Add,
        Opcode::Sub,
        Opcode::Mul,
        Opcode::Div,
        Opcode::Mod,
        Opcode::Neg,
        Opcode::Eq,
        Opcode::Ne,
        Opcode::Lt,
        Opcode::Le,
        Opcode::Gt,
        Opcode::Ge,
        Opcode::Not,
        Opcode::Bool,
        Opcode::Jmp,
        Opcode::Jz,
        Opcode::Jnz,
        Opcode::Loop,
        Opcode::Await,
        Opcode::Stop,
        Opcode::Drop,
        Opcode::Pass,
        Opcode::Clock,
        Opcode::MsgLen,
        Opcode::MsgSrc,
        Opcode::Rank,
        Opcode::NRanks,
        Opcode::Locked,
        Opcode::ClearLock,
        Opcode::SetFlag,
        Opcode::Display,
        Opcode::Send,
        Opcode::Reply,
        Opcode::Deliver,
        Opcode::Get,
        Opcode::Receive,
    ];

    /// Decodes an opcode byte; unknown values are `None`, never a guess.
    pub fn from_u8(byte: u8) -> Option<Opcode> {
        Self::ALL.iter().copied().find(|op| *op as u8 == byte)
    }

    pub fn mnemonic(self) -> &'static str {
        use Opcode::*;
        match self {
            Push => "PUSH",
            Load => "LOAD",
            Store => "STORE",
            LoadX => "LOADX",
            StoreX => "STOREX",
            Add => "ADD",
            Sub => "SUB",
            Mul => "MUL",
            Div => "DIV",
            Mod => "MOD",
            Neg => "NEG",
            Eq => "EQ",
            Ne => "NE",
            Lt => "LT",
            Le => "LE",
            Gt => "GT",
            Ge => "GE",
            Not => "NOT",
            Bool => "BOOL",
            Jmp => "JMP",
            Jz => "JZ",
            Jnz => "JNZ",
            Loop => "LOOP",
            Await => "AWAIT",
            Stop => "STOP",
            Drop => "DROP",
            Pass => "PASS",
            Clock => "CLOCK",
            MsgLen => "MSGLEN",
            MsgSrc => "MSGSRC",
            Rank => "RANK",
            NRanks => "NRANKS",
            Locked => "LOCKED",
            ClearLock => "CLEARLOCK",
            SetFlag => "SETFLAG",
            Display => "DISPLAY",
            Send => "SEND",
            Reply => "REPLY",
            Deliver => "DELIVER",
            Get => "GET",
            Receive => "RECEIVE",
        }
    }

    pub fn operands(self) -> Operands {
        use Opcode::*;
        match self {
            Push => Operands::Imm64,
            Load | Store | Jmp | Jz | Jnz | Loop => Operands::U32,
            LoadX | StoreX | Send | Reply | Deliver | Get | Receive => Operands::Region,
            _ => Operands::None,
        }
    }

    /// Bytes of the whole instruction: the opcode and its operands.
    pub fn encoded_len(self) -> usize {
        1 + self.operands().encoded_len()
    }

    /// Words popped and pushed.
    pub fn stack_effect(self) -> StackEffect {
        use Opcode::*;
        let (pops, pushes) = match self {
            Push | Load | Clock | MsgLen | MsgSrc | Rank | NRanks => (0, 1),
            Store | Jz | Jnz | ClearLock | SetFlag | Display => (1, 0),
            LoadX | Neg | Not | Bool | Locked => (1, 1),
            StoreX => (2, 0),
            Add | Sub | Mul | Div | Mod | Eq | Ne | Lt | Le | Gt | Ge => (2, 1),
            Jmp | Loop | Await | Stop | Drop | Pass => (0, 0),
            Send => (5, 0),
            Reply | Receive => (3, 0),
            Deliver | Get => (4, 0),
        };
        StackEffect { pops, pushes }
    }

    /// Ends the activation: nothing follows on this path, and the stack must be empty.
    pub fn ends_activation(self) -> bool {
        matches!(
            self,
            Opcode::Await | Opcode::Stop | Opcode::Drop | Opcode::Pass
        )
    }
}

/// What an instruction takes from and leaves on the operand stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackEffect {
    pub pops: u8,
    pub pushes: u8,
}

/// A range of the data section: `len` bytes from `offset`, both multiples of 8, `len` at least
/// 8. Carried by the instructions that index an array or move bytes: the run-time element and
/// length are checked against it, and the verifier checks it lies within the data section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Region {
    pub offset: u32,
    pub len: u32,
}

impl Region {
    /// Whether the region is well formed and lies within a data section of `data_len` bytes.
    pub fn fits(self, data_len: u32) -> bool {
        self.offset.is_multiple_of(8)
            && self.len.is_multiple_of(8)
            && self.len >= 8
            && u64::from(self.offset) + u64::from(self.len) <= u64::from(data_len)
    }
}

/// How control leaves an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// On to the next instruction.
    Next,
    /// `JZ`, `JNZ`: to the target or the next instruction.
    Branch(u32),
    /// `JMP`: to the target only.
    Jump(u32),
    /// `LOOP`: back to the target, charging the budget.
    Loop(u32),
    /// The activation ends.
    End,
}

/// One decoded instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Instr {
    /// `[] -> [imm]`.
    Push(i64),
    /// `[] -> [data[offset]]`: the word at a byte offset of the data section.
    Load(u32),
    /// `[v] -> []`: `data[offset] = v`.
    Store(u32),
    /// `[i] -> [v]`: the `i`-th word of the region; traps unless `0 <= i < len / 8`.
    LoadX(Region),
    /// `[i v] -> []`: the `i`-th word of the region becomes `v`; traps like `LOADX`.
    StoreX(Region),
    /// `[a b] -> [a op b]`: wrapping 64-bit arithmetic; `DIV` and `MOD` truncate toward zero
    /// (the remainder has the sign of `a`) and trap when `b` is 0.
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    /// `[a] -> [-a]` (wrapping).
    Neg,
    /// `[a b] -> [1 or 0]`: signed comparisons.
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// `[a] -> [1 if a == 0 else 0]`.
    Not,
    /// `[a] -> [1 if a != 0 else 0]`.
    Bool,
    /// Jumps forward to the target.
    Jmp(u32),
    /// `[c] -> []`: jumps forward to the target if `c == 0`.
    Jz(u32),
    /// `[c] -> []`: jumps forward to the target if `c != 0`.
    Jnz(u32),
    /// Jumps back to the target (at or before this instruction); the loop's cost is charged to
    /// the activation's budget.
    Loop(u32),
    /// Ends the activation: the triggering message is consumed; the program waits for its next
    /// trigger.
    Await,
    /// Ends the activation and the program, which is unloaded.
    Stop,
    /// Ends the activation; the triggering frame is dropped (and counted as dropped).
    Drop,
    /// Ends the activation; the triggering frame goes on to the host.
    Pass,
    /// `[] -> [ns]`: the engine's clock, nanoseconds.
    Clock,
    /// `[] -> [bytes]`: the payload length of the triggering message (0 in the init block).
    MsgLen,
    /// `[] -> [rank]`: the rank that sent the triggering message (this rank in the init block).
    MsgSrc,
    /// `[] -> [rank]`: this engine's rank.
    Rank,
    /// `[] -> [n]`: the number of ranks in the job.
    NRanks,
    /// `[n] -> [1 or 0]`: whether the host holds lock `n`.
    Locked,
    /// `[n] -> []`: clears lock `n` (releases the host waiting on it).
    ClearLock,
    /// `[n] -> []`: sets flag `n` (the host polls or waits for it).
    SetFlag,
    /// `[v] -> []`: appends `v` to the program's display output, which the host reads.
    Display,
    /// `[i len trigger program node] -> []`: sends `len` bytes of the region from word `i` to
    /// `program` on rank `node`, as `trigger`.
    Send(Region),
    /// `[i len trigger] -> []`: sends `len` bytes of the region from word `i` to the sender of
    /// the triggering message (its program, or its host), as `trigger`.
    Reply(Region),
    /// `[i len segment offset] -> []`: copies `len` bytes of the region from word `i` into the
    /// shared segment at byte `offset`.
    Deliver(Region),
    /// `[i len segment offset] -> []`: copies `len` bytes of the shared segment from byte
    /// `offset` into the region from word `i`.
    Get(Region),
    /// `[i len offset] -> []`: copies `len` bytes of the triggering message's payload from byte
    /// `offset` into the region from word `i`; bytes past the payload's end read as zero.
    Receive(Region),
}

/// Why bytes do not decode as an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum IsaError {
    #[error("unknown opcode 0x{byte:02x} at {pc:#06x}")]
    UnknownOpcode { pc: usize, byte: u8 },
    #[error("{opcode} at {pc:#06x} is cut short by the end of the code")]
    Truncated { pc: usize, opcode: &'static str },
}

impl Instr {
    pub fn opcode(&self) -> Opcode {
        use Instr::*;
        match self {
            Push(_) => Opcode::Push,
            Load(_) => Opcode::Load,
            Store(_) => Opcode::Store,
            LoadX(_) => Opcode::LoadX,
            StoreX(_) => Opcode::StoreX,
            Add => Opcode::Add,
            Sub => Opcode::Sub,
            Mul => Opcode::Mul,
            Div => Opcode::Div,
            Mod => Opcode::Mod,
            Neg => Opcode::Neg,
            Eq => Opcode::Eq,
            Ne => Opcode::Ne,
            Lt => Opcode::Lt,
            Le => Opcode::Le,
            Gt => Opcode::Gt,
            Ge => Opcode::Ge,
            Not => Opcode::Not,
            Bool => Opcode::Bool,
            Jmp(_) => Opcode::Jmp,
            Jz(_) => Opcode::Jz,
            Jnz(_) => Opcode::Jnz,
            Loop(_) => Opcode::Loop,
            Await => Opcode::Await,
            Stop => Opcode::Stop,
            Drop => Opcode::Drop,
            Pass => Opcode::Pass,
            Clock => Opcode::Clock,
            MsgLen => Opcode::MsgLen,
            MsgSrc => Opcode::MsgSrc,
            Rank => Opcode::Rank,
            NRanks => Opcode::NRanks,
            Locked => Opcode::Locked,
            ClearLock => Opcode::ClearLock,
            SetFlag => Opcode::SetFlag,
            Display => Opcode::Display,
            Send(_) => Opcode::Send,
            Reply(_) => Opcode::Reply,
            Deliver(_) => Opcode::Deliver,
            Get(_) => Opcode::Get,
            Receive(_) => Opcode::Receive,
        }
    }

    /// Bytes of the encoded instruction.
    pub fn encoded_len(&self) -> usize {
        self.opcode().encoded_len()
    }

    pub fn stack_effect(&self) -> StackEffect {
        self.opcode().stack_effect()
    }

    pub fn flow(&self) -> Flow {
        match *self {
            Instr::Jz(t) | Instr::Jnz(t) => Flow::Branch(t),
            Instr::Jmp(t) => Flow::Jump(t),
            Instr::Loop(t) => Flow::Loop(t),
            Instr::Await | Instr::Stop | Instr::Drop | Instr::Pass => Flow::End,
            _ => Flow::Next,
        }
    }

    /// The region an instruction carries, if it carries one.
    pub fn region(&self) -> Option<Region> {
        match *self {
            Instr::LoadX(r)
            | Instr::StoreX(r)
            | Instr::Send(r)
            | Instr::Reply(r)
            | Instr::Deliver(r)
            | Instr::Get(r)
            | Instr::Receive(r) => Some(r),
            _ => None,
        }
    }

    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.push(self.opcode() as u8);
        match *self {
            Instr::Push(v) => out.extend_from_slice(&v.to_le_bytes()),
            Instr::Load(x)
            | Instr::Store(x)
            | Instr::Jmp(x)
            | Instr::Jz(x)
            | Instr::Jnz(x)
            | Instr::Loop(x) => out.extend_from_slice(&x.to_le_bytes()),
            _ => {}
        }
        if let Some(r) = self.region() {
            out.extend_from_slice(&r.offset.to_le_bytes());
            out.extend_from_slice(&r.len.to_le_bytes());
        }
        debug_assert_eq!(out.len() - start, self.encoded_len());
    }

    /// Decodes the instruction at byte `pc` of `code`, and returns it with its length.
    pub fn decode(code: &[u8], pc: usize) -> Result<(Instr, usize), IsaError> {
        let byte = *code
            .get(pc)
            .ok_or(IsaError::Truncated { pc, opcode: "code" })?;
        let opcode = Opcode::from_u8(byte).ok_or(IsaError::UnknownOpcode { pc, byte })?;
        let operands = code
            .get(pc + 1..pc + opcode.encoded_len())
            .ok_or(IsaError::Truncated {
                pc,
                opcode: opcode.mnemonic(),
            })?;
        let u32_at = |i: usize| le_u32(&operands[i..]);
        let region = || Region {
            offset: u32_at(0),
            len: u32_at(4),
        };
        use Opcode as O;
        let instr = match opcode {
            O::Push => Instr::Push(le_i64(operands)),
            O::Load => Instr::Load(u32_at(0)),
            O::Store => Instr::Store(u32_at(0)),
            O::LoadX => Instr::LoadX(region()),
            O::StoreX => Instr::StoreX(region()),
            O::Add => Instr::Add,
            O::Sub => Instr::Sub,
            O::Mul => Instr::Mul,
            O::Div => Instr::Div,
            O::Mod => Instr::Mod,
            O::Neg => Instr::Neg,
            O::Eq => Instr::Eq,
            O::Ne => Instr::Ne,
            O::Lt => Instr::Lt,
            O::Le => Instr::Le,
            O::Gt => Instr::Gt,
            O::Ge => Instr::Ge,
            O::Not => Instr::Not,
            O::Bool => Instr::Bool,
            O::Jmp => Instr::Jmp(u32_at(0)),
            O::Jz => Instr::Jz(u32_at(0)),
            O::Jnz => Instr::Jnz(u32_at(0)),
            O::Loop => Instr::Loop(u32_at(0)),
            O::Await => Instr::Await,
            O::Stop => Instr::Stop,
            O::Drop => Instr::Drop,
            O::Pass => Instr::Pass,
            O::Clock => Instr::Clock,
            O::MsgLen => Instr::MsgLen,
            O::MsgSrc => Instr::MsgSrc,
            O::Rank => Instr::Rank,
            O::NRanks => Instr::NRanks,
            O::Locked => Instr::Locked,
            O::ClearLock => Instr::ClearLock,
            O::SetFlag => Instr::SetFlag,
            O::Display => Instr::Display,
            O::Send => Instr::Send(region()),
            O::Reply => Instr::Reply(region()),
            O::Deliver => Instr::Deliver(region()),
            O::Get => Instr::Get(region()),
            O::Receive => Instr::Receive(region()),
        };
        Ok((instr, opcode.encoded_len()))
    }

    /// Every instruction of `code` with its offset, in order; stops at the first error.
    pub fn decode_all(code: &[u8]) -> Result<Vec<(u32, Instr)>, IsaError> {
        let mut out = Vec::new();
        let mut pc = 0;
        while pc < code.len() {
            let (instr, len) = Instr::decode(code, pc)?;
            // pc < code.len() <= MAX_CODE_BYTES for decoded modules; saturate for other callers.
            out.push((u32::try_from(pc).unwrap_or(u32::MAX), instr));
            pc += len;
        }
        Ok(out)
    }
}

/// The little-endian `u32` at the start of `bytes` (which holds at least 4).
fn le_u32(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[..4]);
    u32::from_le_bytes(word)
}

/// The little-endian `i64` at the start of `bytes` (which holds at least 8).
fn le_i64(bytes: &[u8]) -> i64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    i64::from_le_bytes(word)
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.offset, self.len)
    }
}

impl fmt::Display for Instr {
    /// `MNEMONIC operands`: data offsets and regions in bytes, code addresses in hexadecimal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.opcode().mnemonic();
        match *self {
            Instr::Push(v) => write!(f, "{name} {v}"),
            Instr::Load(x) | Instr::Store(x) => write!(f, "{name} {x}"),
            Instr::Jmp(t) | Instr::Jz(t) | Instr::Jnz(t) | Instr::Loop(t) => {
                write!(f, "{name} {t:04x}")
            }
            _ => match self.region() {
                Some(r) => write!(f, "{name} {r}"),
                None => write!(f, "{name}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example(op: Opcode) -> Instr {
        let region = Region {
            offset: 16,
            len: 64,
        };
        let mut code = vec![op as u8];
        code.extend(std::iter::repeat_n(0, op.operands().encoded_len()));
        let (instr, _) = Instr::decode(&code, 0).expect("decodes");
        match instr {
            Instr::Push(_) => Instr::Push(-5),
            Instr::Load(_) => Instr::Load(8),
            Instr::Store(_) => Instr::Store(8),
            Instr::Jmp(_) => Instr::Jmp(0x10),
            Instr::Jz(_) => Instr::Jz(0x10),
            Instr::Jnz(_) => Instr::Jnz(0x10),
            Instr::Loop(_) => Instr::Loop(0),
            Instr::LoadX(_) => Instr::LoadX(region),
            Instr::StoreX(_) => Instr::StoreX(region),
            Instr::Send(_) => Instr::Send(region),
            Instr::Reply(_) => Instr::Reply(region),
            Instr::Deliver(_) => Instr::Deliver(region),
            Instr::Get(_) => Instr::Get(region),
            Instr::Receive(_) => Instr::Receive(region),
            other => other,
        }
    }

    #[test]
    fn every_opcode_round_trips_and_has_its_length() {
        for op in Opcode::ALL {
            let instr = example(op);
            let mut code = Vec::new();
            instr.encode(&mut code);
            assert_eq!(code.len(), op.encoded_len(), "{op:?}");
            assert_eq!(Instr::decode(&code, 0), Ok((instr, op.encoded_len())));
            assert_eq!(Opcode::from_u8(op as u8), Some(op));
            // One byte short is refused.
            if op.encoded_len() > 1 {
                assert!(matches!(
                    Instr::decode(&code[..code.len() - 1], 0),
                    Err(IsaError::Truncated { pc: 0, .. })
                ));
            }
        }
    }

    #[test]
    fn unknown_opcodes_are_refused() {
        let known: Vec<u8> = Opcode::ALL.iter().map(|op| *op as u8).collect();
        for byte in 0..=255u8 {
            let result = Instr::decode(&[byte; 9], 0);
            assert_eq!(result.is_ok(), known.contains(&byte), "byte {byte:#x}");
        }
    }

    #[test]
    fn regions_must_be_aligned_non_empty_and_inside() {
        assert!(Region { offset: 0, len: 8 }.fits(8));
        assert!(!Region { offset: 0, len: 16 }.fits(8));
        assert!(!Region { offset: 4, len: 8 }.fits(16));
        assert!(!Region { offset: 0, len: 0 }.fits(16));
        assert!(!Region {
            offset: u32::MAX - 7,
            len: 16
        }
        .fits(u32::MAX));
    }
}
