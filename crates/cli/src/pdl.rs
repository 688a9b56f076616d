//! `nicmsg pdl compile FILE [-o OUT]` and `nicmsg pdl disasm MODULE`: the host side of PANIC
//! that needs no engine (the compiler and the disassembler of crate `nicmsg-pdl`, which has no
//! runtime dependency, so the launcher stays free of the library); and `nicmsg pdl
//! load|unload|run|send|list|output --job ID --rank R`, which act on the programs of a running
//! rank's engine through its control socket ([`control`](crate::pdl_control)).
//!
//! Exit status: 0 on success, [`EXIT_FAILED`] when the program has errors (printed to stderr in
//! the manner of rustc), the module is malformed or a file cannot be read or written, and 2 for
//! a wrong command line (clap's usage errors).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use nicmsg_pdl::{compile, disasm, render_all, Module};

/// Compile errors, a malformed module, a file that cannot be read or written.
pub const EXIT_FAILED: i32 = 1;

/// The extension of compiled modules, used when `-o` is not given.
pub const MODULE_EXTENSION: &str = "pdlm";

/// `nicmsg pdl ...`.
#[derive(Debug, Args)]
pub struct PdlArgs {
    #[command(subcommand)]
    pub command: PdlCmd,
}

#[derive(Debug, Subcommand)]
pub enum PdlCmd {
    /// Compile a PDL program into a module (errors on stderr; exit status 1 if any).
    Compile {
        /// The program's source.
        file: PathBuf,
        /// Where to write the module (default: FILE with the extension .pdlm).
        #[arg(short, long, value_name = "OUT")]
        output: Option<PathBuf>,
    },
    /// Print a module readably: header, variables, entries and code.
    Disasm {
        /// A compiled module.
        module: PathBuf,
    },
    /// Load a module (or a .pdl program, compiled first) into a rank's engine.
    Load {
        #[command(flatten)]
        at: crate::pdl_control::Target,
        /// A module (`nicmsg pdl compile`) or a PDL program.
        module: PathBuf,
        /// Load it under this id (below 2^31) instead of its name's.
        #[arg(long = "as", value_name = "ID")]
        id: Option<u32>,
    },
    /// Start a loaded program: run its initialisation block.
    Run {
        #[command(flatten)]
        at: crate::pdl_control::Target,
        /// The program: its name or its id.
        program: String,
    },
    /// Unload a program.
    Unload {
        #[command(flatten)]
        at: crate::pdl_control::Target,
        program: String,
    },
    /// Send a message to a program (runs one of its triggers).
    Send {
        #[command(flatten)]
        at: crate::pdl_control::Target,
        program: String,
        trigger: u16,
        /// The message's bytes, as text (default: empty).
        #[arg(default_value = "")]
        text: String,
    },
    /// List the programs of a rank's engine.
    List {
        #[command(flatten)]
        at: crate::pdl_control::Target,
    },
    /// Print (and take) what programs of a rank's engine displayed.
    Output {
        #[command(flatten)]
        at: crate::pdl_control::Target,
        /// Only this program's values (its name or id).
        program: Option<String>,
    },
}

/// Runs `nicmsg pdl ...` and returns the exit status.
pub fn pdl(args: &PdlArgs) -> i32 {
    use crate::pdl_control as control;
    let result = match &args.command {
        PdlCmd::Compile { file, output } => compile_file(file, output.as_deref()),
        PdlCmd::Disasm { module } => disasm_file(module),
        PdlCmd::Load { at, module, id } => control::load(at, module, *id),
        PdlCmd::Run { at, program } => {
            control::simple(at, nicmsg_wire::program::ProgramOp::Run, program)
        }
        PdlCmd::Unload { at, program } => {
            control::simple(at, nicmsg_wire::program::ProgramOp::Unload, program)
        }
        PdlCmd::Send {
            at,
            program,
            trigger,
            text,
        } => control::send(at, program, *trigger, text.as_bytes()),
        PdlCmd::List { at } => control::list(at),
        PdlCmd::Output { at, program } => control::output(at, program.as_deref()),
    };
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprint!("{message}");
            EXIT_FAILED
        }
    }
}

/// Compiles `file` into `output` (or `file` with the module extension); the error is the text
/// to print.
pub fn compile_file(file: &Path, output: Option<&Path>) -> Result<(), String> {
    let bytes = std::fs::read(file)
        .map_err(|e| format!("nicmsg pdl compile: {}: {e}\n", file.display()))?;
    // Invalid UTF-8 becomes U+FFFD, which the compiler reports as a stray character where it
    // stands, with line and column, instead of refusing the whole file.
    let source = String::from_utf8_lossy(&bytes);
    let module = compile(&source)
        .map_err(|errors| render_all(&file.display().to_string(), &source, &errors))?;
    let encoded = module.encode().map_err(|e| {
        format!("nicmsg pdl compile: internal error, the module does not encode: {e}\n")
    })?;
    let out = output.map_or_else(|| file.with_extension(MODULE_EXTENSION), Path::to_path_buf);
    std::fs::write(&out, &encoded)
        .map_err(|e| format!("nicmsg pdl compile: {}: {e}\n", out.display()))?;
    let triggers: Vec<String> = module
        .triggers
        .iter()
        .map(|t| t.trigger.to_string())
        .collect();
    println!(
        "compiled {} -> {} ({} bytes: {} of code, {} of data, triggers [{}])",
        file.display(),
        out.display(),
        encoded.len(),
        module.code.len(),
        module.data_len,
        triggers.join(", ")
    );
    Ok(())
}

/// Prints the listing of the module in `path`.
pub fn disasm_file(path: &Path) -> Result<(), String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("nicmsg pdl disasm: {}: {e}\n", path.display()))?;
    let module = Module::decode(&bytes)
        .map_err(|e| format!("nicmsg pdl disasm: {}: {e}\n", path.display()))?;
    print!("{}", disasm(&module));
    Ok(())
}
