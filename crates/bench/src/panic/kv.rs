//! `panic-kv`: a key-value look-up answered by rank 1's engine (`examples/pdl/kvlookup.pdl`,
//! its host not involved) against the same look-up answered by rank 1's host over the plain
//! API, on the same link. Rank 0 asks for keys in turn; a sample is one request and its answer.
//! The goal of issue 17: the engine's answer in at most 0.8x the host's time.

use nicmsg::{Comm, ProgramId, Source, TagMatch};

use super::{load_here, send_done, wait_done, DONE_TAG, KVLOOKUP};
use crate::model::Point;
use crate::patterns::{point, Plan};
use crate::BenchError;

/// The table's shape, as kvlookup.pdl has it: open addressing, 16-byte (key, value) slots.
const SLOTS: usize = 1024;
const KEYS: i64 = 500;
const SEGMENT: u16 = 1;
const LOOKUP: u16 = 20;
const ANSWER: u16 = 21;
const KEY_TAG: u32 = DONE_TAG + 10;
const ANSWER_TAG: u32 = DONE_TAG + 11;
/// The host's "no more keys".
const STOP: i64 = -1;

fn value_of(key: i64) -> i64 {
    key * 1000 + 7
}

/// The table rank 1's host fills (and, for `host`, searches): key k at slot k mod SLOTS.
fn table() -> Vec<u8> {
    let mut table = vec![0u8; SLOTS * 16];
    for key in 1..=KEYS {
        let slot = key as usize % SLOTS;
        table[slot * 16..slot * 16 + 8].copy_from_slice(&key.to_le_bytes());
        table[slot * 16 + 8..slot * 16 + 16].copy_from_slice(&value_of(key).to_le_bytes());
    }
    table
}

/// The host's look-up: the program's probing, in Rust.
fn look_up(table: &[u8], key: i64) -> Option<i64> {
    let word = |at: usize| i64::from_le_bytes(table[at..at + 8].try_into().expect("8 bytes"));
    let mut slot = key.rem_euclid(SLOTS as i64) as usize;
    for _ in 0..16 {
        match word(slot * 16) {
            0 => return None,
            k if k == key => return Some(word(slot * 16 + 8)),
            _ => slot = (slot + 1) % SLOTS,
        }
    }
    None
}

pub fn run(
    variant: &str,
    comm: &Comm,
    plan: &Plan,
    report: &mut dyn FnMut(Point),
) -> Result<(), BenchError> {
    let engine = match variant {
        "engine" => true,
        "host" => false,
        other => return Err(BenchError::Usage(format!("panic-kv: no variant {other:?}"))),
    };
    let programs = comm.programs();
    let mut memory = table();
    let host_table = memory.clone();
    let segment = if comm.rank() == 1 && engine {
        let segment = programs.share(SEGMENT, &mut memory)?;
        load_here(&programs, 1, "kvlookup.pdl", KVLOOKUP)?;
        Some(segment)
    } else {
        None
    };
    comm.barrier()?;
    if comm.rank() == 1 {
        if engine {
            wait_done(comm)?;
        } else {
            serve(comm, &host_table)?;
        }
        drop(segment);
        return Ok(());
    }
    let kv = ProgramId::of_name("kvlookup");
    let mut next = 0i64;
    let mut answer = [0u8; 16];
    let samples = plan.time_repetitions(8, 1.0, || {
        let key = next % KEYS + 1;
        next += 1;
        let len = if engine {
            programs
                .call((1, kv, LOOKUP), &key.to_le_bytes(), ANSWER, &mut answer)?
                .len
        } else {
            let reply = comm.irecv(&mut answer, Source::Rank(1), TagMatch::Tag(ANSWER_TAG))?;
            comm.send(&key.to_le_bytes(), 1, KEY_TAG)?;
            reply.wait()?.len as usize
        };
        let value = i64::from_le_bytes(answer[8..].try_into().expect("8 bytes"));
        if len != 16 || value != value_of(key) {
            return Err(BenchError::Usage(format!(
                "key {key}: a {len}-byte answer with value {value}"
            )));
        }
        Ok(())
    })?;
    report(point(8, &samples));
    if engine {
        send_done(comm)?;
    } else {
        comm.send(&STOP.to_le_bytes(), 1, KEY_TAG)?;
    }
    Ok(())
}

/// Rank 1's host answering keys until rank 0's STOP.
fn serve(comm: &Comm, table: &[u8]) -> Result<(), BenchError> {
    let mut request = [0u8; 8];
    loop {
        comm.recv(&mut request, Source::Rank(0), TagMatch::Tag(KEY_TAG))?;
        let key = i64::from_le_bytes(request);
        if key == STOP {
            return Ok(());
        }
        let mut answer = [0u8; 16];
        answer[..8].copy_from_slice(&request);
        let len = match look_up(table, key) {
            Some(value) => {
                answer[8..].copy_from_slice(&value.to_le_bytes());
                16
            }
            None => 8,
        };
        comm.send(&answer[..len], 0, ANSWER_TAG)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_look_up_finds_what_the_table_holds() {
        let table = table();
        assert_eq!(look_up(&table, 1), Some(value_of(1)));
        assert_eq!(look_up(&table, KEYS), Some(value_of(KEYS)));
        assert_eq!(look_up(&table, KEYS + 1), None);
    }
}
