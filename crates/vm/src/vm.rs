//! The VM: program slots, the code and data pools, and the public operations (load, run,
//! dispatch, unload, replace, inspect).
//!
//! # Memory
//!
//! Two pools are allocated in [`Vm::new`] and never grow: the code pool (decoded instructions)
//! and the data pool (the programs' data sections, bytes). Programs lie in each pool in load
//! order, packed from the start; a program's code and data are addressed relative to their
//! start (the module format is relocatable, section 3.1 of the paper), so unloading a program
//! slides everything after it down with one copy and adjusts the starts: the free space is
//! always one range at the end, and fragmentation cannot refuse a load that would fit.

use nicmsg_pdl::isa::Instr;
use nicmsg_pdl::limits::MAX_TRIGGERS;
use nicmsg_pdl::{verify, Module, ModuleError, VerifyError};
use thiserror::Error;

use crate::host::{Host, ProgramId};
use crate::interp::{self, Context, End, Op, Stack, TrapKind};
use crate::limits::{
    DEFAULT_BUDGET, DEFAULT_CODE_POOL_INSTRUCTIONS, DEFAULT_DATA_POOL_BYTES, DEFAULT_PROGRAM_SLOTS,
    MAX_MODULE_BYTES,
};

/// The VM's sizes, fixed at [`Vm::new`]. [`VmConfig::new`] gives the defaults of
/// [`crate::limits`] for a rank of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmConfig {
    /// This engine's rank (`RANK`, `MSGSRC` in the initialisation block).
    pub rank: u32,
    /// Ranks in the job (`NRANKS`; `SEND ... AT r` traps unless `r` is below it).
    pub ranks: u32,
    /// Programs loaded at once.
    pub program_slots: usize,
    /// Decoded instructions of all loaded programs together.
    pub code_pool_instructions: usize,
    /// Bytes of the data sections of all loaded programs together.
    pub data_pool_bytes: usize,
    /// Instructions one activation may execute before it traps.
    pub budget: u32,
}

impl VmConfig {
    /// The defaults of [`crate::limits`] for rank `rank` of a job of `ranks`.
    pub fn new(rank: u32, ranks: u32) -> VmConfig {
        VmConfig {
            rank,
            ranks,
            program_slots: DEFAULT_PROGRAM_SLOTS,
            code_pool_instructions: DEFAULT_CODE_POOL_INSTRUCTIONS,
            data_pool_bytes: DEFAULT_DATA_POOL_BYTES,
            budget: DEFAULT_BUDGET,
        }
    }
}

/// A message for a program: what the engine takes from a PDL-MESSAGE frame (or from its own
/// host, or from a program's `SEND` to its own rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// The program it is addressed to.
    pub program: ProgramId,
    pub trigger: u16,
    pub payload: &'a [u8],
    pub source: Source,
}

/// Who sent a message: `MSGSRC` is its rank, and `REPLY` answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    pub rank: u32,
    /// The sending program; `None` when the host of `rank` sent it (`REPLY` then goes to that
    /// host).
    pub program: Option<ProgramId>,
}

/// A loaded program, as [`Vm::load`] returns it. The generation tells loads apart: a program
/// unloaded and loaded again, or replaced, under the same id has a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProgramHandle {
    pub id: ProgramId,
    pub generation: u64,
}

/// Where a loaded program stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramState {
    /// Loaded; its initialisation block has not run yet ([`Vm::run`]). Messages are refused.
    Loaded,
    /// Started and waiting for messages: each runs its trigger's block.
    Ready,
    /// An activation trapped: the program stays loaded, so its state and the trap can be
    /// inspected, but refuses every message until it is unloaded or replaced. Its variables
    /// may be half-updated by the activation that trapped, and a runaway program would spend
    /// its whole budget on every message, so it is not run again.
    Disabled(Trap),
}

/// A trap: where and why an activation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error(
    "program {program} trapped at code offset {pc:#06x} after {instructions} instructions: {kind}"
)]
pub struct Trap {
    pub program: ProgramId,
    /// Code offset (bytes, as in `nicmsg pdl disasm`) of the instruction that trapped.
    pub pc: u32,
    pub kind: TrapKind,
    /// Instructions the activation executed.
    pub instructions: u32,
}

/// Why a message (or a [`Vm::run`]) ran nothing. The frame is dropped and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Refusal {
    #[error("no program {0} is loaded")]
    UnknownProgram(ProgramId),
    #[error("program {program} has no trigger {trigger}")]
    UnknownTrigger { program: ProgramId, trigger: u16 },
    #[error("program {0} has not been started")]
    NotStarted(ProgramId),
    #[error("program {0} has already been started")]
    AlreadyStarted(ProgramId),
    #[error("program {0} is disabled after a trap")]
    Disabled(ProgramId),
}

/// What the engine does with the frame that triggered an activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The program took it (`AWAIT`, `STOP`, the end of a block): the host never sees it.
    Consumed,
    /// Dropped and counted (`DROP`, a trap, or nothing ran): the host never sees it.
    Dropped,
    /// Passed on to the host (`PASS`), which receives it as it would without a program.
    Passed,
}

/// How an activation ended, returned by [`Vm::run`] and [`Vm::dispatch`]. The engine acts on
/// [`Outcome::verdict`] and reports traps to the host.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `AWAIT` or the end of the block: the program waits for its next message.
    Awaiting { instructions: u32 },
    /// `STOP`: the program ended and was unloaded.
    Stopped { instructions: u32 },
    /// `DROP`.
    Dropped { instructions: u32 },
    /// `PASS`.
    Passed { instructions: u32 },
    /// The activation trapped; the program is now [`ProgramState::Disabled`].
    Trapped(Trap),
    /// Nothing ran.
    Refused(Refusal),
}

impl Outcome {
    pub fn verdict(&self) -> Verdict {
        match self {
            Outcome::Awaiting { .. } | Outcome::Stopped { .. } => Verdict::Consumed,
            Outcome::Passed { .. } => Verdict::Passed,
            Outcome::Dropped { .. } | Outcome::Trapped(_) | Outcome::Refused(_) => Verdict::Dropped,
        }
    }

    /// Instructions executed (0 when nothing ran).
    pub fn instructions(&self) -> u32 {
        match *self {
            Outcome::Awaiting { instructions }
            | Outcome::Stopped { instructions }
            | Outcome::Dropped { instructions }
            | Outcome::Passed { instructions } => instructions,
            Outcome::Trapped(trap) => trap.instructions,
            Outcome::Refused(_) => 0,
        }
    }
}

/// Why a module was not loaded. Nothing of the VM changed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LoadError {
    #[error("module of {len} bytes: at most {max}")]
    TooLarge { len: usize, max: usize },
    #[error("malformed module: {0}")]
    Module(#[from] ModuleError),
    #[error("the verifier refused the module: {0}")]
    Verify(#[from] VerifyError),
    #[error("explicit program id {0} is not below 2^31 (ids from 2^31 up are for programs loaded by name)")]
    NotExplicit(ProgramId),
    #[error("program id {0} is in use")]
    IdInUse(ProgramId),
    #[error("no program {0} to replace")]
    NotLoaded(ProgramId),
    #[error("all {slots} program slots are in use")]
    NoFreeSlot { slots: usize },
    #[error("the code pool has room for {free} more instructions; the module needs {need}")]
    CodePoolFull { need: usize, free: usize },
    #[error("the data pool has {free} bytes free; the module needs {need}")]
    DataPoolFull { need: usize, free: usize },
}

/// The room left in the pools and the slots ([`Vm::free`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Instructions the code pool can still take.
    pub instructions: usize,
    /// Bytes the data pool can still take.
    pub data_bytes: usize,
    /// Free program slots.
    pub slots: usize,
}

/// Per-program and VM-wide counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Activations run (initialisation included).
    pub activations: u64,
    /// Instructions executed by all activations.
    pub instructions: u64,
    /// Activations that ended with `DROP`.
    pub dropped: u64,
    /// Activations that ended with `PASS`.
    pub passed: u64,
    /// Activations that trapped.
    pub traps: u64,
    /// Messages refused: no such program (VM-wide only), no such trigger, not started,
    /// disabled.
    pub unknown_program: u64,
    pub unknown_trigger: u64,
    pub not_started: u64,
    pub disabled: u64,
}

/// A loaded program, as [`Vm::program`] and [`Vm::programs`] describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramInfo {
    pub handle: ProgramHandle,
    pub name: String,
    pub state: ProgramState,
    /// Decoded instructions (its share of the code pool).
    pub instructions: usize,
    /// Bytes of data (its share of the data pool).
    pub data_bytes: usize,
    /// Its trigger numbers, ascending.
    pub triggers: Vec<u16>,
    pub stats: Stats,
}

/// One program slot. The buffers are allocated once, at [`Vm::new`], and reused.
#[derive(Debug)]
struct Slot {
    handle: ProgramHandle,
    name: String,
    state: ProgramState,
    /// Range of the code pool (ops and byte offsets).
    code_start: usize,
    code_len: usize,
    /// Range of the data pool.
    data_start: usize,
    data_len: usize,
    /// Op index of the initialisation block.
    init: u32,
    /// (trigger, op index), sorted by trigger.
    triggers: Vec<(u16, u32)>,
    stats: Stats,
}

/// A module decoded, verified and translated, not yet placed in the pools.
struct Prepared {
    module: Module,
    ops: Vec<Op>,
    pcs: Vec<u32>,
    init: u32,
    triggers: Vec<(u16, u32)>,
}

/// The protocol VM of one engine: loads verified modules into bounded pools and runs their
/// activations. Sans-I/O: every effect goes through the [`Host`] given to [`Vm::run`] and
/// [`Vm::dispatch`]. See the crate documentation for the order of calls.
#[derive(Debug)]
pub struct Vm {
    config: VmConfig,
    /// `program_slots` entries; `None` is a free slot.
    slots: Vec<Option<Slot>>,
    /// Spare slot buffers, reused by loads.
    spare: Vec<Slot>,
    /// (id, slot index) of the loaded programs, sorted by id: dispatch's binary search.
    index: Vec<(ProgramId, u16)>,
    ops: Vec<Op>,
    /// Code offset in the module of each op, for trap reports.
    pcs: Vec<u32>,
    code_used: usize,
    data: Vec<u8>,
    data_used: usize,
    next_generation: u64,
    stats: Stats,
    /// The operand stack of the running activation (one at a time).
    stack: Box<Stack>,
}

impl Vm {
    /// A VM with its pools allocated and no program.
    ///
    /// # Panics
    ///
    /// If the configuration is impossible: no rank, `rank` not below `ranks`, no program slot,
    /// more than 65536 slots, or a zero budget.
    pub fn new(config: VmConfig) -> Vm {
        assert!(config.ranks >= 1, "a job has at least one rank");
        assert!(
            config.rank < config.ranks,
            "rank {} of {}",
            config.rank,
            config.ranks
        );
        assert!(
            (1..=usize::from(u16::MAX) + 1).contains(&config.program_slots),
            "1 to 65536 program slots"
        );
        assert!(config.budget >= 1, "an activation needs a budget");
        let blank = || Slot {
            handle: ProgramHandle {
                id: ProgramId(0),
                generation: 0,
            },
            name: String::with_capacity(nicmsg_pdl::limits::MAX_NAME_LEN),
            state: ProgramState::Loaded,
            code_start: 0,
            code_len: 0,
            data_start: 0,
            data_len: 0,
            init: 0,
            triggers: Vec::with_capacity(MAX_TRIGGERS),
            stats: Stats::default(),
        };
        Vm {
            slots: (0..config.program_slots).map(|_| None).collect(),
            spare: (0..config.program_slots).map(|_| blank()).collect(),
            index: Vec::with_capacity(config.program_slots),
            ops: vec![Op::Await; config.code_pool_instructions],
            pcs: vec![0; config.code_pool_instructions],
            code_used: 0,
            data: vec![0; config.data_pool_bytes],
            data_used: 0,
            next_generation: 1,
            stats: Stats::default(),
            stack: Box::new([0; nicmsg_pdl::limits::MAX_STACK_DEPTH as usize]),
            config,
        }
    }

    pub fn config(&self) -> &VmConfig {
        &self.config
    }

    /// Loads a module under its default id ([`ProgramId::of_name`] of its name). The module is
    /// decoded and verified first, whatever its origin; the program is then
    /// [`ProgramState::Loaded`], and starts with [`Vm::run`].
    pub fn load(&mut self, module: &[u8]) -> Result<ProgramHandle, LoadError> {
        let prepared = prepare(module)?;
        let id = ProgramId::of_name(&prepared.module.name);
        self.place(id, prepared)
    }

    /// Loads a module under an explicit id, below 2^31 (figure 2's partner is loaded as 415).
    pub fn load_as(&mut self, id: ProgramId, module: &[u8]) -> Result<ProgramHandle, LoadError> {
        if !id.is_explicit() {
            return Err(LoadError::NotExplicit(id));
        }
        let prepared = prepare(module)?;
        self.place(id, prepared)
    }

    /// Replaces the program `id` by a new module under the same id, at run time: the new module
    /// is decoded, verified and checked to fit (in the room the old program leaves) before the
    /// old one is touched, so on any error the old program is still there, unchanged. The new
    /// program is [`ProgramState::Loaded`], with fresh data; other programs are not disturbed.
    pub fn replace(&mut self, id: ProgramId, module: &[u8]) -> Result<ProgramHandle, LoadError> {
        let prepared = prepare(module)?;
        let Some(slot) = self.slot_of(id) else {
            return Err(LoadError::NotLoaded(id));
        };
        let old = self.slots[slot].as_ref().expect("indexed slots are loaded");
        let free_code = self.ops.len() - self.code_used + old.code_len;
        let free_data = self.data.len() - self.data_used + old.data_len;
        check_room(&prepared, free_code, free_data)?;
        self.remove(slot);
        // Cannot fail: the id and a slot were just freed, and the room was checked above.
        self.place(id, prepared)
    }

    /// Unloads a program, returning its memory to the pools. Messages for it are refused
    /// (counted as for an unknown program) from now on.
    pub fn unload(&mut self, id: ProgramId) -> Result<(), Refusal> {
        let slot = self.slot_of(id).ok_or(Refusal::UnknownProgram(id))?;
        self.remove(slot);
        Ok(())
    }

    /// Starts a loaded program: runs its initialisation block (figure 2's sends the first ping
    /// there). Only once per load.
    pub fn run<H: Host>(&mut self, id: ProgramId, host: &mut H) -> Outcome {
        let Some(slot) = self.slot_of(id) else {
            self.stats.unknown_program += 1;
            return Outcome::Refused(Refusal::UnknownProgram(id));
        };
        let s = self.slots[slot].as_mut().expect("indexed slots are loaded");
        if s.state != ProgramState::Loaded {
            return Outcome::Refused(Refusal::AlreadyStarted(id));
        }
        s.state = ProgramState::Ready;
        let entry = s.init;
        self.activate(slot, entry, None, host)
    }

    /// Runs the block of `message.trigger` of program `message.program`, within the budget.
    /// A message for no loaded program, a trigger the program does not have, a program not yet
    /// started or disabled, runs nothing: it is counted and refused (the frame is dropped).
    pub fn dispatch<H: Host>(&mut self, message: &Message<'_>, host: &mut H) -> Outcome {
        let id = message.program;
        let Some(slot) = self.slot_of(id) else {
            self.stats.unknown_program += 1;
            return Outcome::Refused(Refusal::UnknownProgram(id));
        };
        let s = self.slots[slot].as_mut().expect("indexed slots are loaded");
        let refusal = match s.state {
            ProgramState::Ready => None,
            ProgramState::Loaded => {
                s.stats.not_started += 1;
                self.stats.not_started += 1;
                Some(Refusal::NotStarted(id))
            }
            ProgramState::Disabled(_) => {
                s.stats.disabled += 1;
                self.stats.disabled += 1;
                Some(Refusal::Disabled(id))
            }
        };
        if let Some(refusal) = refusal {
            return Outcome::Refused(refusal);
        }
        let Ok(at) = s.triggers.binary_search_by_key(&message.trigger, |t| t.0) else {
            s.stats.unknown_trigger += 1;
            self.stats.unknown_trigger += 1;
            return Outcome::Refused(Refusal::UnknownTrigger {
                program: id,
                trigger: message.trigger,
            });
        };
        let entry = s.triggers[at].1;
        self.activate(slot, entry, Some(message), host)
    }

    /// A loaded program's description.
    pub fn program(&self, id: ProgramId) -> Option<ProgramInfo> {
        let slot = self.slot_of(id)?;
        self.slots[slot].as_ref().map(info)
    }

    /// Every loaded program, by id.
    pub fn programs(&self) -> impl Iterator<Item = ProgramInfo> + '_ {
        self.index
            .iter()
            .filter_map(|&(_, slot)| self.slots[usize::from(slot)].as_ref().map(info))
    }

    /// VM-wide counts (all programs, loaded or not any more, and refused messages).
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The data section of a loaded program (its variables as little-endian words), for
    /// inspection by the engine and tests.
    pub fn data(&self, id: ProgramId) -> Option<&[u8]> {
        let s = self.slots[self.slot_of(id)?].as_ref()?;
        self.data.get(s.data_start..s.data_start + s.data_len)
    }

    /// The room left for programs.
    pub fn free(&self) -> Room {
        Room {
            instructions: self.ops.len() - self.code_used,
            data_bytes: self.data.len() - self.data_used,
            slots: self.config.program_slots - self.index.len(),
        }
    }

    // ---- internals ----

    fn slot_of(&self, id: ProgramId) -> Option<usize> {
        self.index
            .binary_search_by_key(&id, |e| e.0)
            .ok()
            .map(|i| usize::from(self.index[i].1))
    }

    /// Runs one activation of the program in `slot` and applies its end.
    fn activate<H: Host>(
        &mut self,
        slot: usize,
        entry: u32,
        message: Option<&Message<'_>>,
        host: &mut H,
    ) -> Outcome {
        let s = self.slots[slot]
            .as_mut()
            .expect("activated slots are loaded");
        let id = s.handle.id;
        let code = &self.ops[s.code_start..s.code_start + s.code_len];
        let data = &mut self.data[s.data_start..s.data_start + s.data_len];
        let cx = Context {
            program: id,
            rank: self.config.rank,
            ranks: self.config.ranks,
            budget: self.config.budget,
            message,
        };
        let (end, executed) = interp::run(code, data, &mut self.stack, entry, &cx, host);
        debug_assert!(executed <= self.config.budget);
        for stats in [&mut s.stats, &mut self.stats] {
            stats.activations += 1;
            stats.instructions += u64::from(executed);
        }
        let instructions = executed;
        match end {
            End::Await => Outcome::Awaiting { instructions },
            End::Drop => {
                s.stats.dropped += 1;
                self.stats.dropped += 1;
                Outcome::Dropped { instructions }
            }
            End::Pass => {
                s.stats.passed += 1;
                self.stats.passed += 1;
                Outcome::Passed { instructions }
            }
            End::Stop => {
                self.remove(slot);
                Outcome::Stopped { instructions }
            }
            End::Trap(at, kind) => {
                let pc = self.pcs[s.code_start..s.code_start + s.code_len]
                    .get(at as usize)
                    .copied()
                    .unwrap_or(u32::MAX);
                let trap = Trap {
                    program: id,
                    pc,
                    kind,
                    instructions,
                };
                s.state = ProgramState::Disabled(trap);
                s.stats.traps += 1;
                self.stats.traps += 1;
                Outcome::Trapped(trap)
            }
        }
    }

    /// Places a prepared module in a free slot and the pools, under `id`.
    fn place(&mut self, id: ProgramId, p: Prepared) -> Result<ProgramHandle, LoadError> {
        if self.slot_of(id).is_some() {
            return Err(LoadError::IdInUse(id));
        }
        let Some(slot) = self.slots.iter().position(Option::is_none) else {
            return Err(LoadError::NoFreeSlot {
                slots: self.config.program_slots,
            });
        };
        check_room(
            &p,
            self.ops.len() - self.code_used,
            self.data.len() - self.data_used,
        )?;
        let mut s = self
            .spare
            .pop()
            .expect("a spare buffer for every free slot");
        let code_start = self.code_used;
        let code_len = p.ops.len();
        self.ops[code_start..code_start + code_len].copy_from_slice(&p.ops);
        self.pcs[code_start..code_start + code_len].copy_from_slice(&p.pcs);
        self.code_used += code_len;
        let data_start = self.data_used;
        let data_len = p.module.data_len as usize;
        // Sections are zeroed at load: the pool's free end is kept zeroed by `remove`.
        debug_assert!(self.data[data_start..data_start + data_len]
            .iter()
            .all(|&b| b == 0));
        self.data_used += data_len;

        let handle = ProgramHandle {
            id,
            generation: self.next_generation,
        };
        self.next_generation += 1;
        s.handle = handle;
        s.name.clear();
        s.name.push_str(&p.module.name);
        s.state = ProgramState::Loaded;
        s.code_start = code_start;
        s.code_len = code_len;
        s.data_start = data_start;
        s.data_len = data_len;
        s.init = p.init;
        s.triggers.clear();
        s.triggers.extend_from_slice(&p.triggers);
        s.stats = Stats::default();
        self.slots[slot] = Some(s);
        let at = self.index.partition_point(|e| e.0 < id);
        // `slot` < program_slots <= 65536, checked in `new`.
        self.index.insert(at, (id, slot as u16));
        Ok(handle)
    }

    /// Frees a slot and compacts both pools: everything placed after the program slides down.
    fn remove(&mut self, slot: usize) {
        let s = self.slots[slot].take().expect("removing a loaded slot");
        self.index.retain(|e| usize::from(e.1) != slot);
        let (code_end, data_end) = (s.code_start + s.code_len, s.data_start + s.data_len);
        self.ops.copy_within(code_end..self.code_used, s.code_start);
        self.pcs.copy_within(code_end..self.code_used, s.code_start);
        self.data
            .copy_within(data_end..self.data_used, s.data_start);
        self.code_used -= s.code_len;
        self.data_used -= s.data_len;
        // The free end of the data pool stays zeroed, so a load finds its section zeroed.
        self.data[self.data_used..self.data_used + s.data_len].fill(0);
        for other in self.slots.iter_mut().flatten() {
            if other.code_start >= code_end {
                other.code_start -= s.code_len;
            }
            if other.data_start >= data_end {
                other.data_start -= s.data_len;
            }
        }
        self.spare.push(s);
    }
}

fn info(s: &Slot) -> ProgramInfo {
    ProgramInfo {
        handle: s.handle,
        name: s.name.clone(),
        state: s.state,
        instructions: s.code_len,
        data_bytes: s.data_len,
        triggers: s.triggers.iter().map(|t| t.0).collect(),
        stats: s.stats,
    }
}

fn check_room(p: &Prepared, free_code: usize, free_data: usize) -> Result<(), LoadError> {
    if p.ops.len() > free_code {
        return Err(LoadError::CodePoolFull {
            need: p.ops.len(),
            free: free_code,
        });
    }
    let need = p.module.data_len as usize;
    if need > free_data {
        return Err(LoadError::DataPoolFull {
            need,
            free: free_data,
        });
    }
    Ok(())
}

/// Decodes, verifies and translates a module. Nothing here trusts the bytes: the length is
/// bounded first, decoding checks the format, the verifier the code.
fn prepare(bytes: &[u8]) -> Result<Prepared, LoadError> {
    if bytes.len() > MAX_MODULE_BYTES {
        return Err(LoadError::TooLarge {
            len: bytes.len(),
            max: MAX_MODULE_BYTES,
        });
    }
    let module = Module::decode(bytes)?;
    verify(&module)?;
    let decoded = Instr::decode_all(&module.code).map_err(VerifyError::from)?;
    let pcs: Vec<u32> = decoded.iter().map(|&(pc, _)| pc).collect();
    let index_of = |target: u32| {
        pcs.binary_search(&target)
            .ok()
            .and_then(|i| u32::try_from(i).ok())
    };
    // The verifier accepted every target and entry, so each is an instruction boundary; a
    // failure here would be a verifier bug, refused as a bad target rather than trusted.
    let bad_target = |pc: u32, instr: Instr, target: u32| {
        LoadError::Verify(VerifyError::BadTarget {
            pc,
            opcode: instr.opcode().mnemonic(),
            target,
        })
    };
    let mut ops = Vec::with_capacity(decoded.len());
    for &(pc, instr) in &decoded {
        let op = Op::from_instr(instr, index_of).ok_or_else(|| {
            let target = match instr {
                Instr::Jmp(t) | Instr::Jz(t) | Instr::Jnz(t) | Instr::Loop(t) => t,
                _ => 0,
            };
            bad_target(pc, instr, target)
        })?;
        ops.push(op);
    }
    let entry = |what: &str, at: u32| {
        index_of(at).ok_or_else(|| {
            LoadError::Verify(VerifyError::EntryNotAtBoundary {
                what: what.to_string(),
                entry: at,
            })
        })
    };
    let init = entry("init", module.init_entry)?;
    let triggers = module
        .triggers
        .iter()
        .map(|t| Ok((t.trigger, entry("trigger", t.entry)?)))
        .collect::<Result<Vec<_>, LoadError>>()?;
    Ok(Prepared {
        module,
        ops,
        pcs,
        init,
        triggers,
    })
}
