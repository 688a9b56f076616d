//! `panic-cost`: PANIC figure 5, where the engine's time for one program message goes, against
//! the statements the activation executes.
//!
//! Measured in-process on rank 0 (rank 1 idles): the engine's own PANIC code
//! (`nicmsg_engine::programs::Programs`, which the driver runs at the end of its turn in both
//! engine modes) is given completed receives as the protocol would, with no network. Around
//! each message's handling this measures the whole (`time_us`), and the engine's phase timing
//! (`Programs::set_phase_timing`) splits it: demultiplexing (the copy out of the inbox, the
//! header parsed and checked), interpreting (the VM's dispatch and activation) and delivering
//! (the `DELIVER` copy into the host's segment). The programs are figure 4's delivertest with
//! `n` statements `x = x + 1` before its `DELIVER` (of `size` bytes) and `AWAIT`.

use std::sync::Arc;

use nicmsg::Comm;
use nicmsg_engine::clock::monotonic_ns;
use nicmsg_engine::programs::{
    PhaseTimes, Post, Programs, ProgramsConfig, ProgramsShared, ENGINE_REGIONS,
};
use nicmsg_engine::Registry;
use nicmsg_proto::{Context, OpId, OpKind, Status};
use nicmsg_vm::{ProgramId, VmConfig};
use nicmsg_wire::program::{ProgramHeader, ProgramOp, PROGRAM_HEADER_LEN};

use super::module;
use crate::model::{Phases, Point};
use crate::patterns::{point, Plan};
use crate::stats::summarize;
use crate::BenchError;

/// Statements `x = x + 1` before the `DELIVER`: PANIC figure 5's x axis is these plus the
/// `DELIVER` and the `AWAIT`.
pub const STATEMENTS: [u64; 8] = [0, 1, 2, 4, 8, 16, 32, 64];
/// The statement counts swept: all of [`STATEMENTS`], or three of them for short runs
/// (`--quick`, fewer than 1,000 repetitions).
pub fn statements(reps: u64) -> &'static [u64] {
    if reps < 1000 {
        &[0, 4, 16]
    } else {
        &STATEMENTS
    }
}

/// The segment figure 4 delivers into.
const SEGMENT: u16 = 2;
const TRIGGER: u16 = 10;

/// A program of `n` statements, a `DELIVER` of `size` bytes and `AWAIT` on trigger 10.
pub fn source(n: u64, size: u64) -> String {
    let mut text = format!(
        "PROGRAM cost{n}:\nVAR x, msg[512];\nTRIGGERS {TRIGGER};\nBEGIN AWAIT END;\n\
         MESSAGE {TRIGGER}: BEGIN\n"
    );
    for _ in 0..n {
        text.push_str("  x = x + 1;\n");
    }
    text.push_str(&format!(
        "  DELIVER msg[0] OFFSET 0 INTO {SEGMENT} LEN {size};\n  AWAIT\nEND;\nEND.\n"
    ));
    text
}

pub fn run(
    comm: &Comm,
    sizes: &[u64],
    plan: &Plan,
    report: &mut dyn FnMut(Point),
) -> Result<(), BenchError> {
    if comm.rank() != 0 {
        return Ok(());
    }
    let statements = statements(plan.reps);
    let clock_read_us = clock_read_us();
    for &size in sizes {
        let mut engine = Engine::new()?;
        let mut segment = vec![0u8; 4096.max(size as usize)];
        // SAFETY: `segment` outlives `engine` (dropped first, at the end of this iteration),
        // and nothing else touches it while the engine may write it.
        unsafe {
            engine
                .shared
                .share(SEGMENT, segment.as_mut_ptr(), segment.len())
        }
        .map_err(|refused| BenchError::Usage(refused.to_string()))?;
        for &n in statements {
            let name = format!("cost{n}");
            let id = ProgramId::of_name(&name);
            engine.load(&module(&format!("{name}.pdl"), &source(n, size))?, id)?;
            let mut totals = Vec::new();
            let mut phases = Vec::new();
            for rep in 0..plan.warmup + plan.reps {
                let (total, times) = engine.message(id, TRIGGER, &[])?;
                if rep >= plan.warmup {
                    totals.push(total);
                    phases.push(times);
                }
            }
            let us = |f: fn(&PhaseTimes) -> u64| -> Vec<f64> {
                phases.iter().map(|p| f(p) as f64 / 1e3).collect()
            };
            let mut point = point(size, &totals);
            point.statements = Some(n + 2);
            point.phases = Some(Phases {
                demux_us: summarize(&us(|p| p.demux_ns)),
                interpret_us: summarize(&us(|p| p.interpret_ns)),
                deliver_us: summarize(&us(|p| p.deliver_ns)),
                instructions: phases.last().map_or(0, |p| p.instructions),
                clock_read_us,
            });
            report(point);
        }
        drop(engine);
        drop(segment);
    }
    Ok(())
}

/// Median of one monotonic clock read, in microseconds.
fn clock_read_us() -> f64 {
    let samples: Vec<f64> = (0..10_000)
        .map(|_| {
            let a = monotonic_ns();
            let b = monotonic_ns();
            (b - a) as f64 / 1e3
        })
        .collect();
    summarize(&samples).median
}

/// The engine's PANIC part alone, fed completed receives as the driver would feed it.
struct Engine {
    programs: Programs,
    registry: Arc<Registry>,
    shared: Arc<ProgramsShared>,
    next_op: u32,
    /// Receives posted, in posting order: the protocol matches in that order.
    receives: Vec<(OpId, Context)>,
    request: u32,
}

impl Engine {
    fn new() -> Result<Self, BenchError> {
        let registry = Arc::new(Registry::with_engine_regions(0, ENGINE_REGIONS));
        let shared = Arc::new(ProgramsShared::default());
        let mut programs = Programs::new(
            ProgramsConfig {
                enabled: true,
                remote_requests: true,
                traps_on_stderr: false,
                vm: VmConfig::new(0, 1),
            },
            shared.clone(),
            registry.clone(),
        );
        programs.set_phase_timing(true);
        let mut engine = Self {
            programs,
            registry,
            shared,
            next_op: 0,
            receives: Vec::new(),
            request: 0,
        };
        engine.settle();
        Ok(engine)
    }

    /// Makes the posts the programs ask for; sends complete at once.
    fn settle(&mut self) {
        while let Some(post) = self.programs.poll_post() {
            let kind = match post {
                Post::Recv { .. } => OpKind::Recv,
                Post::Send { .. } => OpKind::Send,
            };
            let op = OpId {
                kind,
                index: self.next_op,
                generation: 0,
            };
            self.next_op += 1;
            self.programs.posted(op);
            match post {
                Post::Recv { context, .. } => self.receives.push((op, context)),
                Post::Send { rank, tag, len, .. } => {
                    let status = Status {
                        peer: rank,
                        tag: u64::from(tag),
                        len,
                        immediate: None,
                    };
                    self.programs.complete(op, Ok(status));
                }
            }
        }
    }

    /// Completes the oldest receive of `context` with `header` and `payload`, as the protocol
    /// would on their arrival.
    fn arrive(
        &mut self,
        context: Context,
        header: &ProgramHeader,
        payload: &[u8],
    ) -> Result<(), BenchError> {
        let at = self
            .receives
            .iter()
            .position(|(_, c)| *c == context)
            .ok_or_else(|| BenchError::Usage("no inbox posted".into()))?;
        let (op, _) = self.receives.remove(at);
        let region = self
            .programs
            .region_of(op)
            .ok_or_else(|| BenchError::Usage("an inbox without a region".into()))?;
        let len = PROGRAM_HEADER_LEN + payload.len();
        let address = self
            .registry
            .address(region, 0, len as u64)
            .ok_or_else(|| BenchError::Usage("an inbox too small".into()))?;
        // SAFETY: the receive is posted and nothing else writes its buffer (no protocol core
        // here); the range was checked by the registry.
        let memory = unsafe { std::slice::from_raw_parts_mut(address, len) };
        header.emit(memory);
        memory[PROGRAM_HEADER_LEN..].copy_from_slice(payload);
        let status = Status {
            peer: 0,
            tag: u64::from(header.trigger),
            len: len as u64,
            immediate: None,
        };
        self.programs.complete(op, Ok(status));
        Ok(())
    }

    /// Loads and starts a module (whose name gives `id`), through requests as a host's would
    /// arrive.
    fn load(&mut self, module: &[u8], id: ProgramId) -> Result<(), BenchError> {
        for (op, payload) in [(ProgramOp::Load, module), (ProgramOp::Run, &[][..])] {
            let program = if op == ProgramOp::Run { id.0 } else { 0 };
            self.request += 1;
            let header = ProgramHeader {
                op,
                trigger: 0,
                program,
                source_program: None,
                request: self.request,
                origin: 0,
            };
            self.arrive(Context::PROGRAM_REQUESTS, &header, payload)?;
            self.programs.handle_received(monotonic_ns());
            self.settle();
        }
        let ready = self
            .programs
            .vm()
            .and_then(|vm| vm.program(id))
            .map(|info| info.state);
        match ready {
            Some(nicmsg_vm::ProgramState::Ready) => Ok(()),
            other => Err(BenchError::Usage(format!("{id}: not started ({other:?})"))),
        }
    }

    /// One message to `program`: its handling's whole time in microseconds and phases.
    fn message(
        &mut self,
        program: ProgramId,
        trigger: u16,
        payload: &[u8],
    ) -> Result<(f64, PhaseTimes), BenchError> {
        let header = ProgramHeader {
            op: ProgramOp::Message,
            trigger,
            program: program.0,
            source_program: None,
            request: 0,
            origin: 0,
        };
        self.arrive(Context::PROGRAM_MESSAGES, &header, payload)?;
        let before = self.programs.stats().messages;
        let started = monotonic_ns();
        self.programs.handle_received(started);
        let total = (monotonic_ns() - started) as f64 / 1e3;
        let phases = self.programs.phases();
        self.settle();
        let stats = self.programs.stats();
        if stats.messages != before + 1 || stats.refused + stats.traps != 0 {
            return Err(BenchError::Usage(format!(
                "the engine did not run the program: {stats:?}"
            )));
        }
        Ok((total, phases))
    }
}
