//! A message written into a `HoleBuffer` in any chunking reads back whole, and every frame is
//! its hole followed by exactly the message bytes it carries.

use nicmsg_lm::geometry::{Geometry, MAX_HEADER_LEN};
use nicmsg_lm::send_buffer::HoleBuffer;
use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A header length, a payload size that can carry it, and a message length.
fn shape() -> impl Strategy<Value = (usize, usize, usize)> {
    (0..=MAX_HEADER_LEN).prop_flat_map(|h| (Just(h), h.max(1)..=2000, 0usize..=20_000))
}

/// The message cut into chunks at random points, in a random order: writes must land in
/// place whatever the order, since each maps its own offsets.
fn chunks(len: usize, rng: &mut ChaCha8Rng) -> Vec<std::ops::Range<usize>> {
    let mut cuts: Vec<usize> = (0..rng.gen_range(0..16))
        .map(|_| rng.gen_range(0..=len))
        .collect();
    cuts.extend([0, len]);
    cuts.sort_unstable();
    cuts.dedup();
    let mut chunks: Vec<_> = cuts.windows(2).map(|w| w[0]..w[1]).collect();
    chunks.shuffle(rng);
    chunks
}

/// The headers the test writes into frame `index`'s hole: never all zeros, and different
/// from frame to frame, so a hole that overlapped the message would show.
fn header(index: u32, header_len: usize) -> Vec<u8> {
    (0..header_len)
        .map(|i| (index as u8).wrapping_mul(37).wrapping_add(i as u8) | 0x80)
        .collect()
}

fn read_all(buffer: &HoleBuffer) -> Vec<u8> {
    let mut out = vec![0; buffer.len()];
    buffer.read_at(0, &mut out).unwrap();
    out
}

proptest! {
    #[test]
    fn a_message_lands_around_its_holes((h, p, len) in shape(), seed: u64) {
        let geometry = Geometry::new(h, p).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut data = vec![0; len];
        rng.fill(data.as_mut_slice());

        let mut buffer = HoleBuffer::new(geometry, len as u64).unwrap();
        for chunk in chunks(len, &mut rng) {
            buffer.write_at(chunk.start, &data[chunk]).unwrap();
        }
        let frames = buffer.frames();
        prop_assert_eq!(frames, geometry.frames(len));

        // (a) read_at is the inverse of write_at.
        prop_assert!(read_all(&buffer) == data);

        // (b) the pieces, end to end, are the message.
        let joined: Vec<u8> = (0..frames).flat_map(|i| buffer.piece(i).to_vec()).collect();
        prop_assert!(joined == data);

        // (d) headers go into the holes and never touch the message.
        for index in 0..frames {
            buffer.header_mut(index).copy_from_slice(&header(index, h));
        }
        prop_assert!(read_all(&buffer) == data);

        // (c) each frame is its headers then its payload, in one slice.
        for index in 0..frames {
            let frame = buffer.frame(index);
            prop_assert_eq!(frame.len(), h + geometry.payload_len(len, index));
            let headers = header(index, h);
            prop_assert_eq!(&frame[..h], headers.as_slice());
            prop_assert_eq!(&frame[h..], buffer.piece(index));
            prop_assert_eq!(&frame[h..], &data[geometry.payload_range(len, index)]);
        }

        // (e) frames leave last first, each as the slice frame() lends.
        let order: Vec<u32> = buffer.frames_last_first().map(|(i, _)| i).collect();
        prop_assert_eq!(order, (0..frames).rev().collect::<Vec<_>>());
        for (index, frame) in buffer.frames_last_first() {
            prop_assert_eq!(frame, buffer.frame(index));
        }

        // Filling the pieces in order lays the message out as write_at does.
        let mut filled = HoleBuffer::new(geometry, len as u64).unwrap();
        let mut rest = data.as_slice();
        for piece in filled.pieces_mut() {
            let (head, tail) = rest.split_at(piece.len());
            piece.copy_from_slice(head);
            rest = tail;
        }
        prop_assert!(rest.is_empty());
        for index in 0..frames {
            prop_assert_eq!(filled.piece(index), buffer.piece(index));
        }
    }
}
