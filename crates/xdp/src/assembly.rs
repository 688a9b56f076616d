//! Laying out a steering program: instructions whose jumps name a label, resolved into offsets
//! once every label has its place, and the ending both programs share (count the frame and
//! pass it to the kernel, or just pass it).

use crate::program::{Insn, Reg, XDP_PASS};

/// A program being laid out; `L` names the places jumps go to.
pub(crate) struct Assembly<L> {
    code: Vec<(Insn, Option<L>)>,
    labels: Vec<(L, usize)>,
}

impl<L: Copy + PartialEq + std::fmt::Debug> Assembly<L> {
    pub(crate) fn new() -> Self {
        Self {
            code: Vec::with_capacity(128),
            labels: Vec::with_capacity(4),
        }
    }

    /// Appends `insn`; if `to` is a label, its jump offset is set to reach it.
    pub(crate) fn emit(&mut self, insn: Insn, to: Option<L>) {
        self.code.push((insn, to));
    }

    /// Appends instructions that jump nowhere (a 64-bit load's two slots, for instance).
    pub(crate) fn emit_all(&mut self, insns: impl IntoIterator<Item = Insn>) {
        self.code.extend(insns.into_iter().map(|insn| (insn, None)));
    }

    /// The next instruction is `label`'s place.
    pub(crate) fn place(&mut self, label: L) {
        self.labels.push((label, self.code.len()));
    }

    /// Places `kernel`: count the frame in the array value `passed_counter_fd`, then `pass`:
    /// give it to the kernel's stack.
    pub(crate) fn end_with_kernel_and_pass(&mut self, kernel: L, pass: L, passed_counter_fd: i32) {
        self.place(kernel);
        self.emit_all(Insn::load_map_value(Reg::R1, passed_counter_fd));
        self.emit(Insn::mov_imm(Reg::R2, 1), None);
        self.emit(Insn::atomic_add64(Reg::R1, Reg::R2, 0), None);
        self.place(pass);
        self.emit(Insn::mov_imm(Reg::R0, XDP_PASS), None);
        self.emit(Insn::exit(), None);
    }

    /// The instructions, every jump's offset set. Jumps go forward only (the verifier refuses
    /// loops this program has no use for).
    pub(crate) fn finish(self) -> Vec<Insn> {
        let labels = self.labels;
        let place = |label: L| {
            labels
                .iter()
                .find(|(l, _)| *l == label)
                .map(|&(_, at)| at)
                .unwrap_or_else(|| panic!("label {label:?} has no place"))
        };
        self.code
            .into_iter()
            .enumerate()
            .map(|(at, (mut insn, to))| {
                if let Some(label) = to {
                    let target = place(label);
                    assert!(target > at, "jump at {at} to {label:?} goes back");
                    insn.set_offset((target - at - 1) as i16);
                }
                insn
            })
            .collect()
    }
}
