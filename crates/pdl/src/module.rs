//! The module: what the compiler emits and the VM loads (docs/pdl.md, "Module format").
//!
//! ```text
//! offset  size  field
//!      0     4  magic "PDLM"
//!      4     2  version (1)
//!      6     2  flags (0; reserved)
//!      8     4  checksum: CRC32C of the whole module, this field read as 0
//!     12     4  data_len: bytes of the data section (multiple of 8)
//!     16     4  code_len: bytes of code
//!     20     4  init_entry: code offset of the initialisation block
//!     24     2  stack_depth: most operand-stack words any activation uses
//!     26     2  trigger_count
//!     28     2  symbol_count
//!     30     1  name_len
//!     31     1  reserved (0)
//!     32        name (name_len bytes)
//!               triggers: trigger_count x { trigger u16, reserved u16 (0), entry u32 },
//!                         sorted by trigger, no trigger twice
//!               symbols:  symbol_count x { offset u32, len u32, flags u8 (bit 0: array),
//!                         name_len u8, name }
//!               code (code_len bytes)
//! ```
//!
//! All integers are little-endian. The module is relocatable: entries and jump targets are
//! offsets from the start of the code, data offsets from the start of the program's data
//! section. [`Module::decode`] checks the format on any bytes and never panics; whether the
//! *code* is safe to run is the verifier's question ([`crate::verify`]).

use thiserror::Error;

use crate::limits::{
    MAX_CODE_BYTES, MAX_DATA_BYTES, MAX_NAME_LEN, MAX_STACK_DEPTH, MAX_TRIGGERS, MAX_VARIABLES,
};

/// The first four bytes of every module.
pub const MAGIC: [u8; 4] = *b"PDLM";
/// The format version this crate writes and reads.
pub const VERSION: u16 = 1;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 32;
/// Bytes of one trigger table entry.
pub const TRIGGER_ENTRY_LEN: usize = 8;

const CHECKSUM_AT: usize = 8;
const SYMBOL_ARRAY: u8 = 1;

/// A compiled program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// The program's name, lower-case: `[a-z_][a-z0-9_]*`, at most [`MAX_NAME_LEN`] bytes.
    pub name: String,
    /// Bytes of the data section, zeroed at load.
    pub data_len: u32,
    /// Most operand-stack words any activation uses (the verifier checks it is enough).
    pub stack_depth: u16,
    /// Code offset where the initialisation block starts.
    pub init_entry: u32,
    /// Code offset of each trigger block, sorted by trigger.
    pub triggers: Vec<TriggerEntry>,
    /// Where each variable lies in the data section (for the disassembler and trap reports;
    /// the VM does not need it to run).
    pub symbols: Vec<Symbol>,
    pub code: Vec<u8>,
}

/// `MESSAGE trigger:` starts at `entry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriggerEntry {
    pub trigger: u16,
    pub entry: u32,
}

/// A variable: `len` bytes from `offset` of the data section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    pub offset: u32,
    pub len: u32,
    /// Declared with a size (`x[1]` is an array, `x` is not).
    pub array: bool,
}

/// Why bytes are not a module, or a module cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ModuleError {
    #[error("truncated: {what} needs bytes up to {need}, the module has {have}")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("not a PDL module: magic {0:02x?}, expected \"PDLM\"")]
    BadMagic([u8; 4]),
    #[error("module version {0}, this build reads version {VERSION}")]
    UnsupportedVersion(u16),
    #[error("reserved field {0} is not zero")]
    Reserved(&'static str),
    #[error(
        "checksum mismatch: stored {stored:#010x}, computed {computed:#010x} (corrupt module)"
    )]
    Checksum { stored: u32, computed: u32 },
    #[error("{extra} bytes after the end of the module")]
    TrailingBytes { extra: usize },
    #[error("data section of {0} bytes: must be a multiple of 8 and at most {MAX_DATA_BYTES}")]
    BadDataLen(u32),
    #[error("code of {0} bytes: must be 1 to {MAX_CODE_BYTES}")]
    BadCodeLen(usize),
    #[error("stack depth {0}: at most {MAX_STACK_DEPTH}")]
    StackTooDeep(u16),
    #[error("{count} {what}: at most {max}")]
    TooMany {
        what: &'static str,
        count: usize,
        max: usize,
    },
    #[error("bad {what} name {name:?}: {reason}")]
    BadName {
        what: &'static str,
        name: String,
        reason: &'static str,
    },
    #[error("{what} entry {entry:#06x} is outside the code ({code_len} bytes)")]
    EntryOutsideCode {
        what: String,
        entry: u32,
        code_len: usize,
    },
    #[error("trigger table not sorted or trigger {0} listed twice")]
    TriggersNotSorted(u16),
    #[error("symbol `{name}` ({offset}+{len}) is not a whole variable inside the {data_len}-byte data section")]
    BadSymbol {
        name: String,
        offset: u32,
        len: u32,
        data_len: u32,
    },
    #[error("symbol `{0}` listed twice")]
    DuplicateSymbol(String),
    #[error("symbol `{0}` has unknown flags")]
    SymbolFlags(String),
}

impl Module {
    /// The code offset where `trigger`'s block starts.
    pub fn entry(&self, trigger: u16) -> Option<u32> {
        self.triggers
            .binary_search_by_key(&trigger, |t| t.trigger)
            .ok()
            .map(|i| self.triggers[i].entry)
    }

    /// The id the program has when loaded without an explicit id: see [`program_id`].
    pub fn default_id(&self) -> u32 {
        program_id(&self.name)
    }

    /// The module's bytes. Refuses a module that breaks a rule of the format (the rules that
    /// [`Module::decode`] checks), so what is written can always be read back.
    pub fn encode(&self) -> Result<Vec<u8>, ModuleError> {
        self.validate()?;
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes()); // checksum, filled in below
        out.extend_from_slice(&self.data_len.to_le_bytes());
        // validate() bounds every count and length below by a limit that fits its field.
        out.extend_from_slice(&(self.code.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.init_entry.to_le_bytes());
        out.extend_from_slice(&self.stack_depth.to_le_bytes());
        out.extend_from_slice(&(self.triggers.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.symbols.len() as u16).to_le_bytes());
        out.push(self.name.len() as u8);
        out.push(0);
        assert_eq!(out.len(), HEADER_LEN);
        out.extend_from_slice(self.name.as_bytes());
        for t in &self.triggers {
            out.extend_from_slice(&t.trigger.to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
            out.extend_from_slice(&t.entry.to_le_bytes());
        }
        for s in &self.symbols {
            out.extend_from_slice(&s.offset.to_le_bytes());
            out.extend_from_slice(&s.len.to_le_bytes());
            out.push(if s.array { SYMBOL_ARRAY } else { 0 });
            out.push(s.name.len() as u8);
            out.extend_from_slice(s.name.as_bytes());
        }
        out.extend_from_slice(&self.code);
        assert_eq!(out.len(), self.encoded_len());
        let crc = checksum(&out);
        out[CHECKSUM_AT..CHECKSUM_AT + 4].copy_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    fn encoded_len(&self) -> usize {
        let symbols: usize = self.symbols.iter().map(|s| 10 + s.name.len()).sum();
        HEADER_LEN
            + self.name.len()
            + TRIGGER_ENTRY_LEN * self.triggers.len()
            + symbols
            + self.code.len()
    }

    /// Reads a module from untrusted bytes: every field is checked, and any fault is an error
    /// saying which; never panics.
    pub fn decode(bytes: &[u8]) -> Result<Module, ModuleError> {
        let mut r = Reader { bytes, pos: 0 };
        let header = r.take(HEADER_LEN, "the header")?;
        let magic = [header[0], header[1], header[2], header[3]];
        if magic != MAGIC {
            return Err(ModuleError::BadMagic(magic));
        }
        let version = le_u16(&header[4..]);
        if version != VERSION {
            return Err(ModuleError::UnsupportedVersion(version));
        }
        // Checked before any other field is trusted: a corrupt module says so, not that some
        // field is out of range.
        let stored = le_u32(&header[CHECKSUM_AT..]);
        let computed = checksum(bytes);
        if stored != computed {
            return Err(ModuleError::Checksum { stored, computed });
        }
        if le_u16(&header[6..]) != 0 {
            return Err(ModuleError::Reserved("flags"));
        }
        if header[31] != 0 {
            return Err(ModuleError::Reserved("header byte 31"));
        }
        let data_len = le_u32(&header[12..]);
        let code_len = le_u32(&header[16..]) as usize;
        let init_entry = le_u32(&header[20..]);
        let stack_depth = le_u16(&header[24..]);
        let trigger_count = usize::from(le_u16(&header[26..]));
        let symbol_count = usize::from(le_u16(&header[28..]));
        let name_len = usize::from(header[30]);
        // Bounded before the tables are read, so a hostile count costs nothing.
        check_count("triggers", trigger_count, MAX_TRIGGERS)?;
        check_count("symbols", symbol_count, MAX_VARIABLES)?;
        if code_len == 0 || code_len > MAX_CODE_BYTES as usize {
            return Err(ModuleError::BadCodeLen(code_len));
        }

        let name = r.name(name_len, "program")?;
        let mut triggers = Vec::with_capacity(trigger_count);
        for _ in 0..trigger_count {
            let entry = r.take(TRIGGER_ENTRY_LEN, "the trigger table")?;
            if le_u16(&entry[2..]) != 0 {
                return Err(ModuleError::Reserved("trigger entry bytes 2-3"));
            }
            triggers.push(TriggerEntry {
                trigger: le_u16(entry),
                entry: le_u32(&entry[4..]),
            });
        }
        let mut symbols = Vec::with_capacity(symbol_count);
        for _ in 0..symbol_count {
            let fixed = r.take(10, "the symbol table")?;
            let (offset, len, flags) = (le_u32(fixed), le_u32(&fixed[4..]), fixed[8]);
            let name = r.name(usize::from(fixed[9]), "symbol")?;
            if flags & !SYMBOL_ARRAY != 0 {
                return Err(ModuleError::SymbolFlags(name));
            }
            symbols.push(Symbol {
                name,
                offset,
                len,
                array: flags & SYMBOL_ARRAY != 0,
            });
        }
        let code = r.take(code_len, "the code")?.to_vec();
        if r.pos != bytes.len() {
            return Err(ModuleError::TrailingBytes {
                extra: bytes.len() - r.pos,
            });
        }
        let module = Module {
            name,
            data_len,
            stack_depth,
            init_entry,
            triggers,
            symbols,
            code,
        };
        module.validate()?;
        Ok(module)
    }

    /// The rules of the format that do not depend on the code's meaning.
    pub fn validate(&self) -> Result<(), ModuleError> {
        check_name("program", &self.name)?;
        if !self.data_len.is_multiple_of(8) || self.data_len > MAX_DATA_BYTES {
            return Err(ModuleError::BadDataLen(self.data_len));
        }
        if self.code.is_empty() || self.code.len() > MAX_CODE_BYTES as usize {
            return Err(ModuleError::BadCodeLen(self.code.len()));
        }
        if self.stack_depth > MAX_STACK_DEPTH {
            return Err(ModuleError::StackTooDeep(self.stack_depth));
        }
        check_count("triggers", self.triggers.len(), MAX_TRIGGERS)?;
        check_count("symbols", self.symbols.len(), MAX_VARIABLES)?;
        self.check_entry("init".to_string(), self.init_entry)?;
        for pair in self.triggers.windows(2) {
            if pair[0].trigger >= pair[1].trigger {
                return Err(ModuleError::TriggersNotSorted(pair[1].trigger));
            }
        }
        for t in &self.triggers {
            self.check_entry(format!("trigger {}", t.trigger), t.entry)?;
        }
        self.check_symbols()
    }

    fn check_entry(&self, what: String, entry: u32) -> Result<(), ModuleError> {
        if entry as usize >= self.code.len() {
            return Err(ModuleError::EntryOutsideCode {
                what,
                entry,
                code_len: self.code.len(),
            });
        }
        Ok(())
    }

    fn check_symbols(&self) -> Result<(), ModuleError> {
        let mut names = std::collections::HashSet::new();
        for s in &self.symbols {
            check_name("symbol", &s.name)?;
            let inside = crate::isa::Region {
                offset: s.offset,
                len: s.len,
            }
            .fits(self.data_len);
            if !inside || (!s.array && s.len != 8) {
                return Err(ModuleError::BadSymbol {
                    name: s.name.clone(),
                    offset: s.offset,
                    len: s.len,
                    data_len: self.data_len,
                });
            }
            if !names.insert(s.name.as_str()) {
                return Err(ModuleError::DuplicateSymbol(s.name.clone()));
            }
        }
        Ok(())
    }
}

/// The id a program has on an engine when it is loaded without an explicit one: a 32-bit
/// FNV-1a hash of its (lower-case) name with the top bit set. Ids given explicitly at load time
/// are below 2^31, so the two never meet; `SEND ... TO name` compiles to this id.
pub fn program_id(name: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in name.bytes() {
        hash ^= u32::from(byte.to_ascii_lowercase());
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash | 0x8000_0000
}

/// Whether `name` may name a program or a variable in a module: what the lexer accepts as a
/// name, lower-cased.
pub fn check_name(what: &'static str, name: &str) -> Result<(), ModuleError> {
    let bad = |reason| {
        Err(ModuleError::BadName {
            what,
            name: name.to_string(),
            reason,
        })
    };
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_NAME_LEN {
        return bad("must be 1 to 64 bytes");
    }
    if bytes[0].is_ascii_digit() {
        return bad("starts with a digit");
    }
    if !bytes
        .iter()
        .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return bad("only a-z, 0-9 and _ are allowed");
    }
    Ok(())
}

fn check_count(what: &'static str, count: usize, max: usize) -> Result<(), ModuleError> {
    if count > max {
        return Err(ModuleError::TooMany { what, count, max });
    }
    Ok(())
}

/// CRC32C of the module with its checksum field read as zero.
fn checksum(bytes: &[u8]) -> u32 {
    if bytes.len() < HEADER_LEN {
        return crc32c::crc32c(bytes);
    }
    let crc = crc32c::crc32c(&bytes[..CHECKSUM_AT]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc32c::crc32c_append(crc, &bytes[CHECKSUM_AT + 4..])
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize, what: &'static str) -> Result<&'a [u8], ModuleError> {
        let need = self.pos.saturating_add(len);
        let slice = self
            .bytes
            .get(self.pos..need)
            .ok_or(ModuleError::Truncated {
                what,
                need,
                have: self.bytes.len(),
            })?;
        self.pos = need;
        Ok(slice)
    }

    fn name(&mut self, len: usize, what: &'static str) -> Result<String, ModuleError> {
        let bytes = self.take(len, "a name")?;
        match std::str::from_utf8(bytes) {
            Ok(name) => {
                check_name(what, name)?;
                Ok(name.to_string())
            }
            Err(_) => Err(ModuleError::BadName {
                what,
                name: String::from_utf8_lossy(bytes).into_owned(),
                reason: "not UTF-8",
            }),
        }
    }
}

fn le_u16(bytes: &[u8]) -> u16 {
    u16::from_le_bytes([bytes[0], bytes[1]])
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_ids_by_name_have_the_top_bit_and_ignore_case() {
        assert_eq!(program_id("Ping"), program_id("ping"));
        assert_ne!(program_id("ping"), program_id("pong"));
        assert!(program_id("") & 0x8000_0000 != 0);
    }
}
