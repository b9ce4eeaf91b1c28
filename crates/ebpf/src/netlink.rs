//! rtnetlink requests for what `bpf(2)` cannot do alone: the tc `clsact` qdisc and `cls_bpf`
//! direct-action filters (the backend's decapsulation program), and reading which XDP program an
//! interface runs.
//!
//! Why netlink for tc and not the `tc` command: `tc filter add ... bpf` wants an ELF object file or
//! a program pinned in a mounted bpffs, and this crate has neither (its programs are assembled in
//! memory, and bpffs is not mounted on every host). A netlink request passes the program's file
//! descriptor directly; the filter then holds its own reference to the program, so the
//! decapsulation survives the command that installed it. Errors carry the kernel's extended-ack
//! message (e.g. "Exclusivity flag on, cannot modify").
//!
//! Messages are built into a byte vector with the standard layout (`nlmsghdr`, a fixed header such
//! as `tcmsg`, then 4-byte-aligned attributes) and parsed the same way.

use crate::{sys, Error, Result};
use std::io;
use std::os::fd::{AsFd, OwnedFd};

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLA_F_NESTED: u16 = 0x8000;

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWQDISC: u16 = 36;
const RTM_DELQDISC: u16 = 37;
const RTM_NEWTFILTER: u16 = 44;
const RTM_DELTFILTER: u16 = 45;
const RTM_GETTFILTER: u16 = 46;

const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_BPF_FD: u16 = 6;
const TCA_BPF_NAME: u16 = 7;
const TCA_BPF_FLAGS: u16 = 8;
const TCA_BPF_ID: u16 = 11;
const TCA_BPF_FLAG_ACT_DIRECT: u32 = 1;

const IFLA_XDP: u16 = 43;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_PROG_ID: u16 = 4;

/// `TC_H_CLSACT` (= `TC_H_INGRESS`): the clsact qdisc's parent.
const TC_H_CLSACT: u32 = 0xFFFF_FFF1;
/// The clsact qdisc's handle, `ffff:`.
const CLSACT_HANDLE: u32 = 0xFFFF_0000;
/// Parent of ingress filters under clsact, `ffff:fff2`.
const TC_H_INGRESS_PARENT: u32 = 0xFFFF_FFF2;
/// Parent of egress filters under clsact, `ffff:fff3`.
const TC_H_EGRESS_PARENT: u32 = 0xFFFF_FFF3;
const ETH_P_ALL: u16 = 0x0003;

/// A message under construction.
struct Msg {
    buf: Vec<u8>,
    nests: Vec<usize>,
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

impl Msg {
    fn new(kind: u16, flags: u16, seq: u32) -> Msg {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set by finish
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it
        Msg {
            buf,
            nests: Vec::new(),
        }
    }

    fn bytes(&mut self, b: &[u8]) -> &mut Msg {
        self.buf.extend_from_slice(b);
        self.buf.resize(align4(self.buf.len()), 0);
        self
    }

    fn attr(&mut self, kind: u16, payload: &[u8]) -> &mut Msg {
        let len = (4 + payload.len()) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.bytes(payload)
    }

    fn attr_u32(&mut self, kind: u16, v: u32) -> &mut Msg {
        self.attr(kind, &v.to_ne_bytes())
    }

    fn attr_str(&mut self, kind: u16, s: &str) -> &mut Msg {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.attr(kind, &v)
    }

    fn begin(&mut self, kind: u16) -> &mut Msg {
        self.nests.push(self.buf.len());
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        self
    }

    fn end(&mut self) -> &mut Msg {
        let at = self.nests.pop().expect("end without begin");
        let len = (self.buf.len() - at) as u16;
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    fn finish(&mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        std::mem::take(&mut self.buf)
    }
}

/// `struct tcmsg`.
fn tcmsg(ifindex: u32, handle: u32, parent: u32, info: u32) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    b[8..12].copy_from_slice(&handle.to_ne_bytes());
    b[12..16].copy_from_slice(&parent.to_ne_bytes());
    b[16..20].copy_from_slice(&info.to_ne_bytes());
    b
}

/// `struct ifinfomsg`.
fn ifinfomsg(ifindex: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    b
}

/// Iterate over attributes in `b`: (type without flags, payload).
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let kind = u16::from_ne_bytes([b[2], b[3]]) & 0x3FFF;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        b = &b[align4(len).min(b.len())..];
        Some((kind, payload))
    })
}

fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.get(..4)?.try_into().ok()?))
}

/// One rtnetlink socket in the calling thread's network namespace.
pub struct Netlink {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

/// A netlink error: the errno and the kernel's message, if it gave one.
#[derive(Debug)]
struct NlError {
    errno: i32,
    message: String,
}

impl Netlink {
    /// Open a `NETLINK_ROUTE` socket.
    pub fn open() -> Result<Netlink> {
        let fd = sys::netlink_socket(libc::NETLINK_ROUTE)
            .map_err(|e| Error::sys("opening a netlink socket", e))?;
        Ok(Netlink {
            fd,
            seq: 1,
            buf: vec![0u8; 64 << 10],
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Send `msg` and collect the replies with its sequence number until the ack (or, without
    /// `NLM_F_ACK`, until the first reply). Returns the non-error replies.
    fn transact(
        &mut self,
        msg: &[u8],
        seq: u32,
        want_ack: bool,
    ) -> std::result::Result<Vec<Vec<u8>>, NlError> {
        let io_err = |e: io::Error| NlError {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            message: e.to_string(),
        };
        sys::netlink_send(self.fd.as_fd(), msg).map_err(io_err)?;
        let mut replies = Vec::new();
        loop {
            let n = sys::netlink_recv(self.fd.as_fd(), &mut self.buf).map_err(io_err)?;
            let mut b = &self.buf[..n];
            while b.len() >= 16 {
                let len = u32::from_ne_bytes(b[0..4].try_into().expect("4 bytes")) as usize;
                let kind = u16::from_ne_bytes([b[4], b[5]]);
                let flags = u16::from_ne_bytes([b[6], b[7]]);
                let mseq = u32::from_ne_bytes(b[8..12].try_into().expect("4 bytes"));
                if len < 16 || len > b.len() {
                    break;
                }
                let m = &b[..len];
                b = &b[align4(len).min(b.len())..];
                if mseq != seq {
                    continue; // a stale reply to an earlier request
                }
                match kind {
                    NLMSG_ERROR => {
                        let errno = i32::from_ne_bytes(
                            m.get(16..20)
                                .ok_or(NlError {
                                    errno: libc::EIO,
                                    message: "short netlink error".into(),
                                })?
                                .try_into()
                                .expect("4 bytes"),
                        );
                        if errno == 0 {
                            return Ok(replies);
                        }
                        let mut message = String::new();
                        if flags & NLM_F_ACK_TLVS != 0 && m.len() > 36 {
                            // error code, then the capped request header (16 bytes), then TLVs.
                            for (k, p) in attrs(&m[36..]) {
                                if k == NLMSGERR_ATTR_MSG {
                                    let end = p.iter().position(|&c| c == 0).unwrap_or(p.len());
                                    message = String::from_utf8_lossy(&p[..end]).into_owned();
                                }
                            }
                        }
                        return Err(NlError {
                            errno: -errno,
                            message,
                        });
                    }
                    NLMSG_DONE => return Ok(replies),
                    _ => {
                        replies.push(m.to_vec());
                        if !want_ack {
                            return Ok(replies);
                        }
                    }
                }
            }
        }
    }

    fn request(&mut self, msg: &mut Msg) -> std::result::Result<(), NlError> {
        let bytes = msg.finish();
        let seq = u32::from_ne_bytes(bytes[8..12].try_into().expect("4 bytes"));
        self.transact(&bytes, seq, true).map(drop)
    }

    /// Add a `clsact` qdisc to `ifindex`. Returns false if one was already there.
    pub fn clsact_add(&mut self, ifindex: u32) -> Result<bool> {
        let seq = self.next_seq();
        let mut m = Msg::new(
            RTM_NEWQDISC,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            seq,
        );
        m.bytes(&tcmsg(ifindex, CLSACT_HANDLE, TC_H_CLSACT, 0))
            .attr_str(TCA_KIND, "clsact");
        match self.request(&mut m) {
            Ok(()) => Ok(true),
            Err(e) if e.errno == libc::EEXIST => Ok(false),
            Err(e) => Err(nl_error(
                format!("adding a clsact qdisc to ifindex {ifindex}"),
                e,
            )),
        }
    }

    /// Remove the `clsact` qdisc of `ifindex` (and with it every tc filter under it). Returns
    /// false if there was none.
    pub fn clsact_del(&mut self, ifindex: u32) -> Result<bool> {
        let seq = self.next_seq();
        let mut m = Msg::new(RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK, seq);
        m.bytes(&tcmsg(ifindex, CLSACT_HANDLE, TC_H_CLSACT, 0))
            .attr_str(TCA_KIND, "clsact");
        match self.request(&mut m) {
            Ok(()) => Ok(true),
            Err(e) if e.errno == libc::ENOENT || e.errno == libc::EINVAL => Ok(false),
            Err(e) => Err(nl_error(
                format!("removing the clsact qdisc of ifindex {ifindex}"),
                e,
            )),
        }
    }

    fn filter_msg(&mut self, kind: u16, flags: u16, f: &TcFilter) -> Msg {
        let seq = self.next_seq();
        let parent = if f.ingress {
            TC_H_INGRESS_PARENT
        } else {
            TC_H_EGRESS_PARENT
        };
        let info = ((f.prio as u32) << 16) | ETH_P_ALL.to_be() as u32;
        let mut m = Msg::new(kind, flags, seq);
        m.bytes(&tcmsg(f.ifindex, f.handle, parent, info))
            .attr_str(TCA_KIND, "bpf");
        m
    }

    /// Attach `prog_fd` as a direct-action `cls_bpf` filter described by `f` (replacing a filter
    /// with the same priority and handle). The `clsact` qdisc must exist.
    pub fn filter_add(&mut self, f: &TcFilter, prog_fd: i32, name: &str) -> Result<()> {
        let mut m = self.filter_msg(
            RTM_NEWTFILTER,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
            f,
        );
        m.begin(TCA_OPTIONS)
            .attr_u32(TCA_BPF_FD, prog_fd as u32)
            .attr_str(TCA_BPF_NAME, name)
            .attr_u32(TCA_BPF_FLAGS, TCA_BPF_FLAG_ACT_DIRECT)
            .end();
        self.request(&mut m).map_err(|e| {
            nl_error(
                format!(
                    "attaching tc {} filter {name} to ifindex {}",
                    f.direction(),
                    f.ifindex
                ),
                e,
            )
        })
    }

    /// Remove the filter `f`. Returns false if it was not there.
    pub fn filter_del(&mut self, f: &TcFilter) -> Result<bool> {
        let mut m = self.filter_msg(RTM_DELTFILTER, NLM_F_REQUEST | NLM_F_ACK, f);
        match self.request(&mut m) {
            Ok(()) => Ok(true),
            Err(e) if e.errno == libc::ENOENT || e.errno == libc::EINVAL => Ok(false),
            Err(e) => Err(nl_error(
                format!(
                    "removing tc {} filter from ifindex {}",
                    f.direction(),
                    f.ifindex
                ),
                e,
            )),
        }
    }

    /// The id of the program in filter `f`, or `None` if there is no such filter (or no clsact).
    pub fn filter_prog_id(&mut self, f: &TcFilter) -> Result<Option<u32>> {
        let mut m = self.filter_msg(RTM_GETTFILTER, NLM_F_REQUEST, f);
        let bytes = m.finish();
        let seq = u32::from_ne_bytes(bytes[8..12].try_into().expect("4 bytes"));
        let replies = match self.transact(&bytes, seq, false) {
            Ok(r) => r,
            Err(e) if e.errno == libc::ENOENT || e.errno == libc::EINVAL => return Ok(None),
            Err(e) => {
                return Err(nl_error(
                    format!("reading tc filters of ifindex {}", f.ifindex),
                    e,
                ))
            }
        };
        for r in replies {
            // nlmsghdr (16) + tcmsg (20), then attributes.
            for (k, p) in attrs(r.get(36..).unwrap_or(&[])) {
                if k == TCA_OPTIONS {
                    for (k2, p2) in attrs(p) {
                        if k2 == TCA_BPF_ID {
                            return Ok(u32_of(p2));
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// Which XDP program `ifindex` runs: `(attach mode, program id)` or `None`. Modes are the
    /// kernel's `XDP_ATTACHED_*`: 1 driver, 2 generic (skb), 3 hardware, 4 several.
    pub fn xdp_query(&mut self, ifindex: u32) -> Result<Option<(u8, u32)>> {
        let seq = self.next_seq();
        let mut m = Msg::new(RTM_GETLINK, NLM_F_REQUEST, seq);
        m.bytes(&ifinfomsg(ifindex));
        let bytes = m.finish();
        let replies = self
            .transact(&bytes, seq, false)
            .map_err(|e| nl_error(format!("reading link ifindex {ifindex}"), e))?;
        for r in replies {
            if u16::from_ne_bytes([r[4], r[5]]) != RTM_NEWLINK {
                continue;
            }
            // nlmsghdr (16) + ifinfomsg (16), then attributes.
            for (k, p) in attrs(r.get(32..).unwrap_or(&[])) {
                if k == IFLA_XDP {
                    let mut mode = 0u8;
                    let mut id = 0u32;
                    for (k2, p2) in attrs(p) {
                        match k2 {
                            IFLA_XDP_ATTACHED => mode = p2.first().copied().unwrap_or(0),
                            IFLA_XDP_PROG_ID => id = u32_of(p2).unwrap_or(0),
                            _ => {}
                        }
                    }
                    return Ok((mode != 0).then_some((mode, id)));
                }
            }
        }
        Ok(None)
    }
}

fn nl_error(op: String, e: NlError) -> Error {
    Error::Netlink {
        op,
        message: e.message,
        source: io::Error::from_raw_os_error(e.errno),
    }
}

/// Where a `cls_bpf` filter sits: interface, direction, priority and handle identify it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TcFilter {
    /// Interface index.
    pub ifindex: u32,
    /// Ingress (true) or egress.
    pub ingress: bool,
    /// Filter priority (lower runs first).
    pub prio: u16,
    /// Filter handle.
    pub handle: u32,
}

impl TcFilter {
    fn direction(&self) -> &'static str {
        if self.ingress {
            "ingress"
        } else {
            "egress"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_layout() {
        let mut m = Msg::new(RTM_NEWTFILTER, NLM_F_REQUEST, 7);
        m.bytes(&tcmsg(3, 1, TC_H_INGRESS_PARENT, 0))
            .attr_str(TCA_KIND, "bpf")
            .begin(TCA_OPTIONS)
            .attr_u32(TCA_BPF_FD, 9)
            .end();
        let b = m.finish();
        assert_eq!(
            u32::from_ne_bytes(b[0..4].try_into().unwrap()) as usize,
            b.len()
        );
        assert_eq!(b.len() % 4, 0);
        // header 16 + tcmsg 20 + kind (4 + "bpf\0") 8 + nest 4 + fd attr 8
        assert_eq!(b.len(), 16 + 20 + 8 + 4 + 8);
        let parsed: Vec<_> = attrs(&b[36..]).collect();
        assert_eq!(parsed[0], (TCA_KIND, &b"bpf\0"[..]));
        assert_eq!(parsed[1].0, TCA_OPTIONS);
        let inner: Vec<_> = attrs(parsed[1].1).collect();
        assert_eq!(inner, vec![(TCA_BPF_FD, &9u32.to_ne_bytes()[..])]);
    }

    #[test]
    fn attrs_stop_on_garbage() {
        assert_eq!(attrs(&[1, 0, 0]).count(), 0);
        assert_eq!(attrs(&[2, 0, 1, 0]).count(), 0); // length below the header
        assert_eq!(attrs(&[40, 0, 1, 0, 0, 0]).count(), 0); // longer than the buffer
    }
}
