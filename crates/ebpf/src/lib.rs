//! flowplane's eBPF programs, and the assembler, loader and attachment code that puts them in the
//! kernel — with no C compiler, no libbpf and no ELF files.
//!
//! Layer: **io** (docs/architecture.md): this crate makes system calls. It serves two parts of the live
//! system (Maglev §3.1 packet flow, §3.2 backends behind a GRE tunnel):
//!
//! * [`xsk`]: the XDP program that sends frames addressed to a VIP to the AF_XDP socket of their
//!   receive queue and everything else to the kernel, used by `fp_engine::afxdp`;
//! * [`decap`]: the tc ingress program that strips GRE / IP-in-IP on a backend (this kernel has no
//!   GRE or IPIP devices), installed by `flowplane backend`;
//! * [`shield`]: the tc ingress program that keeps frames addressed to a VIP away from the host's
//!   own stack while an AF_PACKET balancer receives them (its sockets are taps, served before tc
//!   ingress), used by `fp_engine::afpacket`.
//!
//! Building blocks:
//!
//! * [`asm`]: an eBPF assembler (ALU, jumps with labels, loads and stores, 64-bit immediates and
//!   map references, helper calls) and a disassembler in the verifier's syntax;
//! * [`map`], [`prog`]: `bpf(2)` maps and programs; a rejected program's error carries the
//!   verifier log; XDP and tcx attachment through BPF links (detached when dropped, or when the
//!   process dies);
//! * [`netlink`]: the tc `clsact` qdisc and direct-action `cls_bpf` filters, and XDP queries.
//!
//! Guarantees: every `unsafe` block is in [`sys`], where each system call wrapper checks the
//! lengths the kernel will use against the buffers it passes. Programs are checked by the kernel
//! verifier at load time and by `BPF_PROG_TEST_RUN` in this crate's tests (which need root:
//! they fail, saying so, without it). Attachments are owned: an [`xsk::XskRedirect`] and a
//! [`shield::VipShield`] detach on drop; the decap filter is explicitly persistent and removed
//! with [`decap::detach`].
//!
//! # Example
//!
//! ```
//! use fp_ebpf::asm::{disassemble, Asm, Cond, R0, R1};
//!
//! // Assemble a program (loading it needs root: `fp_ebpf::prog::Program::load`).
//! let mut a = Asm::new();
//! let done = a.label();
//! a.mov64(R0, 2); // XDP_PASS
//! a.jmp(Cond::Eq, R1, 0, done);
//! a.bind(done);
//! a.exit();
//! let prog = a.finish().unwrap();
//! assert_eq!(disassemble(&prog).lines().count(), 3);
//!
//! // The real programs are built the same way, around their maps' file descriptors.
//! let xdp = fp_ebpf::xsk::program(3, 4, 5).unwrap();
//! let tc = fp_ebpf::decap::program(fp_ebpf::decap::DecapConfig::ALL, 3).unwrap();
//! assert!(xdp.len() < 100 && tc.len() < 512);
//! ```
#![deny(unsafe_code)]

pub mod asm;
pub mod decap;
pub mod helper;
pub mod map;
pub mod netlink;
pub mod prog;
pub mod shield;
pub mod sys;
pub mod xsk;

use std::io;

pub use map::{Map, MapType};
pub use prog::{ProgType, Program, TcxLink, XdpLink, XdpMode};

/// What went wrong, and where.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed.
    #[error("{op}: {source}")]
    Sys {
        /// What was being done.
        op: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The verifier rejected a program.
    #[error("the kernel verifier rejected program {name}: {source}\n--- verifier log ---\n{log}")]
    Verifier {
        /// Program name.
        name: String,
        /// The load error (usually EACCES or EINVAL).
        #[source]
        source: io::Error,
        /// The verifier's log.
        log: String,
    },
    /// A netlink request failed.
    #[error("{op}: {source}{}", if message.is_empty() { String::new() } else { format!(" ({message})") })]
    Netlink {
        /// What was being done.
        op: String,
        /// The kernel's extended-ack message, if any.
        message: String,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// A program did not assemble (a bug in the program text).
    #[error("assembling program {name}: {source}")]
    Asm {
        /// Program name.
        name: String,
        /// Why.
        #[source]
        source: asm::AsmError,
    },
    /// Bad arguments.
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    fn sys(op: impl Into<String>, source: io::Error) -> Error {
        Error::Sys {
            op: op.into(),
            source,
        }
    }

    /// The errno behind the error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Sys { source, .. }
            | Error::Verifier { source, .. }
            | Error::Netlink { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// The same error with `op` prefixed to its description.
    pub fn context(self, op: impl std::fmt::Display) -> Error {
        match self {
            Error::Sys { op: o, source } => Error::Sys {
                op: format!("{op}: {o}"),
                source,
            },
            Error::Netlink {
                op: o,
                message,
                source,
            } => Error::Netlink {
                op: format!("{op}: {o}"),
                message,
                source,
            },
            Error::Invalid(s) => Error::Invalid(format!("{op}: {s}")),
            e => e,
        }
    }
}

/// Result with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Index of interface `name` in the calling thread's network namespace.
pub fn ifindex(name: &str) -> Result<u32> {
    sys::if_nametoindex(name).map_err(|e| Error::sys(format!("interface {name:?}"), e))
}

/// Why this process cannot load eBPF programs, if it cannot (not root). Tests print it and fail.
pub fn privilege_problem() -> Option<String> {
    (sys::euid() != 0).then(|| {
        format!(
            "not running as root (euid {}): loading eBPF programs and attaching them needs \
             CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON",
            sys::euid()
        )
    })
}
