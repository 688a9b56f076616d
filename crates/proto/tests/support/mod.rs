//! Two or more endpoints over an in-memory network (quinn's `Pair` idea): virtual time jumps to
//! the next wake-up; frames may be dropped on purpose by a seeded pattern.

use nicmsg_proto::*;
use std::collections::VecDeque;

/// The credits per peer a message of `len` bytes spends from: its class's, as its length says
/// (the protocol's own `CreditClass::of` is private to it).
#[allow(dead_code)] // not every test file sends by class
pub fn class_credits(config: &Config, len: usize) -> usize {
    let len = len as u64;
    (if len <= SMALL_MESSAGE_MAX {
        config.small_credits_per_peer
    } else if len <= MEDIUM_MESSAGE_MAX {
        config.medium_credits_per_peer
    } else {
        config.eager_credits_per_peer
    }) as usize
}

pub struct Memory(pub Vec<Vec<u8>>);

impl HostMemory for Memory {
    fn region(&self, id: RegionId) -> Option<&[u8]> {
        self.0.get(id.0 as usize).map(|r| r.as_slice())
    }
    fn region_mut(&mut self, id: RegionId) -> Option<&mut [u8]> {
        self.0.get_mut(id.0 as usize).map(|r| r.as_mut_slice())
    }
}

/// Decides to drop a frame (true) by its bytes.
pub type FrameFilter = Box<dyn FnMut(&[u8]) -> bool>;

pub struct Net {
    pub endpoints: Vec<Endpoint>,
    pub memories: Vec<Memory>,
    pub completions: Vec<Vec<Completion>>,
    pub now: Nanos,
    in_flight: VecDeque<(Nanos, u32, Vec<u8>)>,
    pub delay_ns: Nanos,
    rng: u64,
    pub loss: f64,
    pub frames: u64,
    /// Drops a frame when it returns true (targeted loss of one frame kind).
    pub filter: Option<FrameFilter>,
}

impl Net {
    pub fn new(size: u32, config: Config) -> Self {
        let endpoints = (0..size)
            .map(|r| Endpoint::new(config.clone(), 7, r, size).unwrap())
            .collect();
        Self {
            endpoints,
            memories: (0..size).map(|_| Memory(Vec::new())).collect(),
            completions: vec![Vec::new(); size as usize],
            now: 0,
            in_flight: VecDeque::new(),
            delay_ns: 10_000,
            rng: 0x9E37_79B9_7F4A_7C15,
            loss: 0.0,
            frames: 0,
            filter: None,
        }
    }

    #[allow(dead_code)]
    pub fn seed(&mut self, seed: u64) {
        self.rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    }

    fn random(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn region(&mut self, rank: u32, bytes: Vec<u8>) -> RegionId {
        let memory = &mut self.memories[rank as usize];
        memory.0.push(bytes);
        RegionId(memory.0.len() as u32 - 1)
    }

    /// Transmits everything pending, then delivers frames/timeouts until nothing is left or
    /// `until` passes.
    pub fn run(&mut self, until: Nanos) {
        for _ in 0..10_000_000 {
            self.flush();
            let next_frame = self.in_flight.front().map(|f| f.0);
            let next_timer = self.endpoints.iter().filter_map(|e| e.poll_timeout()).min();
            let next = match (next_frame, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => return,
                },
            };
            if next > until {
                self.now = until;
                return;
            }
            self.now = self.now.max(next);
            if next_frame == Some(next) {
                let (_, dst, bytes) = self.in_flight.pop_front().unwrap();
                let (endpoint, memory) = (
                    &mut self.endpoints[dst as usize],
                    &mut self.memories[dst as usize],
                );
                endpoint.handle_frame(self.now, &bytes, memory);
            } else {
                for (endpoint, memory) in self.endpoints.iter_mut().zip(&mut self.memories) {
                    if endpoint.poll_timeout().is_some_and(|t| t <= self.now) {
                        endpoint.handle_timeout(self.now, memory);
                    }
                }
            }
        }
        panic!("event limit");
    }

    /// Runs in steps of 500 ns until `done` holds or `limit_ns` passed; the time it took.
    #[allow(dead_code)]
    pub fn run_until(&mut self, limit_ns: Nanos, done: impl Fn(&Net) -> bool) -> Nanos {
        let started = self.now;
        while !done(self) && self.now < started + limit_ns {
            self.run(self.now + 500);
        }
        self.now - started
    }

    /// Posts a user-context send of `data` from `from` to `to`.
    pub fn send(&mut self, from: u32, to: u32, tag: Tag, data: Vec<u8>) -> OpId {
        self.send_in(from, to, Context::USER, tag, data)
    }

    /// Posts a send of `data` in `context`.
    pub fn send_in(
        &mut self,
        from: u32,
        to: u32,
        context: Context,
        tag: Tag,
        data: Vec<u8>,
    ) -> OpId {
        let len = data.len() as u64;
        let region = self.region(from, data);
        let (e, m) = (
            &mut self.endpoints[from as usize],
            &mut self.memories[from as usize],
        );
        e.post_send(
            self.now,
            to,
            context,
            tag,
            &SgList::contiguous(region, 0, len),
            m,
        )
        .unwrap()
    }

    /// Posts a user-context receive of up to `len` bytes; returns it and its buffer's region.
    pub fn recv(&mut self, at: u32, source: Source, tag: TagMatch, len: usize) -> (OpId, RegionId) {
        self.recv_in(at, source, Context::USER, tag, len)
    }

    /// Posts a receive in `context`.
    pub fn recv_in(
        &mut self,
        at: u32,
        source: Source,
        context: Context,
        tag: TagMatch,
        len: usize,
    ) -> (OpId, RegionId) {
        let region = self.region(at, vec![0; len]);
        let (e, m) = (
            &mut self.endpoints[at as usize],
            &mut self.memories[at as usize],
        );
        let buffer = SgList::contiguous(region, 0, len as u64);
        let op = e
            .post_recv(self.now, source, context, tag, &buffer, m)
            .unwrap();
        (op, region)
    }

    /// The completion of `op` on `rank`, once it came.
    pub fn result(&self, rank: u32, op: OpId) -> Option<Result<Status, OpError>> {
        self.completions[rank as usize]
            .iter()
            .find(|c| c.op == op)
            .map(|c| c.result)
    }

    /// The bytes of a region of `rank`.
    #[allow(dead_code)]
    pub fn bytes(&self, rank: u32, region: RegionId) -> &[u8] {
        &self.memories[rank as usize].0[region.0 as usize]
    }

    fn flush(&mut self) {
        for rank in 0..self.endpoints.len() {
            while let Some(transmit) =
                self.endpoints[rank].poll_transmit(self.now, &self.memories[rank])
            {
                let mut bytes = vec![0; transmit.len()];
                transmit
                    .gather_into(&self.memories[rank], &mut bytes)
                    .unwrap();
                self.frames += 1;
                if self.random() < self.loss {
                    continue;
                }
                if self.filter.as_mut().is_some_and(|drop| drop(&bytes)) {
                    continue;
                }
                self.in_flight
                    .push_back((self.now + self.delay_ns, transmit.dst, bytes));
            }
            while let Some(completion) = self.endpoints[rank].poll_completion() {
                self.completions[rank].push(completion);
            }
        }
    }
}
