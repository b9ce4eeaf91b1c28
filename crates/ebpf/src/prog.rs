//! Loading programs (`BPF_PROG_LOAD`, with the verifier's log in the error when it rejects one),
//! running them on test packets (`BPF_PROG_TEST_RUN`), and attaching XDP and tcx programs with a
//! BPF link.
//!
//! XDP attachment uses `BPF_LINK_CREATE` rather than netlink's `IFLA_XDP`: a link belongs to its
//! file descriptor, so the program is detached when the owner drops it *or dies* (a crashed
//! balancer leaves no stale program behind steering VIP traffic into a closed socket), and the
//! kernel refuses (`EBUSY`) to attach over a program someone else attached, instead of silently
//! replacing it. tc programs that belong to a running process (the AF_PACKET port's VIP shield,
//! [`crate::shield`]) attach the same way through a tcx link ([`TcxLink`], Linux ≥ 6.6), which
//! runs them before the classic tc filters and keeps them beside other programs instead of
//! replacing them. The tc decapsulation program uses netlink instead (see [`crate::netlink`]),
//! because it must outlive the command that installs it.

use crate::asm::{self, Insn};
use crate::{sys, Error, Result};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Program types flowplane loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProgType {
    /// `BPF_PROG_TYPE_SCHED_CLS`: tc classifier (direct action).
    SchedCls,
    /// `BPF_PROG_TYPE_XDP`.
    Xdp,
}

impl ProgType {
    fn raw(self) -> u32 {
        match self {
            ProgType::SchedCls => 3,
            ProgType::Xdp => 6,
        }
    }
    fn expected_attach_type(self) -> u32 {
        match self {
            ProgType::SchedCls => 0,
            ProgType::Xdp => BPF_XDP,
        }
    }
}

/// `BPF_XDP` in `enum bpf_attach_type`.
const BPF_XDP: u32 = 37;
/// `BPF_TCX_INGRESS` in `enum bpf_attach_type`.
const BPF_TCX_INGRESS: u32 = 46;
/// `BPF_TCX_EGRESS` in `enum bpf_attach_type`.
const BPF_TCX_EGRESS: u32 = 47;

/// The license declared to the kernel. None of the helpers used is GPL-only.
pub const LICENSE: &str = "MIT OR Apache-2.0";

/// Verifier log buffer on failure. Since Linux 6.4 the log is a ring that keeps its end, where the
/// reason for a rejection is.
const LOG_SIZE: usize = 1 << 20;

/// A loaded program, owned through its file descriptor.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
    name: String,
    prog_type: ProgType,
    insns: usize,
}

impl Program {
    /// Load `insns` as a program of `prog_type` named `name`. On rejection the error carries the
    /// verifier's log.
    pub fn load(prog_type: ProgType, name: &str, insns: &[Insn]) -> Result<Program> {
        let bytes = asm::to_bytes(insns);
        let first = sys::prog_load(
            prog_type.raw(),
            &bytes,
            LICENSE,
            name,
            prog_type.expected_attach_type(),
            None,
        );
        let err = match first {
            Ok(fd) => {
                return Ok(Program {
                    fd,
                    name: name.into(),
                    prog_type,
                    insns: insns.len(),
                })
            }
            Err(e) => e,
        };
        if err.raw_os_error() == Some(libc::EPERM) {
            return Err(Error::sys(
                format!("loading program {name} (needs root, or CAP_BPF and CAP_NET_ADMIN)"),
                err,
            ));
        }
        // Load again with the log on to explain the failure.
        let mut log = vec![0u8; LOG_SIZE];
        let again = sys::prog_load(
            prog_type.raw(),
            &bytes,
            LICENSE,
            name,
            prog_type.expected_attach_type(),
            Some((&mut log, 1)),
        );
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]).into_owned();
        match again {
            Ok(fd) => Ok(Program {
                fd,
                name: name.into(),
                prog_type,
                insns: insns.len(),
            }),
            Err(_) => Err(Error::Verifier {
                name: name.into(),
                source: err,
                log: text,
            }),
        }
    }

    /// A program another process loaded and passed over (`SCM_RIGHTS`): `fd` refers to it,
    /// `name` and `prog_type` are what that process said it is.
    pub fn from_fd(fd: OwnedFd, prog_type: ProgType, name: &str) -> Program {
        Program {
            fd,
            name: name.into(),
            prog_type,
            insns: 0,
        }
    }

    /// The name given at load time.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The program type.
    pub fn prog_type(&self) -> ProgType {
        self.prog_type
    }

    /// Instruction slots.
    pub fn len(&self) -> usize {
        self.insns
    }

    /// Never true for a loaded program (present for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.insns == 0
    }

    /// The file descriptor.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The kernel's description (id, name, maps).
    pub fn info(&self) -> Result<sys::ProgInfo> {
        sys::prog_info(self.fd.as_fd())
            .map_err(|e| Error::sys(format!("reading info of program {}", self.name), e))
    }

    /// Run the program once on `data` in the kernel (`BPF_PROG_TEST_RUN`). Returns the return
    /// value and the packet as the program left it. Needs a packet of at least 14 bytes.
    pub fn test_run(&self, data: &[u8]) -> Result<(u32, Vec<u8>)> {
        let mut out = vec![0u8; data.len() + 256];
        let r = sys::prog_test_run(self.fd.as_fd(), data, &mut out, 1)
            .map_err(|e| Error::sys(format!("test run of program {}", self.name), e))?;
        out.truncate(r.data_len.min(out.len()));
        Ok((r.retval, out))
    }

    /// Run the program `repeat` times on `data` and return the mean time per run in ns (the
    /// kernel's own measurement).
    pub fn bench(&self, data: &[u8], repeat: u32) -> Result<u32> {
        let mut out = vec![0u8; data.len() + 256];
        let r = sys::prog_test_run(self.fd.as_fd(), data, &mut out, repeat)
            .map_err(|e| Error::sys(format!("test run of program {}", self.name), e))?;
        Ok(r.duration_ns)
    }
}

impl AsFd for Program {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Where an XDP program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XdpMode {
    /// In the driver, before an skb exists (`XDP_FLAGS_DRV_MODE`). Fast; veth supports it.
    Native,
    /// On the skb, after the driver (`XDP_FLAGS_SKB_MODE`). Works on every device, slower.
    Generic,
}

impl XdpMode {
    fn flags(self) -> u32 {
        match self {
            XdpMode::Native => 1 << 2,
            XdpMode::Generic => 1 << 1,
        }
    }
}

impl std::fmt::Display for XdpMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        })
    }
}

/// An XDP program attached to an interface through a BPF link: detached when dropped (or when
/// the process exits). Dropping detaches explicitly (`BPF_LINK_DETACH`) rather than relying on the
/// last close of the link: a child process forked by another thread holds a copy of the
/// descriptor until it calls exec, which would otherwise delay the detachment.
#[derive(Debug)]
pub struct XdpLink {
    fd: OwnedFd,
    ifindex: u32,
    mode: XdpMode,
    /// False once [`XdpLink::leave_attached`] gave the attachment up to another holder.
    detach: bool,
}

impl XdpLink {
    /// Attach `prog` to interface `ifindex` (in the calling thread's network namespace) in `mode`.
    /// Fails with `EBUSY` if another XDP program is attached in that mode.
    pub fn attach(prog: &Program, ifindex: u32, mode: XdpMode) -> Result<XdpLink> {
        if prog.prog_type != ProgType::Xdp {
            return Err(Error::Invalid(format!(
                "program {} is not an XDP program",
                prog.name
            )));
        }
        let fd = sys::link_create(prog.as_fd(), ifindex, BPF_XDP, mode.flags()).map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::EBUSY) | Some(libc::EEXIST) => {
                    " (another XDP program is attached to the interface; remove it first)"
                }
                Some(libc::EOPNOTSUPP) => " (the driver has no native XDP; use generic mode)",
                _ => "",
            };
            Error::sys(
                format!(
                    "attaching XDP program {} to ifindex {ifindex} in {mode} mode{hint}",
                    prog.name
                ),
                e,
            )
        })?;
        Ok(XdpLink {
            fd,
            ifindex,
            mode,
            detach: true,
        })
    }

    /// A link another process created and passed over (`SCM_RIGHTS`), attached to `ifindex` in
    /// `mode`: from now on this value detaches it when dropped.
    pub fn from_fd(fd: OwnedFd, ifindex: u32, mode: XdpMode) -> XdpLink {
        XdpLink {
            fd,
            ifindex,
            mode,
            detach: true,
        }
    }

    /// Drop this handle without detaching: the program stays attached as long as another
    /// descriptor of the link (passed to another process) stays open.
    pub fn leave_attached(mut self) {
        self.detach = false;
    }

    /// The interface.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The mode it runs in.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// The link's descriptor.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The link's descriptor, borrowed (to duplicate it for another process).
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for XdpLink {
    fn drop(&mut self) {
        // Fails only if the interface is already gone (the kernel then detached it itself).
        if self.detach {
            let _ = sys::link_detach(self.fd.as_fd());
        }
    }
}

/// A tc (`SCHED_CLS`) program attached to an interface's ingress or egress through a tcx BPF link
/// (`BPF_LINK_CREATE` with `BPF_TCX_INGRESS` / `BPF_TCX_EGRESS`, Linux ≥ 6.6): detached when
/// dropped, or when the process exits, like [`XdpLink`]. It runs before the classic tc filters of
/// a `clsact` qdisc; it returns the [`crate::helper::tcx`] codes. Other tcx programs on the
/// interface stay (this one is appended after them).
#[derive(Debug)]
pub struct TcxLink {
    fd: OwnedFd,
    ifindex: u32,
    ingress: bool,
}

impl TcxLink {
    /// Attach `prog` to the ingress (or egress) of interface `ifindex` (in the calling thread's
    /// network namespace). Kernels before 6.6 refuse with `EINVAL`.
    pub fn attach(prog: &Program, ifindex: u32, ingress: bool) -> Result<TcxLink> {
        if prog.prog_type != ProgType::SchedCls {
            return Err(Error::Invalid(format!(
                "program {} is not a tc (SCHED_CLS) program",
                prog.name
            )));
        }
        let (attach_type, dir) = if ingress {
            (BPF_TCX_INGRESS, "ingress")
        } else {
            (BPF_TCX_EGRESS, "egress")
        };
        let fd = sys::link_create(prog.as_fd(), ifindex, attach_type, 0).map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::EINVAL) => " (tcx links need Linux 6.6 or later)",
                _ => "",
            };
            Error::sys(
                format!(
                    "attaching tc program {} to the {dir} of ifindex {ifindex} with a tcx link{hint}",
                    prog.name
                ),
                e,
            )
        })?;
        Ok(TcxLink {
            fd,
            ifindex,
            ingress,
        })
    }

    /// The interface.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Ingress (true) or egress.
    pub fn ingress(&self) -> bool {
        self.ingress
    }

    /// The link's descriptor.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

impl Drop for TcxLink {
    fn drop(&mut self) {
        // Explicit, for the same reason as XdpLink's: a forked child may hold a copy of the
        // descriptor. Fails only if the interface is already gone.
        let _ = sys::link_detach(self.fd.as_fd());
    }
}
