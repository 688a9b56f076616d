//! Test support: a [`Host`] made of plain data, and a network of VMs in virtual time whose
//! hosts forward every `SEND` to the destination VM.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;

use nicmsg_vm::{
    Destination, Host, Message, Outcome, Outgoing, ProgramId, SegmentError, SegmentId, SendRefused,
    Source, Vm, VmConfig,
};

/// Compiles PDL source into module bytes, or panics with the rendered errors.
pub fn module(source: &str) -> Vec<u8> {
    match nicmsg_pdl::compile(source) {
        Ok(m) => m.encode().expect("encodes"),
        Err(errors) => panic!("{}", nicmsg_pdl::render_all("test.pdl", source, &errors)),
    }
}

/// The module of an example of examples/pdl.
pub fn example(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/pdl")
        .join(name);
    module(&std::fs::read_to_string(path).expect("read the example"))
}

/// A message a program sent, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub from: ProgramId,
    pub rank: u32,
    pub to: Destination,
    pub trigger: u16,
    pub payload: Vec<u8>,
}

/// A host of plain data: a settable clock, an outbox, the display output, segments, locks and
/// flags, and a switch to refuse sends.
#[derive(Debug, Default)]
pub struct TestHost {
    pub now: i64,
    pub outbox: Vec<Sent>,
    pub shown: Vec<(ProgramId, i64)>,
    pub segments: HashMap<SegmentId, Vec<u8>>,
    /// Lock words and flag words per program, one bit per number.
    pub locks: HashMap<ProgramId, u64>,
    pub flags: HashMap<ProgramId, u64>,
    pub refuse_sends: Option<&'static str>,
    /// Every call, in order, by name.
    pub calls: Vec<&'static str>,
}

impl TestHost {
    pub fn with_segment(mut self, id: SegmentId, bytes: usize) -> Self {
        self.segments.insert(id, vec![0; bytes]);
        self
    }

    /// The values `program` displayed.
    pub fn shown_by(&self, program: ProgramId) -> Vec<i64> {
        self.shown
            .iter()
            .filter(|(p, _)| *p == program)
            .map(|(_, v)| *v)
            .collect()
    }

    pub fn flag(&self, program: ProgramId, n: u8) -> bool {
        self.flags.get(&program).is_some_and(|w| w & (1 << n) != 0)
    }

    pub fn set_lock(&mut self, program: ProgramId, n: u8) {
        *self.locks.entry(program).or_default() |= 1 << n;
    }

    /// The word at byte `offset` of a segment.
    pub fn word(&self, segment: SegmentId, offset: usize) -> i64 {
        let bytes = &self.segments[&segment][offset..offset + 8];
        i64::from_le_bytes(bytes.try_into().unwrap())
    }

    pub fn set_word(&mut self, segment: SegmentId, offset: usize, value: i64) {
        let seg = self.segments.get_mut(&segment).expect("segment");
        seg[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
    }

    fn segment(
        &mut self,
        id: SegmentId,
        offset: u64,
        len: usize,
    ) -> Result<&mut [u8], SegmentError> {
        let seg = self
            .segments
            .get_mut(&id)
            .ok_or(SegmentError::NoSuchSegment(id))?;
        let size = seg.len() as u64;
        let end = offset.checked_add(len as u64).filter(|&e| e <= size);
        match end {
            Some(end) => Ok(&mut seg[offset as usize..end as usize]),
            None => Err(SegmentError::OutOfBounds {
                segment: id,
                offset,
                len,
                size,
            }),
        }
    }
}

impl Host for TestHost {
    fn now_ns(&mut self) -> i64 {
        self.calls.push("now_ns");
        self.now
    }

    fn send(&mut self, m: Outgoing<'_>) -> Result<(), SendRefused> {
        self.calls.push("send");
        if let Some(reason) = self.refuse_sends {
            return Err(SendRefused(reason));
        }
        self.outbox.push(Sent {
            from: m.from,
            rank: m.rank,
            to: m.to,
            trigger: m.trigger,
            payload: m.payload.to_vec(),
        });
        Ok(())
    }

    fn display(&mut self, program: ProgramId, value: i64) {
        self.calls.push("display");
        self.shown.push((program, value));
    }

    fn deliver(
        &mut self,
        _: ProgramId,
        segment: SegmentId,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), SegmentError> {
        self.calls.push("deliver");
        self.segment(segment, offset, bytes.len())?
            .copy_from_slice(bytes);
        Ok(())
    }

    fn get(
        &mut self,
        _: ProgramId,
        segment: SegmentId,
        offset: u64,
        into: &mut [u8],
    ) -> Result<(), SegmentError> {
        self.calls.push("get");
        into.copy_from_slice(self.segment(segment, offset, into.len())?);
        Ok(())
    }

    fn locked(&mut self, program: ProgramId, lock: u8) -> bool {
        self.calls.push("locked");
        self.locks
            .get(&program)
            .is_some_and(|w| w & (1 << lock) != 0)
    }

    fn clear_lock(&mut self, program: ProgramId, lock: u8) {
        self.calls.push("clear_lock");
        *self.locks.entry(program).or_default() &= !(1 << lock);
    }

    fn set_flag(&mut self, program: ProgramId, flag: u8) {
        self.calls.push("set_flag");
        *self.flags.entry(program).or_default() |= 1 << flag;
    }
}

/// One rank: its VM and its host.
pub struct Node {
    pub vm: Vm,
    pub host: TestHost,
}

/// Ranks whose hosts forward every program's message to the destination rank's VM, one hop of
/// `hop_ns` of virtual time each, in the order they were sent.
pub struct Net {
    pub nodes: Vec<Node>,
    pub hop_ns: i64,
    pub now: i64,
    /// Messages addressed to a host (`REPLY` to a message a host sent): (rank, message).
    pub to_hosts: Vec<Sent>,
    /// Outcome of every dispatch, in order: (rank, outcome).
    pub outcomes: Vec<(u32, Outcome)>,
}

impl Net {
    pub fn new(ranks: u32, hop_ns: i64) -> Net {
        Net {
            nodes: (0..ranks)
                .map(|rank| Node {
                    vm: Vm::new(VmConfig::new(rank, ranks)),
                    host: TestHost::default(),
                })
                .collect(),
            hop_ns,
            now: 1_000_000,
            to_hosts: Vec::new(),
            outcomes: Vec::new(),
        }
    }

    pub fn node(&mut self, rank: u32) -> &mut Node {
        &mut self.nodes[rank as usize]
    }

    /// Runs program `id` on `rank` (its initialisation block).
    pub fn run(&mut self, rank: u32, id: ProgramId) -> Outcome {
        self.sync_clocks();
        let node = &mut self.nodes[rank as usize];
        node.vm.run(id, &mut node.host)
    }

    /// A message from the host of `from` to program `to` on `rank`, delivered at once.
    pub fn host_send(
        &mut self,
        from: u32,
        rank: u32,
        to: ProgramId,
        trigger: u16,
        payload: &[u8],
    ) -> Outcome {
        self.sync_clocks();
        let message = Message {
            program: to,
            trigger,
            payload,
            source: Source {
                rank: from,
                program: None,
            },
        };
        let node = &mut self.nodes[rank as usize];
        let outcome = node.vm.dispatch(&message, &mut node.host);
        self.outcomes.push((rank, outcome));
        outcome
    }

    fn sync_clocks(&mut self) {
        for node in &mut self.nodes {
            node.host.now = self.now;
        }
    }

    /// Forwards messages until none is left, or `max` have been delivered; returns how many.
    pub fn settle(&mut self, max: usize) -> usize {
        let mut queue: VecDeque<(u32, Sent)> = VecDeque::new();
        let mut delivered = 0;
        loop {
            for (rank, node) in self.nodes.iter_mut().enumerate() {
                for sent in node.host.outbox.drain(..) {
                    queue.push_back((rank as u32, sent));
                }
            }
            let Some((from, sent)) = queue.pop_front() else {
                return delivered;
            };
            if delivered == max {
                return delivered;
            }
            delivered += 1;
            self.now += self.hop_ns;
            self.sync_clocks();
            let Destination::Program(program) = sent.to else {
                self.to_hosts.push(sent);
                continue;
            };
            let message = Message {
                program,
                trigger: sent.trigger,
                payload: &sent.payload,
                source: Source {
                    rank: from,
                    program: Some(sent.from),
                },
            };
            let node = &mut self.nodes[sent.rank as usize];
            let outcome = node.vm.dispatch(&message, &mut node.host);
            self.outcomes.push((sent.rank, outcome));
        }
    }
}
