//! The XDP program that steers the job's frames to the AF_XDP socket, written as eBPF
//! instructions. Built here rather than compiled from C so that the library needs no clang, no
//! ELF loader and no object file: the kernel's verifier checks it and its JIT compiles it.
//!
//! What it does, for every frame arriving on the interface:
//!
//! ```text
//! Ethernet II, IPv4 without options, not a fragment, UDP,
//! destination address and port are this rank's, and
//!   at most `ring_max_udp_len` UDP bytes             -> redirect to the socket of the frame's
//!                                                        receive queue, or pass when that
//!                                                        queue has none
//!   longer                                            -> count it, pass it to the kernel (its
//!                                                        GRO merges a stream's frames for the
//!                                                        UDP socket)
//! anything else (ARP, the bootstrap's TCP, other ports) -> pass to the kernel
//! ```

use std::net::Ipv4Addr;

use crate::assembly::Assembly;

/// One eBPF instruction, as the kernel reads it (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    pub(crate) code: u8,
    /// Destination register in the low nibble, source register in the high one.
    regs: u8,
    pub(crate) off: i16,
    imm: i32,
}

// Instruction classes and fields (linux/bpf_common.h, linux/bpf.h).
pub(crate) const CLASS_LD: u8 = 0x00;
pub(crate) const CLASS_LDX: u8 = 0x01;
pub(crate) const CLASS_ST: u8 = 0x02;
pub(crate) const CLASS_STX: u8 = 0x03;
pub(crate) const CLASS_ALU: u8 = 0x04;
pub(crate) const CLASS_JMP: u8 = 0x05;
pub(crate) const CLASS_JMP32: u8 = 0x06;
pub(crate) const CLASS_ALU64: u8 = 0x07;
pub(crate) const SIZE_W: u8 = 0x00;
pub(crate) const SIZE_H: u8 = 0x08;
pub(crate) const SIZE_B: u8 = 0x10;
pub(crate) const SIZE_DW: u8 = 0x18;
pub(crate) const MODE_IMM: u8 = 0x00;
pub(crate) const MODE_MEM: u8 = 0x60;
pub(crate) const MODE_ATOMIC: u8 = 0xc0;
pub(crate) const SOURCE_IMM: u8 = 0x00;
pub(crate) const SOURCE_REG: u8 = 0x08;
pub(crate) const OP_ADD: u8 = 0x00;
pub(crate) const OP_MUL: u8 = 0x20;
pub(crate) const OP_DIV: u8 = 0x30;
pub(crate) const OP_AND: u8 = 0x50;
pub(crate) const OP_LSH: u8 = 0x60;
pub(crate) const OP_MOV: u8 = 0xb0;
pub(crate) const OP_END: u8 = 0xd0;
/// With `OP_END`: convert to big endian (from the little-endian host: a byte swap).
pub(crate) const END_TO_BE: u8 = 0x08;
/// Atomic operation in the immediate of an atomic store: add.
pub(crate) const ATOMIC_ADD: i32 = 0x00;
pub(crate) const JUMP_ALWAYS: u8 = 0x00;
pub(crate) const JUMP_EQ: u8 = 0x10;
pub(crate) const JUMP_GT: u8 = 0x20;
pub(crate) const JUMP_NE: u8 = 0x50;
pub(crate) const JUMP_CALL: u8 = 0x80;
pub(crate) const JUMP_EXIT: u8 = 0x90;
/// `src_reg` of a 64-bit immediate load whose value is a map's file descriptor.
pub(crate) const PSEUDO_MAP_FD: u8 = 1;
/// `src_reg` of a 64-bit immediate load whose value is the address of a map's value.
pub(crate) const PSEUDO_MAP_VALUE: u8 = 2;

/// Helper `bpf_redirect_map(map, key, flags)`; the low bits of `flags` are the action taken when
/// the key has no entry.
pub(crate) const HELPER_REDIRECT_MAP: i32 = 51;
/// `XDP_PASS`: hand the frame to the kernel's stack.
pub const XDP_PASS: i32 = 2;

/// Registers.
#[derive(Debug, Clone, Copy)]
#[repr(u8)]
pub(crate) enum Reg {
    R0 = 0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
}

impl Insn {
    pub(crate) fn new(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Self {
        Self {
            code,
            regs: (src as u8) << 4 | dst as u8,
            off,
            imm,
        }
    }

    /// `dst = *(size *)(src + off)`.
    pub(crate) fn load(size: u8, dst: Reg, src: Reg, off: i16) -> Self {
        Self::new(CLASS_LDX | MODE_MEM | size, dst, src, off, 0)
    }

    pub(crate) fn mov_reg(dst: Reg, src: Reg) -> Self {
        Self::new(CLASS_ALU64 | OP_MOV | SOURCE_REG, dst, src, 0, 0)
    }

    pub(crate) fn mov_imm(dst: Reg, imm: i32) -> Self {
        Self::new(CLASS_ALU64 | OP_MOV | SOURCE_IMM, dst, Reg::R0, 0, imm)
    }

    pub(crate) fn add_imm(dst: Reg, imm: i32) -> Self {
        Self::new(CLASS_ALU64 | OP_ADD | SOURCE_IMM, dst, Reg::R0, 0, imm)
    }

    pub(crate) fn and_imm(dst: Reg, imm: i32) -> Self {
        Self::new(CLASS_ALU64 | OP_AND | SOURCE_IMM, dst, Reg::R0, 0, imm)
    }

    /// `if dst > src (unsigned, 64 bits) skip off instructions`.
    pub(crate) fn jump_gt_reg(dst: Reg, src: Reg, off: i16) -> Self {
        Self::new(CLASS_JMP | JUMP_GT | SOURCE_REG, dst, src, off, 0)
    }

    /// `if dst > imm (unsigned, 64 bits) skip off instructions`.
    pub(crate) fn jump_gt_imm(dst: Reg, imm: i32, off: i16) -> Self {
        Self::new(CLASS_JMP | JUMP_GT | SOURCE_IMM, dst, Reg::R0, off, imm)
    }

    /// `dst = be16(dst)`: a 16-bit field loaded from the frame, in host order.
    pub(crate) fn be16(dst: Reg) -> Self {
        Self::new(CLASS_ALU | OP_END | END_TO_BE, dst, Reg::R0, 0, 16)
    }

    /// `lock *(u64 *)(dst + off) += src`.
    pub(crate) fn atomic_add64(dst: Reg, src: Reg, off: i16) -> Self {
        Self::new(CLASS_STX | MODE_ATOMIC | SIZE_DW, dst, src, off, ATOMIC_ADD)
    }

    /// `if (u32)dst != imm skip off instructions`: a 32-bit compare, so an address or port
    /// whose top bit is set is not sign-extended into a mismatch.
    pub(crate) fn jump_ne32_imm(dst: Reg, imm: u32, off: i16) -> Self {
        Self::new(
            CLASS_JMP32 | JUMP_NE | SOURCE_IMM,
            dst,
            Reg::R0,
            off,
            imm as i32,
        )
    }

    pub(crate) fn call(helper: i32) -> Self {
        Self::new(CLASS_JMP | JUMP_CALL, Reg::R0, Reg::R0, 0, helper)
    }

    pub(crate) fn exit() -> Self {
        Self::new(CLASS_JMP | JUMP_EXIT, Reg::R0, Reg::R0, 0, 0)
    }

    /// `dst = map` (a 64-bit immediate load: two instruction slots).
    pub(crate) fn load_map_fd(dst: Reg, map_fd: i32) -> [Self; 2] {
        let mut first = Self::new(CLASS_LD | MODE_IMM | SIZE_DW, dst, Reg::R0, 0, map_fd);
        first.regs |= PSEUDO_MAP_FD << 4;
        [first, Self::new(0, Reg::R0, Reg::R0, 0, 0)]
    }

    /// `dst = &value[0] of map` (an array map's first value; two instruction slots).
    pub(crate) fn load_map_value(dst: Reg, map_fd: i32) -> [Self; 2] {
        let mut first = Self::new(CLASS_LD | MODE_IMM | SIZE_DW, dst, Reg::R0, 0, map_fd);
        first.regs |= PSEUDO_MAP_VALUE << 4;
        [first, Self::new(0, Reg::R0, Reg::R0, 0, 0)]
    }

    /// `*(size *)(dst + off) = src`.
    pub(crate) fn store(size: u8, dst: Reg, off: i16, src: Reg) -> Self {
        Self::new(CLASS_STX | MODE_MEM | size, dst, src, off, 0)
    }

    /// `*(size *)(dst + off) = imm`.
    pub(crate) fn store_imm(size: u8, dst: Reg, off: i16, imm: i32) -> Self {
        Self::new(CLASS_ST | MODE_MEM | size, dst, Reg::R0, off, imm)
    }

    pub(crate) fn add_reg(dst: Reg, src: Reg) -> Self {
        Self::new(CLASS_ALU64 | OP_ADD | SOURCE_REG, dst, src, 0, 0)
    }

    pub(crate) fn mul_imm(dst: Reg, imm: i32) -> Self {
        Self::new(CLASS_ALU64 | OP_MUL | SOURCE_IMM, dst, Reg::R0, 0, imm)
    }

    /// `dst /= imm` (unsigned; `imm` not 0).
    pub(crate) fn div_imm(dst: Reg, imm: i32) -> Self {
        Self::new(CLASS_ALU64 | OP_DIV | SOURCE_IMM, dst, Reg::R0, 0, imm)
    }

    pub(crate) fn lsh_imm(dst: Reg, imm: i32) -> Self {
        Self::new(CLASS_ALU64 | OP_LSH | SOURCE_IMM, dst, Reg::R0, 0, imm)
    }

    /// `if dst == imm (64 bits) skip off instructions`.
    pub(crate) fn jump_eq_imm(dst: Reg, imm: i32, off: i16) -> Self {
        Self::new(CLASS_JMP | JUMP_EQ | SOURCE_IMM, dst, Reg::R0, off, imm)
    }

    /// `if dst != src (64 bits) skip off instructions`.
    pub(crate) fn jump_ne_reg(dst: Reg, src: Reg, off: i16) -> Self {
        Self::new(CLASS_JMP | JUMP_NE | SOURCE_REG, dst, src, off, 0)
    }

    /// `skip off instructions`.
    pub(crate) fn jump(off: i16) -> Self {
        Self::new(CLASS_JMP | JUMP_ALWAYS, Reg::R0, Reg::R0, off, 0)
    }

    /// The jump offset of this instruction, to be set once its target is known.
    pub(crate) fn set_offset(&mut self, off: i16) {
        self.off = off;
    }
}

// Offsets in the frame: Ethernet II (14 bytes), IPv4 without options (20), UDP (8).
pub(crate) const ETHER_TYPE: i16 = 12;
pub(crate) const IP_VERSION_IHL: i16 = 14;
pub(crate) const IP_FRAGMENT: i16 = 20;
pub(crate) const IP_PROTOCOL: i16 = 23;
pub(crate) const IP_DESTINATION: i16 = 30;
pub(crate) const UDP_DESTINATION_PORT: i16 = 36;
pub(crate) const UDP_LENGTH: i16 = 38;
/// Bytes the program reads: up to the end of the UDP header.
pub(crate) const HEADERS_LEN: i32 = 42;

// `struct xdp_md` fields.
pub(crate) const MD_DATA: i16 = 0;
pub(crate) const MD_DATA_END: i16 = 4;
pub(crate) const MD_RX_QUEUE_INDEX: i16 = 16;

/// A 16-bit field in network order as a little-endian load of it reads.
pub(crate) fn be16_as_loaded(value: u16) -> u32 {
    u32::from(u16::from_le_bytes(value.to_be_bytes()))
}

/// What the steering program is built from.
#[derive(Debug, Clone, Copy)]
pub struct Steering {
    /// The rank's address and port: frames to them are its own.
    pub ip: Ipv4Addr,
    pub port: u16,
    /// The `XSKMAP` of sockets by receive queue.
    pub sockets_map_fd: i32,
    /// Frames of at most this many UDP bytes (header included) go to the socket's ring.
    pub ring_max_udp_len: u16,
    /// An array map whose first value (a `u64`) counts the frames of the rank passed to the
    /// kernel instead.
    pub passed_counter_fd: i32,
}

/// Where a conditional jump of the program goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Count the frame, then pass it.
    Kernel,
    /// Pass it (not ours).
    Pass,
}

/// The program's opening, shared with LM's placing filter: `R6` = the context, `R2` = the
/// frame's first byte, `R3` = its end; then the checks that the frame is Ethernet II, IPv4
/// without options, not a fragment, UDP, to `ip`:`port`. Each instruction comes with whether
/// it jumps to "not ours, pass it" (its offset is set once the layout is known).
pub(crate) fn frame_is_ours(ip: Ipv4Addr, port: u16) -> Vec<(Insn, bool)> {
    use Reg::*;
    const ETHER_TYPE_IPV4: u16 = 0x0800;
    const IPV4_NO_OPTIONS: u32 = 0x45;
    /// More-fragments flag and fragment offset: a fragment's bytes after the IP header are not a
    /// UDP header (or not ours alone).
    const FRAGMENT_BITS: u16 = 0x3fff;
    const PROTOCOL_UDP: u32 = 17;
    let mut checks = Vec::with_capacity(24);
    checks.push((Insn::mov_reg(R6, R1), false));
    checks.push((Insn::load(SIZE_W, R2, R6, MD_DATA), false));
    checks.push((Insn::load(SIZE_W, R3, R6, MD_DATA_END), false));
    checks.push((Insn::mov_reg(R4, R2), false));
    checks.push((Insn::add_imm(R4, HEADERS_LEN), false));
    checks.push((Insn::jump_gt_reg(R4, R3, 0), true));
    let field_is = |offset: i16, size: u8, value: u32| {
        [
            (Insn::load(size, R5, R2, offset), false),
            (Insn::jump_ne32_imm(R5, value, 0), true),
        ]
    };
    checks.extend(field_is(
        ETHER_TYPE,
        SIZE_H,
        be16_as_loaded(ETHER_TYPE_IPV4),
    ));
    checks.extend(field_is(IP_VERSION_IHL, SIZE_B, IPV4_NO_OPTIONS));
    checks.push((Insn::load(SIZE_H, R5, R2, IP_FRAGMENT), false));
    checks.push((
        Insn::and_imm(R5, be16_as_loaded(FRAGMENT_BITS) as i32),
        false,
    ));
    checks.push((Insn::jump_ne32_imm(R5, 0, 0), true));
    checks.extend(field_is(IP_PROTOCOL, SIZE_B, PROTOCOL_UDP));
    checks.extend(field_is(
        IP_DESTINATION,
        SIZE_W,
        u32::from_le_bytes(ip.octets()),
    ));
    checks.extend(field_is(UDP_DESTINATION_PORT, SIZE_H, be16_as_loaded(port)));
    checks
}

/// The steering program (see the module documentation).
pub fn redirect_program(steering: &Steering) -> Vec<Insn> {
    use Reg::*;
    use Target::*;
    let mut program = Assembly::new();
    for (insn, jumps) in frame_is_ours(steering.ip, steering.port) {
        program.emit(insn, jumps.then_some(Pass));
    }
    program.emit(Insn::load(SIZE_H, R5, R2, UDP_LENGTH), None);
    program.emit(Insn::be16(R5), None);
    let ring_max = i32::from(steering.ring_max_udp_len);
    program.emit(Insn::jump_gt_imm(R5, ring_max, 0), Some(Kernel));
    program.emit_all(Insn::load_map_fd(R1, steering.sockets_map_fd));
    program.emit(Insn::load(SIZE_W, R2, R6, MD_RX_QUEUE_INDEX), None);
    program.emit(Insn::mov_imm(R3, XDP_PASS), None);
    program.emit(Insn::call(HELPER_REDIRECT_MAP), None);
    program.emit(Insn::exit(), None);
    program.end_with_kernel_and_pass(Kernel, Pass, steering.passed_counter_fd);
    program.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_conditional_jump(code: u8) -> bool {
        let class = code & 0x07;
        let op = code & 0xf0;
        (class == CLASS_JMP || class == CLASS_JMP32)
            && op != JUMP_CALL
            && op != JUMP_EXIT
            && op != 0
    }

    fn bytes(insn: Insn) -> [u8; 8] {
        let mut out = [0; 8];
        out[0] = insn.code;
        out[1] = insn.regs;
        out[2..4].copy_from_slice(&insn.off.to_le_bytes());
        out[4..8].copy_from_slice(&insn.imm.to_le_bytes());
        out
    }

    #[test]
    fn encodings_match_the_kernels() {
        // Byte strings as llvm-objdump prints them for the same instructions.
        assert_eq!(
            bytes(Insn::mov_reg(Reg::R6, Reg::R1)),
            [0xbf, 0x16, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::load(SIZE_W, Reg::R2, Reg::R6, 4)),
            [0x61, 0x62, 4, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::load(SIZE_H, Reg::R5, Reg::R2, 12)),
            [0x69, 0x25, 12, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::load(SIZE_B, Reg::R5, Reg::R2, 23)),
            [0x71, 0x25, 23, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::add_imm(Reg::R4, 42)),
            [0x07, 0x04, 0, 0, 42, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::jump_gt_reg(Reg::R4, Reg::R3, 5)),
            [0x2d, 0x34, 5, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::jump_ne32_imm(Reg::R5, 17, 3)),
            [0x56, 0x05, 3, 0, 17, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::mov_imm(Reg::R0, 2)),
            [0xb7, 0x00, 0, 0, 2, 0, 0, 0]
        );
        assert_eq!(bytes(Insn::call(51)), [0x85, 0x00, 0, 0, 51, 0, 0, 0]);
        assert_eq!(bytes(Insn::exit()), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            bytes(Insn::jump_gt_imm(Reg::R5, 520, 9)),
            [0x25, 0x05, 9, 0, 8, 2, 0, 0]
        );
        assert_eq!(bytes(Insn::be16(Reg::R5)), [0xdc, 0x05, 0, 0, 16, 0, 0, 0]);
        assert_eq!(
            bytes(Insn::atomic_add64(Reg::R1, Reg::R2, 0)),
            [0xdb, 0x21, 0, 0, 0, 0, 0, 0]
        );
        let [first, second] = Insn::load_map_fd(Reg::R1, 7);
        assert_eq!(bytes(first), [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(bytes(second), [0; 8]);
        let [first, second] = Insn::load_map_value(Reg::R1, 7);
        assert_eq!(bytes(first), [0x18, 0x21, 0, 0, 7, 0, 0, 0]);
        assert_eq!(bytes(second), [0; 8]);
    }

    fn steering(port: u16) -> Steering {
        Steering {
            ip: Ipv4Addr::new(10, 213, 7, 200),
            port,
            sockets_map_fd: 3,
            ring_max_udp_len: 520,
            passed_counter_fd: 4,
        }
    }

    #[test]
    fn every_check_jumps_to_pass_and_long_frames_to_the_counter() {
        let program = redirect_program(&steering(40000));
        let pass = program.len() - 2;
        assert_eq!(program[pass], Insn::mov_imm(Reg::R0, XDP_PASS));
        let kernel = pass - 4;
        assert_eq!(program[kernel], Insn::load_map_value(Reg::R1, 4)[0]);
        assert_eq!(program[pass - 1], Insn::atomic_add64(Reg::R1, Reg::R2, 0));
        let jumps: Vec<usize> = (0..program.len())
            .filter(|&at| is_conditional_jump(program[at].code))
            .collect();
        // Bounds, ethertype, IHL, fragment, protocol, address, port, then the length.
        assert_eq!(jumps.len(), 8);
        let (length, checks) = jumps.split_last().expect("jumps");
        for &at in checks {
            assert_eq!(at + 1 + program[at].off as usize, pass, "jump at {at}");
        }
        assert_eq!(length + 1 + program[*length].off as usize, kernel);
        assert_eq!(program[*length].imm, 520);
        assert_eq!(program[length - 1], Insn::be16(Reg::R5));
    }

    #[test]
    fn constants_are_read_as_the_frame_holds_them() {
        let program = redirect_program(&steering(0x1234));
        let imm_of = |off: i16| {
            let at = program
                .iter()
                .position(|i| {
                    let loads_a_field = [SIZE_H, SIZE_W].map(|size| CLASS_LDX | MODE_MEM | size);
                    loads_a_field.contains(&i.code) && i.off == off
                })
                .expect("load");
            program[at + 1].imm as u32
        };
        // A frame holds 08 00 for IPv4, 12 34 for port 0x1234, 0a d5 07 c8 for the address.
        assert_eq!(
            imm_of(ETHER_TYPE),
            u32::from(u16::from_le_bytes([0x08, 0x00]))
        );
        assert_eq!(
            imm_of(UDP_DESTINATION_PORT),
            u32::from(u16::from_le_bytes([0x12, 0x34]))
        );
        assert_eq!(
            imm_of(IP_DESTINATION),
            u32::from_le_bytes([10, 213, 7, 200])
        );
    }
}
