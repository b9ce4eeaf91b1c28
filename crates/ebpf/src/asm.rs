//! A small eBPF assembler: the instructions flowplane's programs need, encoded as the kernel reads
//! them (`include/uapi/linux/bpf.h`, `Documentation/bpf/standardization/instruction-set.rst`), with
//! labels for jumps and a disassembler in the verifier's syntax.
//!
//! Why an assembler instead of clang: the two programs are small (under 100 instructions), the
//! project builds them at run time with the map file descriptors already in place, and no C
//! toolchain, ELF parser or BTF is needed in the build or in CI. The cost is that the programs are
//! written as instruction sequences; [`Asm`] keeps that readable with named registers, labels and
//! one method per instruction family, and every program is checked by the kernel verifier when it
//! is loaded and by `BPF_PROG_TEST_RUN` in the tests.
//!
//! Encoding (one 8-byte slot per instruction, little-endian fields on x86 and arm64):
//! `opcode:8 | dst_reg:4 | src_reg:4 | offset:16 | imm:32`. The 64-bit immediate load
//! (`BPF_LD | BPF_IMM | BPF_DW`) takes two slots; the second carries the upper 32 bits. A map is
//! referenced by loading its file descriptor with `src_reg = BPF_PSEUDO_MAP_FD` (1): the verifier
//! replaces it with the map's address.
//!
//! Jump offsets count slots from the instruction after the jump; [`Asm::finish`] resolves labels
//! and reports unbound labels and offsets that do not fit in 16 bits.

use std::fmt;

/// A register, `r0`..`r10`. `r0` holds return values, `r1`..`r5` are arguments (clobbered by
/// calls), `r6`..`r9` are callee-saved, `r10` is the read-only frame pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg(u8);

/// Return value of helpers and of the program.
pub const R0: Reg = Reg(0);
/// First argument; holds the context pointer at entry.
pub const R1: Reg = Reg(1);
/// Second argument.
pub const R2: Reg = Reg(2);
/// Third argument.
pub const R3: Reg = Reg(3);
/// Fourth argument.
pub const R4: Reg = Reg(4);
/// Fifth argument.
pub const R5: Reg = Reg(5);
/// Callee-saved.
pub const R6: Reg = Reg(6);
/// Callee-saved.
pub const R7: Reg = Reg(7);
/// Callee-saved.
pub const R8: Reg = Reg(8);
/// Callee-saved.
pub const R9: Reg = Reg(9);
/// Frame pointer (read-only); the stack is the 512 bytes below it.
pub const R10: Reg = Reg(10);

impl Reg {
    /// The register number.
    pub const fn num(self) -> u8 {
        self.0
    }
}

/// Operand sizes of loads and stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Size {
    /// 8 bits.
    B,
    /// 16 bits.
    H,
    /// 32 bits.
    W,
    /// 64 bits.
    DW,
}

impl Size {
    const fn code(self) -> u8 {
        match self {
            Size::W => 0x00,
            Size::H => 0x08,
            Size::B => 0x10,
            Size::DW => 0x18,
        }
    }
    fn from_code(c: u8) -> Size {
        match c & 0x18 {
            0x00 => Size::W,
            0x08 => Size::H,
            0x10 => Size::B,
            _ => Size::DW,
        }
    }
    fn c_type(self) -> &'static str {
        match self {
            Size::B => "u8",
            Size::H => "u16",
            Size::W => "u32",
            Size::DW => "u64",
        }
    }
}

/// Arithmetic and logic operations (`BPF_ALU` / `BPF_ALU64` classes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alu {
    /// `dst += src`
    Add,
    /// `dst -= src`
    Sub,
    /// `dst *= src`
    Mul,
    /// `dst /= src` (unsigned; division by zero gives 0)
    Div,
    /// `dst |= src`
    Or,
    /// `dst &= src`
    And,
    /// `dst <<= src`
    Lsh,
    /// `dst >>= src` (logical)
    Rsh,
    /// `dst %= src` (unsigned; modulo zero leaves `dst`)
    Mod,
    /// `dst ^= src`
    Xor,
    /// `dst = src`
    Mov,
    /// `dst >>= src` (arithmetic)
    Arsh,
}

impl Alu {
    /// Every operation, for tests.
    pub const ALL: [Alu; 12] = [
        Alu::Add,
        Alu::Sub,
        Alu::Mul,
        Alu::Div,
        Alu::Or,
        Alu::And,
        Alu::Lsh,
        Alu::Rsh,
        Alu::Mod,
        Alu::Xor,
        Alu::Mov,
        Alu::Arsh,
    ];
    const fn code(self) -> u8 {
        match self {
            Alu::Add => 0x00,
            Alu::Sub => 0x10,
            Alu::Mul => 0x20,
            Alu::Div => 0x30,
            Alu::Or => 0x40,
            Alu::And => 0x50,
            Alu::Lsh => 0x60,
            Alu::Rsh => 0x70,
            Alu::Mod => 0x90,
            Alu::Xor => 0xa0,
            Alu::Mov => 0xb0,
            Alu::Arsh => 0xc0,
        }
    }
    fn symbol(code: u8) -> &'static str {
        match code & 0xf0 {
            0x00 => "+=",
            0x10 => "-=",
            0x20 => "*=",
            0x30 => "/=",
            0x40 => "|=",
            0x50 => "&=",
            0x60 => "<<=",
            0x70 => ">>=",
            0x90 => "%=",
            0xa0 => "^=",
            0xb0 => "=",
            0xc0 => "s>>=",
            _ => "?=",
        }
    }
}

/// Jump conditions (`BPF_JMP` / `BPF_JMP32` classes). `S*` compare as signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cond {
    /// `==`
    Eq,
    /// `>` unsigned
    Gt,
    /// `>=` unsigned
    Ge,
    /// `dst & src != 0`
    Set,
    /// `!=`
    Ne,
    /// `>` signed
    Sgt,
    /// `>=` signed
    Sge,
    /// `<` unsigned
    Lt,
    /// `<=` unsigned
    Le,
    /// `<` signed
    Slt,
    /// `<=` signed
    Sle,
}

impl Cond {
    /// Every condition, for tests.
    pub const ALL: [Cond; 11] = [
        Cond::Eq,
        Cond::Gt,
        Cond::Ge,
        Cond::Set,
        Cond::Ne,
        Cond::Sgt,
        Cond::Sge,
        Cond::Lt,
        Cond::Le,
        Cond::Slt,
        Cond::Sle,
    ];
    const fn code(self) -> u8 {
        match self {
            Cond::Eq => 0x10,
            Cond::Gt => 0x20,
            Cond::Ge => 0x30,
            Cond::Set => 0x40,
            Cond::Ne => 0x50,
            Cond::Sgt => 0x60,
            Cond::Sge => 0x70,
            Cond::Lt => 0xa0,
            Cond::Le => 0xb0,
            Cond::Slt => 0xc0,
            Cond::Sle => 0xd0,
        }
    }
    fn symbol(code: u8) -> &'static str {
        match code & 0xf0 {
            0x10 => "==",
            0x20 => ">",
            0x30 => ">=",
            0x40 => "&",
            0x50 => "!=",
            0x60 => "s>",
            0x70 => "s>=",
            0xa0 => "<",
            0xb0 => "<=",
            0xc0 => "s<",
            0xd0 => "s<=",
            _ => "?",
        }
    }
}

/// The second operand of an ALU or jump instruction: an immediate or a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Src {
    /// 32-bit immediate (sign-extended to 64 bits by 64-bit operations).
    K(i32),
    /// Register.
    X(Reg),
}

impl From<Reg> for Src {
    fn from(r: Reg) -> Src {
        Src::X(r)
    }
}

impl From<i32> for Src {
    fn from(k: i32) -> Src {
        Src::K(k)
    }
}

// Instruction classes.
const CLASS_LD: u8 = 0x00;
const CLASS_LDX: u8 = 0x01;
const CLASS_ST: u8 = 0x02;
const CLASS_STX: u8 = 0x03;
const CLASS_ALU: u8 = 0x04;
const CLASS_JMP: u8 = 0x05;
const CLASS_JMP32: u8 = 0x06;
const CLASS_ALU64: u8 = 0x07;
// Modes and sources.
const MODE_IMM: u8 = 0x00;
const MODE_MEM: u8 = 0x60;
const SRC_K: u8 = 0x00;
const SRC_X: u8 = 0x08;
// Special operations.
const OP_NEG: u8 = 0x80;
const OP_END: u8 = 0xd0;
const OP_JA: u8 = 0x00;
const OP_CALL: u8 = 0x80;
const OP_EXIT: u8 = 0x90;
const END_TO_LE: u8 = 0x00;
const END_TO_BE: u8 = 0x08;
/// `src_reg` of a 64-bit immediate load that carries a map file descriptor.
pub const PSEUDO_MAP_FD: u8 = 1;

/// One 8-byte instruction slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Insn {
    /// Opcode: class, size/operation, mode/source.
    pub code: u8,
    /// Destination register (low nibble of byte 1).
    pub dst: u8,
    /// Source register (high nibble of byte 1).
    pub src: u8,
    /// Signed offset (memory displacement or jump distance in slots).
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

impl Insn {
    /// The slot as the kernel reads it.
    pub fn to_bytes(self) -> [u8; 8] {
        let o = self.off.to_le_bytes();
        let i = self.imm.to_le_bytes();
        [
            self.code,
            (self.src << 4) | (self.dst & 0x0f),
            o[0],
            o[1],
            i[0],
            i[1],
            i[2],
            i[3],
        ]
    }

    /// Decode a slot.
    pub fn from_bytes(b: [u8; 8]) -> Insn {
        Insn {
            code: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    fn class(self) -> u8 {
        self.code & 0x07
    }

    /// True for the first slot of a 64-bit immediate load (the next slot belongs to it).
    pub fn is_wide(self) -> bool {
        self.code == CLASS_LD | MODE_IMM | Size::DW.code()
    }
}

/// Encode a program to the bytes `BPF_PROG_LOAD` takes.
pub fn to_bytes(prog: &[Insn]) -> Vec<u8> {
    prog.iter().flat_map(|i| i.to_bytes()).collect()
}

/// A jump target. Create with [`Asm::label`], place with [`Asm::bind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Label(usize);

/// Why a program could not be assembled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AsmError {
    /// A jump refers to a label that was never bound.
    #[error("label {0} is used but never bound")]
    UnboundLabel(usize),
    /// A label was bound twice.
    #[error("label {0} is bound twice")]
    Rebound(usize),
    /// A jump is further than a 16-bit offset reaches.
    #[error("jump at slot {at} to slot {to} does not fit a 16-bit offset")]
    TooFar {
        /// Slot of the jump.
        at: usize,
        /// Slot of the target.
        to: usize,
    },
    /// The program has no instructions.
    #[error("empty program")]
    Empty,
}

/// Builds a program: one method per instruction family, labels for jumps.
///
/// ```
/// use fp_ebpf::asm::{Asm, Cond, R0, R1};
/// let mut a = Asm::new();
/// let big = a.label();
/// a.mov64(R0, 0);
/// a.jmp(Cond::Gt, R1, 100, big);
/// a.exit();
/// a.bind(big);
/// a.mov64(R0, 1);
/// a.exit();
/// let prog = a.finish().unwrap();
/// assert_eq!(prog.len(), 5);
/// assert_eq!(prog[1].off, 1); // skips the first exit
/// ```
#[derive(Default, Debug)]
pub struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
    rebound: Option<usize>,
}

impl Asm {
    /// An empty program.
    pub fn new() -> Asm {
        Asm::default()
    }

    /// Slots emitted so far.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// True before the first instruction.
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    fn push(&mut self, code: u8, dst: Reg, src: Reg, off: i16, imm: i32) {
        self.insns.push(Insn {
            code,
            dst: dst.0,
            src: src.0,
            off,
            imm,
        });
    }

    /// A new, unbound label.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Place `l` at the next instruction.
    pub fn bind(&mut self, l: Label) {
        if self.labels[l.0].is_some() {
            self.rebound.get_or_insert(l.0);
        }
        self.labels[l.0] = Some(self.insns.len());
    }

    fn alu(&mut self, class: u8, op: Alu, dst: Reg, src: Src) {
        match src {
            Src::K(k) => self.push(class | op.code() | SRC_K, dst, R0, 0, k),
            Src::X(r) => self.push(class | op.code() | SRC_X, dst, r, 0, 0),
        }
    }

    /// 64-bit `dst op= src`.
    pub fn alu64(&mut self, op: Alu, dst: Reg, src: impl Into<Src>) {
        self.alu(CLASS_ALU64, op, dst, src.into());
    }

    /// 32-bit `dst op= src` (the upper half of `dst` is zeroed).
    pub fn alu32(&mut self, op: Alu, dst: Reg, src: impl Into<Src>) {
        self.alu(CLASS_ALU, op, dst, src.into());
    }

    /// `dst = src` (64-bit; an immediate is sign-extended).
    pub fn mov64(&mut self, dst: Reg, src: impl Into<Src>) {
        self.alu64(Alu::Mov, dst, src);
    }

    /// `dst += src` (64-bit).
    pub fn add64(&mut self, dst: Reg, src: impl Into<Src>) {
        self.alu64(Alu::Add, dst, src);
    }

    /// `dst -= src` (64-bit).
    pub fn sub64(&mut self, dst: Reg, src: impl Into<Src>) {
        self.alu64(Alu::Sub, dst, src);
    }

    /// `dst &= src` (64-bit).
    pub fn and64(&mut self, dst: Reg, src: impl Into<Src>) {
        self.alu64(Alu::And, dst, src);
    }

    /// `dst |= src` (64-bit).
    pub fn or64(&mut self, dst: Reg, src: impl Into<Src>) {
        self.alu64(Alu::Or, dst, src);
    }

    /// `dst <<= src` (64-bit).
    pub fn lsh64(&mut self, dst: Reg, src: impl Into<Src>) {
        self.alu64(Alu::Lsh, dst, src);
    }

    /// `dst >>= src` (64-bit, logical).
    pub fn rsh64(&mut self, dst: Reg, src: impl Into<Src>) {
        self.alu64(Alu::Rsh, dst, src);
    }

    /// `dst = -dst` (64-bit).
    pub fn neg64(&mut self, dst: Reg) {
        self.push(CLASS_ALU64 | OP_NEG, dst, R0, 0, 0);
    }

    /// Convert the low `bits` (16, 32 or 64) of `dst` from host order to big-endian (network
    /// order), zeroing the rest.
    pub fn to_be(&mut self, dst: Reg, bits: i32) {
        self.push(CLASS_ALU | OP_END | END_TO_BE, dst, R0, 0, bits);
    }

    /// Convert the low `bits` of `dst` from host order to little-endian, zeroing the rest.
    pub fn to_le(&mut self, dst: Reg, bits: i32) {
        self.push(CLASS_ALU | OP_END | END_TO_LE, dst, R0, 0, bits);
    }

    /// `dst = *(size *)(base + off)`.
    pub fn load(&mut self, size: Size, dst: Reg, base: Reg, off: i16) {
        self.push(CLASS_LDX | MODE_MEM | size.code(), dst, base, off, 0);
    }

    /// `*(size *)(base + off) = src`.
    pub fn store(&mut self, size: Size, base: Reg, off: i16, src: Reg) {
        self.push(CLASS_STX | MODE_MEM | size.code(), base, src, off, 0);
    }

    /// `*(size *)(base + off) = imm` (sign-extended for 64 bits).
    pub fn store_imm(&mut self, size: Size, base: Reg, off: i16, imm: i32) {
        self.push(CLASS_ST | MODE_MEM | size.code(), base, R0, off, imm);
    }

    fn wide(&mut self, dst: Reg, src: u8, v: u64) {
        self.insns.push(Insn {
            code: CLASS_LD | MODE_IMM | Size::DW.code(),
            dst: dst.0,
            src,
            off: 0,
            imm: v as u32 as i32,
        });
        self.insns.push(Insn {
            imm: (v >> 32) as u32 as i32,
            ..Insn::default()
        });
    }

    /// `dst = v` for any 64-bit value (two slots).
    pub fn ld_imm64(&mut self, dst: Reg, v: u64) {
        self.wide(dst, 0, v);
    }

    /// `dst = &map` where `fd` is the map's file descriptor (two slots, `BPF_PSEUDO_MAP_FD`).
    pub fn ld_map_fd(&mut self, dst: Reg, fd: i32) {
        self.wide(dst, PSEUDO_MAP_FD, fd as u32 as u64);
    }

    fn jump(&mut self, class: u8, cond: Cond, dst: Reg, src: Src, target: Label) {
        self.fixups.push((self.insns.len(), target));
        match src {
            Src::K(k) => self.push(class | cond.code() | SRC_K, dst, R0, 0, k),
            Src::X(r) => self.push(class | cond.code() | SRC_X, dst, r, 0, 0),
        }
    }

    /// `if dst cond src goto target` (64-bit compare).
    pub fn jmp(&mut self, cond: Cond, dst: Reg, src: impl Into<Src>, target: Label) {
        self.jump(CLASS_JMP, cond, dst, src.into(), target);
    }

    /// `if (u32)dst cond (u32)src goto target` (32-bit compare).
    pub fn jmp32(&mut self, cond: Cond, dst: Reg, src: impl Into<Src>, target: Label) {
        self.jump(CLASS_JMP32, cond, dst, src.into(), target);
    }

    /// `goto target`.
    pub fn ja(&mut self, target: Label) {
        self.fixups.push((self.insns.len(), target));
        self.push(CLASS_JMP | OP_JA, R0, R0, 0, 0);
    }

    /// Call helper number `helper` (see [`crate::helper`]); arguments in `r1`..`r5`, result in
    /// `r0`, `r1`..`r5` clobbered.
    pub fn call(&mut self, helper: i32) {
        self.push(CLASS_JMP | OP_CALL, R0, R0, 0, helper);
    }

    /// Return `r0`.
    pub fn exit(&mut self) {
        self.push(CLASS_JMP | OP_EXIT, R0, R0, 0, 0);
    }

    /// Resolve labels and return the program.
    pub fn finish(mut self) -> Result<Vec<Insn>, AsmError> {
        if let Some(l) = self.rebound {
            return Err(AsmError::Rebound(l));
        }
        if self.insns.is_empty() {
            return Err(AsmError::Empty);
        }
        for &(at, l) in &self.fixups {
            let to = self.labels[l.0].ok_or(AsmError::UnboundLabel(l.0))?;
            let d = to as i64 - (at as i64 + 1);
            let off = i16::try_from(d).map_err(|_| AsmError::TooFar { at, to })?;
            self.insns[at].off = off;
        }
        Ok(self.insns)
    }
}

fn reg(n: u8) -> String {
    format!("r{n}")
}

fn src_text(i: &Insn) -> String {
    if i.code & SRC_X != 0 {
        reg(i.src)
    } else {
        imm_text(i.imm)
    }
}

/// Small immediates in decimal, larger ones (ethertypes, masks) in hex.
fn imm_text(v: i32) -> String {
    if (-128..128).contains(&v) {
        format!("{v}")
    } else {
        format!("{:#x}", v as u32)
    }
}

/// One line per instruction, in the verifier's syntax (`r2 = *(u32 *)(r1 + 0)`), numbered by
/// slot. Jumps show their target slot.
pub fn disassemble(prog: &[Insn]) -> String {
    let mut out = String::new();
    let mut pc = 0;
    while pc < prog.len() {
        let i = prog[pc];
        let text = if i.is_wide() {
            let hi = prog.get(pc + 1).map(|n| n.imm as u32 as u64).unwrap_or(0);
            let v = (hi << 32) | i.imm as u32 as u64;
            let t = if i.src == PSEUDO_MAP_FD {
                format!("r{} = map_fd({})", i.dst, i.imm)
            } else {
                format!("r{} = {:#x} ll", i.dst, v)
            };
            out.push_str(&format!("{pc:4}: {t}\n"));
            pc += 2;
            continue;
        } else {
            format_one(pc, &i)
        };
        out.push_str(&format!("{pc:4}: {text}\n"));
        pc += 1;
    }
    out
}

fn format_one(pc: usize, i: &Insn) -> String {
    let target = (pc as i64 + 1 + i.off as i64).max(0);
    match i.class() {
        CLASS_ALU64 | CLASS_ALU => {
            let w = if i.class() == CLASS_ALU { "w" } else { "r" };
            match i.code & 0xf0 {
                OP_NEG => format!("{w}{} = -{w}{}", i.dst, i.dst),
                OP_END => {
                    let order = if i.code & END_TO_BE != 0 { "be" } else { "le" };
                    format!("r{} = {order}{} r{}", i.dst, i.imm, i.dst)
                }
                op => {
                    let s = if i.code & SRC_X != 0 {
                        format!("{w}{}", i.src)
                    } else {
                        imm_text(i.imm)
                    };
                    format!("{w}{} {} {s}", i.dst, Alu::symbol(op), s = s)
                }
            }
        }
        CLASS_JMP | CLASS_JMP32 => match i.code & 0xf0 {
            OP_JA => format!("goto {target}"),
            OP_CALL => format!("call {}", crate::helper::name(i.imm)),
            OP_EXIT => "exit".to_string(),
            op => {
                let w = if i.class() == CLASS_JMP32 { "w" } else { "r" };
                let s = if i.code & SRC_X != 0 {
                    format!("{w}{}", i.src)
                } else {
                    src_text(i)
                };
                format!("if {w}{} {} {s} goto {target}", i.dst, Cond::symbol(op))
            }
        },
        CLASS_LDX => format!(
            "r{} = *({} *)(r{} {:+})",
            i.dst,
            Size::from_code(i.code).c_type(),
            i.src,
            i.off
        ),
        CLASS_STX => format!(
            "*({} *)(r{} {:+}) = r{}",
            Size::from_code(i.code).c_type(),
            i.dst,
            i.off,
            i.src
        ),
        CLASS_ST => format!(
            "*({} *)(r{} {:+}) = {}",
            Size::from_code(i.code).c_type(),
            i.dst,
            i.off,
            i.imm
        ),
        _ => format!("(unknown opcode {:#04x})", i.code),
    }
}

/// The interpreter's view of an ALU operation, for tests: `a op b` with eBPF semantics (division
/// by zero gives 0, modulo zero leaves `a`, shifts use the low 6 bits of `b`).
pub fn eval_alu64(op: Alu, a: u64, b: u64) -> u64 {
    match op {
        Alu::Add => a.wrapping_add(b),
        Alu::Sub => a.wrapping_sub(b),
        Alu::Mul => a.wrapping_mul(b),
        Alu::Div => a.checked_div(b).unwrap_or(0),
        Alu::Or => a | b,
        Alu::And => a & b,
        Alu::Lsh => a << (b & 63),
        Alu::Rsh => a >> (b & 63),
        Alu::Mod => {
            if b == 0 {
                a
            } else {
                a % b
            }
        }
        Alu::Xor => a ^ b,
        Alu::Mov => b,
        Alu::Arsh => ((a as i64) >> (b & 63)) as u64,
    }
}

/// `a cond b` with eBPF semantics, for tests.
pub fn eval_cond(c: Cond, a: u64, b: u64) -> bool {
    let (sa, sb) = (a as i64, b as i64);
    match c {
        Cond::Eq => a == b,
        Cond::Gt => a > b,
        Cond::Ge => a >= b,
        Cond::Set => a & b != 0,
        Cond::Ne => a != b,
        Cond::Sgt => sa > sb,
        Cond::Sge => sa >= sb,
        Cond::Lt => a < b,
        Cond::Le => a <= b,
        Cond::Slt => sa < sb,
        Cond::Sle => sa <= sb,
    }
}

impl fmt::Display for Insn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_one(0, self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(f: impl FnOnce(&mut Asm)) -> [u8; 8] {
        let mut a = Asm::new();
        f(&mut a);
        a.insns[0].to_bytes()
    }

    /// Golden encodings, cross-checked against the kernel's `BPF_*` macros in
    /// `include/linux/filter.h` (e.g. `BPF_MOV64_IMM(BPF_REG_0, 0)` is `b7 00 00 00 00 00 00 00`)
    /// and against `llvm-objdump -d` of clang-built programs.
    #[test]
    fn golden_encodings() {
        assert_eq!(one(|a| a.mov64(R0, 0)), [0xb7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(one(|a| a.mov64(R6, R1)), [0xbf, 0x16, 0, 0, 0, 0, 0, 0]);
        assert_eq!(one(|a| a.exit()), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        // r2 = *(u32 *)(r1 + 4)
        assert_eq!(
            one(|a| a.load(Size::W, R2, R1, 4)),
            [0x61, 0x12, 4, 0, 0, 0, 0, 0]
        );
        // r3 = *(u16 *)(r2 + 12)
        assert_eq!(
            one(|a| a.load(Size::H, R3, R2, 12)),
            [0x69, 0x23, 12, 0, 0, 0, 0, 0]
        );
        // *(u64 *)(r10 - 8) = r1
        assert_eq!(
            one(|a| a.store(Size::DW, R10, -8, R1)),
            [0x7b, 0x1a, 0xf8, 0xff, 0, 0, 0, 0]
        );
        // *(u32 *)(r10 - 4) = 7
        assert_eq!(
            one(|a| a.store_imm(Size::W, R10, -4, 7)),
            [0x62, 0x0a, 0xfc, 0xff, 7, 0, 0, 0]
        );
        // r2 += -16
        assert_eq!(
            one(|a| a.add64(R2, -16)),
            [0x07, 0x02, 0, 0, 0xf0, 0xff, 0xff, 0xff]
        );
        // call bpf_map_lookup_elem
        assert_eq!(one(|a| a.call(1)), [0x85, 0, 0, 0, 1, 0, 0, 0]);
        // r1 = be16 r1
        assert_eq!(one(|a| a.to_be(R1, 16)), [0xdc, 0x01, 0, 0, 16, 0, 0, 0]);
        // w1 &= 0xff
        assert_eq!(
            one(|a| a.alu32(Alu::And, R1, 0xff)),
            [0x54, 0x01, 0, 0, 0xff, 0, 0, 0]
        );
        // r0 = -r0
        assert_eq!(one(|a| a.neg64(R0)), [0x87, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn wide_loads_take_two_slots() {
        let mut a = Asm::new();
        a.ld_map_fd(R1, 5);
        a.ld_imm64(R2, 0x1122_3344_5566_7788);
        let p = a.finish().unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(p[0].to_bytes(), [0x18, 0x11, 0, 0, 5, 0, 0, 0]);
        assert_eq!(p[1].to_bytes(), [0; 8]);
        assert_eq!(p[2].to_bytes(), [0x18, 0x02, 0, 0, 0x88, 0x77, 0x66, 0x55]);
        assert_eq!(p[3].to_bytes(), [0, 0, 0, 0, 0x44, 0x33, 0x22, 0x11]);
        let d = disassemble(&p);
        assert!(d.contains("r1 = map_fd(5)"), "{d}");
        assert!(d.contains("r2 = 0x1122334455667788 ll"), "{d}");
    }

    #[test]
    fn labels_resolve_forward_and_backward() {
        let mut a = Asm::new();
        let top = a.label();
        let end = a.label();
        a.bind(top);
        a.mov64(R0, 1); // 0
        a.jmp(Cond::Eq, R0, 0, end); // 1 -> 4: off 2
        a.ld_imm64(R1, 1); // 2, 3
        a.bind(end);
        a.ja(top); // 4 -> 0: off -5
        let p = a.finish().unwrap();
        assert_eq!(p[1].off, 2);
        assert_eq!(p[4].off, -5);
        assert_eq!(p[1].to_bytes(), [0x15, 0x00, 2, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn assembly_errors() {
        let mut a = Asm::new();
        let l = a.label();
        a.ja(l);
        assert_eq!(a.finish(), Err(AsmError::UnboundLabel(0)));
        assert_eq!(Asm::new().finish(), Err(AsmError::Empty));
        let mut a = Asm::new();
        let l = a.label();
        a.bind(l);
        a.exit();
        a.bind(l);
        assert_eq!(a.finish(), Err(AsmError::Rebound(0)));
        let mut a = Asm::new();
        let l = a.label();
        a.ja(l);
        for _ in 0..40_000 {
            a.exit();
        }
        a.bind(l);
        a.exit();
        assert!(matches!(a.finish(), Err(AsmError::TooFar { .. })));
    }

    #[test]
    fn bytes_round_trip_and_disassembly() {
        let mut a = Asm::new();
        let l = a.label();
        a.load(Size::B, R3, R7, 23);
        a.jmp(Cond::Ne, R3, 47, l);
        a.jmp32(Cond::Sgt, R3, R4, l);
        a.store(Size::H, R7, 12, R3);
        a.alu32(Alu::Arsh, R2, R5);
        a.bind(l);
        a.call(51);
        a.exit();
        let p = a.finish().unwrap();
        for i in &p {
            assert_eq!(Insn::from_bytes(i.to_bytes()), *i);
        }
        let d = disassemble(&p);
        for want in [
            "r3 = *(u8 *)(r7 +23)",
            "if r3 != 47 goto 5",
            "if w3 s> w4 goto 5",
            "*(u16 *)(r7 +12) = r3",
            "w2 s>>= w5",
            "call bpf_redirect_map",
            "exit",
        ] {
            assert!(d.contains(want), "missing {want:?} in\n{d}");
        }
        assert_eq!(to_bytes(&p).len(), p.len() * 8);
    }

    #[test]
    fn model_semantics() {
        assert_eq!(eval_alu64(Alu::Div, 7, 0), 0);
        assert_eq!(eval_alu64(Alu::Mod, 7, 0), 7);
        assert_eq!(eval_alu64(Alu::Arsh, u64::MAX << 4, 4), u64::MAX);
        assert!(eval_cond(Cond::Slt, u64::MAX, 0));
        assert!(!eval_cond(Cond::Lt, u64::MAX, 0));
    }
}
