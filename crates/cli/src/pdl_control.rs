//! `nicmsg pdl load|unload|run|send|list|output`: requests to the programs of a running rank's
//! engine, through the engine's control socket (`wire::program::control_socket_path`). One
//! datagram each way: a [`ProgramHeader`] and its payload; an [`Answer`] and its text. The
//! engine looks at its socket every 10 ms; a request unanswered within [`ANSWER_TIMEOUT`]
//! fails with a message saying why that may be.

use clap::Args;
use nicmsg_wire::program::{
    control_socket_dir, control_socket_path, Answer, ProgramHeader, ProgramOp, ANSWER_LEN,
    PROGRAM_HEADER_LEN,
};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a request waits for its answer: the engine answers within its next look (10 ms)
/// unless the rank is gone or busy beyond reason.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer: a listing or a page of display output.
const ANSWER_MAX: usize = 64 * 1024;

/// Which engine a request goes to.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// The job's id (`nicmsg run --job ID`, or NICMSG_JOB of its ranks).
    #[arg(long, value_name = "ID")]
    pub job: u32,
    /// The rank whose engine acts.
    #[arg(long, value_name = "R")]
    pub rank: u32,
}

/// Loads `path` (a module, or a PDL program compiled first) into the engine of `at`.
pub fn load(at: &Target, path: &Path, id: Option<u32>) -> Result<(), String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("nicmsg pdl load: {}: {e}\n", path.display()))?;
    let module = if nicmsg_pdl::Module::decode(&bytes).is_ok() {
        bytes
    } else {
        let source = String::from_utf8_lossy(&bytes);
        let module = nicmsg_pdl::compile(&source).map_err(|errors| {
            nicmsg_pdl::render_all(&path.display().to_string(), &source, &errors)
        })?;
        module
            .encode()
            .map_err(|e| format!("nicmsg pdl load: the module does not encode: {e}\n"))?
    };
    let (program, trigger) = id.map_or((0, 0), |id| (id, 1));
    let (answer, text) = request(at, ProgramOp::Load, program, trigger, &module)?;
    println!(
        "loaded {} as program {} on rank {}",
        text,
        shown_id(answer.program),
        at.rank
    );
    Ok(())
}

/// Run or unload `program`.
pub fn simple(at: &Target, op: ProgramOp, program: &str) -> Result<(), String> {
    let id = program_id(program)?;
    request(at, op, id, 0, &[])?;
    let done = if op == ProgramOp::Run {
        "started"
    } else {
        "unloaded"
    };
    println!("{done} program {} on rank {}", shown_id(id), at.rank);
    Ok(())
}

/// Sends `payload` to `program` as `trigger`.
pub fn send(at: &Target, program: &str, trigger: u16, payload: &[u8]) -> Result<(), String> {
    let id = program_id(program)?;
    request(at, ProgramOp::Message, id, trigger, payload).map(drop)
}

pub fn list(at: &Target) -> Result<(), String> {
    let (_, text) = request(at, ProgramOp::List, 0, 0, &[])?;
    print!("{text}");
    Ok(())
}

/// Prints display values until the engine has no more.
pub fn output(at: &Target, program: Option<&str>) -> Result<(), String> {
    let (id, only) = match program {
        Some(program) => (program_id(program)?, 1),
        None => (0, 0),
    };
    loop {
        let (_, text) = request(at, ProgramOp::Output, id, only, &[])?;
        if text.is_empty() {
            return Ok(());
        }
        print!("{text}");
    }
}

/// A program named by id (decimal, or hexadecimal with `0x`) or by name.
fn program_id(program: &str) -> Result<u32, String> {
    if let Some(hex) = program.strip_prefix("0x") {
        return u32::from_str_radix(hex, 16).map_err(|e| format!("program {program}: {e}\n"));
    }
    if let Ok(id) = program.parse::<u32>() {
        return Ok(id);
    }
    Ok(nicmsg_pdl::program_id(program))
}

/// An id as `nicmsg pdl disasm` and `list` print it: decimal if explicit, else hexadecimal.
fn shown_id(id: u32) -> String {
    if id & 0x8000_0000 == 0 {
        id.to_string()
    } else {
        format!("{id:#010x}")
    }
}

/// Sends one request to the engine of `at` and waits for its answer; a refusal is an error
/// carrying the engine's reason.
fn request(
    at: &Target,
    op: ProgramOp,
    program: u32,
    trigger: u16,
    payload: &[u8],
) -> Result<(Answer, String), String> {
    let dir = control_socket_dir();
    let engine = control_socket_path(&dir, at.job, at.rank);
    let client = Client::bind(&dir)?;
    let mut datagram = vec![0u8; PROGRAM_HEADER_LEN];
    ProgramHeader {
        op,
        trigger,
        program,
        source_program: None,
        request: 0,
        origin: at.rank,
    }
    .emit(&mut datagram);
    datagram.extend_from_slice(payload);
    client.socket.send_to(&datagram, &engine).map_err(|e| {
        format!(
            "nicmsg pdl: no engine of rank {} of job {} answers at {}: {e} (is the job running, \
             with NICMSG_PROGRAMS on, and NICMSG_CONTROL_DIR the same for both?)\n",
            at.rank,
            at.job,
            engine.display()
        )
    })?;
    let mut answer = vec![0u8; ANSWER_MAX];
    let len = client.socket.recv(&mut answer).map_err(|e| {
        format!(
            "nicmsg pdl: rank {} of job {} did not answer within {} s: {e}\n",
            at.rank,
            at.job,
            ANSWER_TIMEOUT.as_secs()
        )
    })?;
    let parsed = Answer::parse(&answer[..len])
        .map_err(|e| format!("nicmsg pdl: a malformed answer: {e}\n"))?;
    let text = String::from_utf8_lossy(&answer[ANSWER_LEN..len]).into_owned();
    if parsed.status != 0 {
        return Err(format!(
            "nicmsg pdl: rank {} refused: {text} (status {})\n",
            at.rank, parsed.status
        ));
    }
    Ok((parsed, text))
}

/// The client's own socket (an unbound datagram socket cannot be answered); its file is
/// removed when done.
struct Client {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Client {
    fn bind(dir: &Path) -> Result<Self, String> {
        let path = dir.join(format!("nicmsg-pdl-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let socket = UnixDatagram::bind(&path)
            .map_err(|e| format!("nicmsg pdl: cannot bind {}: {e}\n", path.display()))?;
        socket
            .set_read_timeout(Some(ANSWER_TIMEOUT))
            .map_err(|e| format!("nicmsg pdl: {e}\n"))?;
        Ok(Self { socket, path })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
