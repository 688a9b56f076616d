//! Limits on everything a program and a module may contain, each with the reason for its value.
//!
//! The compiler refuses a program past any of them with an error at the culprit; the module
//! decoder and the verifier refuse a module past them, so the VM can size its pools from these
//! numbers and a hostile module cannot make it allocate more.

/// Largest source file the compiler reads (1 MiB). Programs for the engine are small (the
/// paper's are 30 lines); the bound keeps the compiler's memory and time bounded on any input,
/// and every source position fits the `u32` of a [`crate::Span`].
pub const MAX_SOURCE_BYTES: usize = 1 << 20;

/// Longest name (program, variable, constant), in bytes. Names travel in modules (the program
/// name, the symbol table) with a one-byte length; 64 is ample for anything readable.
pub const MAX_NAME_LEN: usize = 64;

/// Most variables one program declares. Bounds the module's symbol table.
pub const MAX_VARIABLES: usize = 256;

/// Most constants one program declares (they take no room in the module, only in the compiler).
pub const MAX_CONSTANTS: usize = 256;

/// Largest data section of one program, in bytes (8 KiB words). The paper's NIC had 256 KiB
/// for everything; our engine gives each program static memory from a bounded pool, and figure
/// 2's ping, the largest program of the paper, needs 9,800 bytes.
pub const MAX_DATA_BYTES: u32 = 64 * 1024;

/// Most trigger numbers one program declares. The VM dispatches a frame by (program, trigger);
/// 64 entries keep the trigger table of a program small enough to search linearly.
pub const MAX_TRIGGERS: usize = 64;

/// Largest trigger number: triggers travel as 16-bit fields in the module (and in PDL frames).
pub const MAX_TRIGGER: i64 = u16::MAX as i64;

/// Largest program id (`TO` operand): ids are 32-bit on the engine (see [`crate::program_id`]).
pub const MAX_PROGRAM_ID: i64 = u32::MAX as i64;

/// Largest shared-segment id (`DELIVER ... INTO`, `GET ... FROM`): the host interface names
/// segments with 16-bit ids.
pub const MAX_SEGMENT: i64 = u16::MAX as i64;

/// Largest lock or flag number: each program has 64 locks and 64 flags, one bit each in a word
/// the host polls (section 3.3 of the paper: no interrupts).
pub const MAX_LOCK: i64 = 63;

/// Most bytes one `SEND`, `REPLY`, `RECEIVE`, `DELIVER` or `GET` moves: figure 3 of the paper
/// measures up to 4 KiB, and the VM must be able to stage a transfer in a bounded buffer.
pub const MAX_TRANSFER_BYTES: i64 = 4096;

/// Deepest nesting of statements and expressions the parser follows (parentheses, unary
/// operators, `IF`/`WHILE`/`BEGIN` inside one another). Bounds the compiler's recursion, so
/// hostile input cannot overflow its stack; real programs nest a handful of levels.
pub const MAX_NESTING: usize = 64;

/// Deepest expression tree (`a + b + c + ...` is as deep as it is long): the code generator
/// and the tree's destructor recurse on it, so it is bounded like [`MAX_NESTING`].
pub const MAX_EXPR_DEPTH: usize = 64;

/// Most operand-stack words one activation uses. The VM preallocates the stack; 32 words are
/// 256 bytes, half of eBPF's 512-byte stack frame, so a translation to eBPF keeps the whole
/// operand stack in its frame with room to spare.
pub const MAX_STACK_DEPTH: u16 = 32;

/// Largest code section of one module, in bytes. Jump targets are 32-bit, but the engine's
/// program memory is a bounded pool: 64 KiB is thousands of statements.
pub const MAX_CODE_BYTES: u32 = 64 * 1024;

/// Most errors reported for one file: past this the rest is noise from the first ones, and
/// the bound keeps the output of hostile input bounded.
pub const MAX_ERRORS: usize = 50;
