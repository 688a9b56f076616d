//! Micro-benchmark of the VM: the interpreter's cost per simple instruction, the cost of
//! dispatching a message (demultiplexing by program and trigger, starting and ending an
//! activation), and the paper's figure 5 (time spent demultiplexing, interpreting and
//! delivering, against the number of statements executed).
//!
//! ```sh
//! cargo run --release -p nicmsg-vm --example vm_bench
//! ```
//!
//! Each figure is the median of `ROUNDS` rounds (the fastest round in brackets, which is what
//! a quiet machine gives); a round times a batch of calls with `Instant` (the clock is read
//! here, never inside the VM) and divides. The host does the least
//! an engine would: a clock that returns a counter, sends and display output dropped, one
//! shared segment in a `Vec`.

use std::hint::black_box;
use std::time::Instant;

use nicmsg_vm::{
    Host, Message, Outcome, Outgoing, ProgramId, SegmentError, SendRefused, Source, Vm, VmConfig,
};

const ROUNDS: usize = 101;

struct BenchHost {
    clock: i64,
    segment: Vec<u8>,
}

impl Host for BenchHost {
    fn now_ns(&mut self) -> i64 {
        self.clock += 1;
        self.clock
    }
    fn send(&mut self, m: Outgoing<'_>) -> Result<(), SendRefused> {
        black_box(m.payload);
        Ok(())
    }
    fn display(&mut self, _: ProgramId, value: i64) {
        black_box(value);
    }
    fn deliver(
        &mut self,
        _: ProgramId,
        s: u16,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), SegmentError> {
        let size = self.segment.len() as u64;
        let end = offset + bytes.len() as u64;
        if s != 2 || end > size {
            return Err(SegmentError::NoSuchSegment(s));
        }
        self.segment[offset as usize..end as usize].copy_from_slice(bytes);
        Ok(())
    }
    fn get(&mut self, _: ProgramId, s: u16, _: u64, _: &mut [u8]) -> Result<(), SegmentError> {
        Err(SegmentError::NoSuchSegment(s))
    }
    fn locked(&mut self, _: ProgramId, _: u8) -> bool {
        false
    }
    fn clear_lock(&mut self, _: ProgramId, _: u8) {}
    fn set_flag(&mut self, _: ProgramId, _: u8) {}
}

fn compile(source: &str) -> Vec<u8> {
    match nicmsg_pdl::compile(source) {
        Ok(m) => m.encode().expect("encodes"),
        Err(e) => panic!("{}", nicmsg_pdl::render_all("bench.pdl", source, &e)),
    }
}

/// The median and the fastest of `ROUNDS` rounds of the time of one call of `f`, in ns,
/// timing `batch` calls per round.
fn time_per_call(batch: usize, mut f: impl FnMut()) -> Timing {
    for _ in 0..batch {
        f();
    }
    let mut samples: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch {
                f();
            }
            start.elapsed().as_nanos() as f64 / batch as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    Timing {
        median: samples[samples.len() / 2],
        best: samples[0],
    }
}

#[derive(Clone, Copy)]
struct Timing {
    median: f64,
    best: f64,
}

impl std::fmt::Display for Timing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.1} ns [{:.1}]", self.median, self.best)
    }
}

fn message(program: ProgramId, trigger: u16, payload: &[u8]) -> Message<'_> {
    Message {
        program,
        trigger,
        payload,
        source: Source {
            rank: 1,
            program: Some(ProgramId(9)),
        },
    }
}

/// Dispatches and checks the program ran to its end; returns the instructions executed.
fn dispatch(vm: &mut Vm, host: &mut BenchHost, m: &Message<'_>) -> u32 {
    let outcome = vm.dispatch(black_box(m), host);
    assert!(matches!(outcome, Outcome::Awaiting { .. }), "{outcome:?}");
    outcome.instructions()
}

fn main() {
    let mut vm = Vm::new(VmConfig {
        budget: 100_000_000,
        ..VmConfig::new(0, 2)
    });
    let mut host = BenchHost {
        clock: 0,
        segment: vec![0; 4096],
    };
    // Other programs loaded beside, so that finding the program is a real search.
    for i in 0..16 {
        let filler = compile(&format!(
            "PROGRAM filler{i}: TRIGGERS 1; MESSAGE 1: BEGIN END; END."
        ));
        let h = vm.load(&filler).unwrap();
        let _ = vm.run(h.id, &mut host);
    }

    // Trigger 1: a counting loop of n iterations, n from the message. Each iteration is nine
    // simple instructions: LOAD i, LOAD n, LT, JZ, LOAD i, PUSH 1, ADD, STORE i, LOOP.
    // Trigger 2: nothing (AWAIT). Trigger 3: figure 4's DELIVER of 64 bytes.
    // Triggers 10 + k: k statements `x = x + 1` (LOAD, PUSH, ADD, STORE).
    let mut source = String::from("PROGRAM bench: VAR i, n, x, msg[50]; TRIGGERS 1, 2, 3");
    let ks = [0usize, 1, 2, 4, 8, 16, 32, 64, 128];
    for k in ks {
        source.push_str(&format!(", {}", 10 + k));
    }
    source.push_str(
        ";\nMESSAGE 1: BEGIN RECEIVE n LEN 8; i = 0; WHILE i < n DO i = i + 1 END;\n\
         MESSAGE 2: BEGIN AWAIT END;\n\
         MESSAGE 3: BEGIN DELIVER msg[0] OFFSET 0 INTO 2 LEN 64; AWAIT END;\n",
    );
    for k in ks {
        source.push_str(&format!(
            "MESSAGE {}: BEGIN {} AWAIT END;\n",
            10 + k,
            "x = x + 1; ".repeat(k)
        ));
    }
    source.push_str("END.");
    let bench = vm.load(&compile(&source)).unwrap();
    let _ = vm.run(bench.id, &mut host);
    let id = bench.id;

    println!("nicmsg-vm micro-benchmark (median of {ROUNDS} rounds)");
    println!();

    // Interpretation: the loop's cost per instruction, net of the dispatch around it.
    let loop_of = |n: i64| n.to_le_bytes();
    let (short, long) = (loop_of(10), loop_of(100_000));
    let instrs_short = dispatch(&mut vm, &mut host, &message(id, 1, &short));
    let instrs_long = dispatch(&mut vm, &mut host, &message(id, 1, &long));
    let t_short = time_per_call(2_000, || {
        dispatch(&mut vm, &mut host, &message(id, 1, &short));
    });
    let t_long = time_per_call(2, || {
        dispatch(&mut vm, &mut host, &message(id, 1, &long));
    });
    let instrs = f64::from(instrs_long - instrs_short);
    println!("interpreter, simple instructions (a counting loop; goal: at most 10 ns each):");
    println!(
        "  {instrs_long} instructions in {t_long}: {:.2} ns per instruction [{:.2}]",
        (t_long.median - t_short.median) / instrs,
        (t_long.best - t_short.best) / instrs,
    );

    // Dispatch: an empty trigger block (one AWAIT) among 17 loaded programs.
    let t_empty = time_per_call(20_000, || {
        dispatch(&mut vm, &mut host, &message(id, 2, b""));
    });
    let t_refused = time_per_call(20_000, || {
        let outcome = vm.dispatch(black_box(&message(ProgramId(7), 2, b"")), &mut host);
        assert!(matches!(black_box(outcome), Outcome::Refused(_)));
    });
    println!("dispatch:");
    println!("  message to an empty block (find program and trigger, run AWAIT): {t_empty}");
    println!("  message to no loaded program (counted and refused): {t_refused}");

    // Figure 5: figure 4's trigger block, DELIVER of 64 bytes then AWAIT.
    let t_deliver = time_per_call(20_000, || {
        dispatch(&mut vm, &mut host, &message(id, 3, b""));
    });
    println!("figure 5 (figure 4's block: DELIVER 64 bytes, AWAIT; 6 instructions):");
    println!(
        "  total {t_deliver} = dispatch and AWAIT {t_empty} + DELIVER {:.1} ns [{:.1}]",
        t_deliver.median - t_empty.median,
        t_deliver.best - t_empty.best
    );

    println!("figure 5, time against statements executed (`x = x + 1`, 4 instructions each):");
    println!("  statements  instructions         ns total   ns per statement [fastest]");
    for k in ks {
        let m = message(id, 10 + k as u16, b"");
        let instrs = dispatch(&mut vm, &mut host, &m);
        let t = time_per_call(10_000, || {
            dispatch(&mut vm, &mut host, &m);
        });
        let per = if k == 0 {
            String::from("-")
        } else {
            format!(
                "{:.2} [{:.2}]",
                (t.median - t_empty.median) / k as f64,
                (t.best - t_empty.best) / k as f64
            )
        };
        println!("  {k:>10}  {instrs:>12}  {:>15}   {per}", t.to_string());
    }
}
