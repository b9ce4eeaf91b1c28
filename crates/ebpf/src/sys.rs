//! Every system call the crate makes: `bpf(2)` with the attribute layouts of the commands used,
//! netlink sockets, interface lookup. All `unsafe` of the crate is here; each function checks what
//! the kernel will read or write through the pointers it passes (buffer lengths against the sizes
//! the kernel uses) so that the functions themselves are safe to call.
//!
//! The `bpf_attr` structures are declared per command, `#[repr(C)]`, and passed with their own
//! size: the kernel treats the bytes beyond a shorter `size` as zero (`bpf_check_uarg_tail_zero`),
//! so each command needs only the fields it uses.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

// bpf(2) commands.
const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_LOOKUP_ELEM: u32 = 1;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_MAP_DELETE_ELEM: u32 = 3;
const BPF_MAP_GET_NEXT_KEY: u32 = 4;
const BPF_PROG_LOAD: u32 = 5;
const BPF_PROG_TEST_RUN: u32 = 10;
const BPF_PROG_GET_FD_BY_ID: u32 = 13;
const BPF_MAP_GET_FD_BY_ID: u32 = 14;
const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
const BPF_LINK_CREATE: u32 = 28;
const BPF_LINK_DETACH: u32 = 34;

/// Longest object name the kernel stores (`BPF_OBJ_NAME_LEN` with the NUL).
pub const OBJ_NAME_LEN: usize = 16;

fn obj_name(name: &str) -> [u8; OBJ_NAME_LEN] {
    let mut out = [0u8; OBJ_NAME_LEN];
    // Object names may hold only [A-Za-z0-9_.]; the kernel rejects others with EINVAL.
    for (o, b) in out.iter_mut().zip(name.bytes().take(OBJ_NAME_LEN - 1)) {
        *o = if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' {
            b
        } else {
            b'_'
        };
    }
    out
}

/// Call `bpf(cmd, attr, size_of::<T>())`.
///
/// # Safety
/// `T` must be the `bpf_attr` layout of `cmd` (a prefix of it), and every pointer stored in `attr`
/// must be valid for the reads and writes the kernel makes for `cmd` with the lengths also stored
/// in `attr`, for the duration of the call.
unsafe fn bpf<T>(cmd: u32, attr: &mut T) -> io::Result<i64> {
    // SAFETY: the caller guarantees `attr` is a valid attribute block for `cmd`; `attr` itself is
    // a live exclusive reference of `size_of::<T>()` bytes.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut T as *mut libc::c_void,
            size_of::<T>() as libc::c_long,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn fd_from(r: i64) -> OwnedFd {
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(r as i32) }
}

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; OBJ_NAME_LEN],
    map_ifindex: u32,
}

/// `BPF_MAP_CREATE`.
pub fn map_create(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    flags: u32,
    name: &str,
) -> io::Result<OwnedFd> {
    let mut a = MapCreateAttr {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_flags: flags,
        map_name: obj_name(name),
        ..Default::default()
    };
    // SAFETY: the layout is the MAP_CREATE prefix of bpf_attr; it holds no pointers.
    unsafe { bpf(BPF_MAP_CREATE, &mut a) }.map(fd_from)
}

#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Sizes of a map's elements as the kernel copies them: key bytes and value bytes (for per-CPU
/// maps, the value of every possible CPU, each rounded up to 8 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElemSizes {
    /// Key bytes.
    pub key: usize,
    /// Value bytes as user space sees them.
    pub value: usize,
}

fn check_len(what: &str, got: usize, want: usize) -> io::Result<()> {
    if got != want {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("map {what} is {got} bytes, the map's is {want}"),
        ));
    }
    Ok(())
}

/// `BPF_MAP_UPDATE_ELEM`.
pub fn map_update(
    fd: BorrowedFd<'_>,
    sizes: ElemSizes,
    key: &[u8],
    value: &[u8],
    flags: u64,
) -> io::Result<()> {
    check_len("key", key.len(), sizes.key)?;
    check_len("value", value.len(), sizes.value)?;
    let mut a = MapElemAttr {
        map_fd: fd.as_raw_fd() as u32,
        _pad: 0,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        flags,
    };
    // SAFETY: the kernel reads `sizes.key` bytes at `key` and `sizes.value` bytes at `value`,
    // both checked against the slices above; the slices outlive the call.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut a) }.map(drop)
}

/// `BPF_MAP_LOOKUP_ELEM`: fills `value`; `Ok(false)` if the key is absent.
pub fn map_lookup(
    fd: BorrowedFd<'_>,
    sizes: ElemSizes,
    key: &[u8],
    value: &mut [u8],
) -> io::Result<bool> {
    check_len("key", key.len(), sizes.key)?;
    check_len("value", value.len(), sizes.value)?;
    let mut a = MapElemAttr {
        map_fd: fd.as_raw_fd() as u32,
        _pad: 0,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        flags: 0,
    };
    // SAFETY: the kernel reads `sizes.key` bytes at `key` and writes `sizes.value` bytes at
    // `value`; both lengths were checked and `value` is exclusively borrowed for the call.
    match unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut a) } {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `BPF_MAP_DELETE_ELEM`: `Ok(false)` if the key was absent.
pub fn map_delete(fd: BorrowedFd<'_>, sizes: ElemSizes, key: &[u8]) -> io::Result<bool> {
    check_len("key", key.len(), sizes.key)?;
    let mut a = MapElemAttr {
        map_fd: fd.as_raw_fd() as u32,
        _pad: 0,
        key: key.as_ptr() as u64,
        value: 0,
        flags: 0,
    };
    // SAFETY: the kernel reads `sizes.key` bytes at `key`, checked above.
    match unsafe { bpf(BPF_MAP_DELETE_ELEM, &mut a) } {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `BPF_MAP_GET_NEXT_KEY`: the key after `key` (the first key if `key` is `None`) into `next`;
/// `Ok(false)` at the end.
pub fn map_next_key(
    fd: BorrowedFd<'_>,
    sizes: ElemSizes,
    key: Option<&[u8]>,
    next: &mut [u8],
) -> io::Result<bool> {
    if let Some(k) = key {
        check_len("key", k.len(), sizes.key)?;
    }
    check_len("key", next.len(), sizes.key)?;
    let mut a = MapElemAttr {
        map_fd: fd.as_raw_fd() as u32,
        _pad: 0,
        key: key.map_or(0, |k| k.as_ptr() as u64),
        value: next.as_mut_ptr() as u64,
        flags: 0,
    };
    // SAFETY: the kernel reads `sizes.key` bytes at `key` (or nothing for NULL) and writes as
    // many at `next`; both lengths were checked.
    match unsafe { bpf(BPF_MAP_GET_NEXT_KEY, &mut a) } {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; OBJ_NAME_LEN],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `BPF_PROG_LOAD` of `insns` (encoded instructions, 8 bytes each). With `log`, the verifier
/// writes its log there (level 1 for a failure's explanation, 2 for statistics).
pub fn prog_load(
    prog_type: u32,
    insns: &[u8],
    license: &str,
    name: &str,
    expected_attach_type: u32,
    log: Option<(&mut [u8], u32)>,
) -> io::Result<OwnedFd> {
    if insns.is_empty() || !insns.len().is_multiple_of(8) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "program length is not a positive multiple of 8",
        ));
    }
    let license = CString::new(license)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in license"))?;
    let mut a = ProgLoadAttr {
        prog_type,
        insn_cnt: (insns.len() / 8) as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: obj_name(name),
        expected_attach_type,
        ..Default::default()
    };
    if let Some((buf, level)) = log {
        if !buf.is_empty() {
            a.log_level = level;
            a.log_size = buf.len().min(u32::MAX as usize) as u32;
            a.log_buf = buf.as_mut_ptr() as u64;
        }
    }
    // SAFETY: the kernel reads `insn_cnt * 8` bytes at `insns` (= insns.len()), the
    // NUL-terminated license, and writes at most `log_size` (<= buf.len()) bytes to the log
    // buffer, which is exclusively borrowed for the call.
    unsafe { bpf(BPF_PROG_LOAD, &mut a) }.map(fd_from)
}

#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

/// What `BPF_PROG_TEST_RUN` returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestRunOut {
    /// The program's return value.
    pub retval: u32,
    /// Bytes of packet written to `data_out` (the packet's length after the program).
    pub data_len: usize,
    /// Mean run time per repetition in ns.
    pub duration_ns: u32,
}

/// `BPF_PROG_TEST_RUN`: run the program on a copy of `data_in`, `repeat` times; the packet as the
/// program left it is copied to `data_out`.
pub fn prog_test_run(
    fd: BorrowedFd<'_>,
    data_in: &[u8],
    data_out: &mut [u8],
    repeat: u32,
) -> io::Result<TestRunOut> {
    let mut a = TestRunAttr {
        prog_fd: fd.as_raw_fd() as u32,
        data_size_in: data_in.len() as u32,
        data_size_out: data_out.len() as u32,
        data_in: data_in.as_ptr() as u64,
        data_out: data_out.as_mut_ptr() as u64,
        repeat,
        ..Default::default()
    };
    // SAFETY: the kernel reads `data_size_in` bytes at `data_in` and writes at most
    // `data_size_out` bytes at `data_out` (it truncates and reports ENOSPC if the packet is
    // larger); both are the slices' own lengths. No context is passed.
    unsafe { bpf(BPF_PROG_TEST_RUN, &mut a) }?;
    Ok(TestRunOut {
        retval: a.retval,
        data_len: a.data_size_out as usize,
        duration_ns: a.duration,
    })
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `BPF_LINK_CREATE` for a program attached to a network interface (XDP, tcx). The attachment
/// lives as long as the returned descriptor.
pub fn link_create(
    prog_fd: BorrowedFd<'_>,
    ifindex: u32,
    attach_type: u32,
    flags: u32,
) -> io::Result<OwnedFd> {
    let mut a = LinkCreateAttr {
        prog_fd: prog_fd.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type,
        flags,
    };
    // SAFETY: the layout is the LINK_CREATE prefix of bpf_attr; it holds no pointers.
    unsafe { bpf(BPF_LINK_CREATE, &mut a) }.map(fd_from)
}

#[repr(C)]
struct LinkDetachAttr {
    link_fd: u32,
}

/// `BPF_LINK_DETACH`: detach the link's program now, even if other descriptors of the link are
/// still open (e.g. inherited by a child process between fork and exec).
pub fn link_detach(link_fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut a = LinkDetachAttr {
        link_fd: link_fd.as_raw_fd() as u32,
    };
    // SAFETY: the layout is the LINK_DETACH prefix of bpf_attr; it holds no pointers.
    unsafe { bpf(BPF_LINK_DETACH, &mut a) }.map(drop)
}

#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The start of `struct bpf_prog_info`.
#[repr(C)]
#[derive(Default)]
struct ProgInfoRaw {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; OBJ_NAME_LEN],
}

/// What the kernel says about a loaded program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgInfo {
    /// Program type.
    pub prog_type: u32,
    /// Kernel-wide id.
    pub id: u32,
    /// Name given at load time (truncated to 15 bytes).
    pub name: String,
    /// Ids of the maps it uses.
    pub map_ids: Vec<u32>,
}

fn name_of(raw: &[u8]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a program.
pub fn prog_info(fd: BorrowedFd<'_>) -> io::Result<ProgInfo> {
    let mut ids = [0u32; 64];
    let mut raw = ProgInfoRaw {
        nr_map_ids: ids.len() as u32,
        map_ids: ids.as_mut_ptr() as u64,
        ..Default::default()
    };
    let mut a = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: size_of::<ProgInfoRaw>() as u32,
        info: &mut raw as *mut ProgInfoRaw as u64,
    };
    // SAFETY: the kernel writes at most `info_len` bytes into `raw` (its own size) and at most
    // `nr_map_ids` (64) u32 ids at `map_ids` (the 64-entry array); both outlive the call.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a) }?;
    let n = (raw.nr_map_ids as usize).min(ids.len());
    Ok(ProgInfo {
        prog_type: raw.prog_type,
        id: raw.id,
        name: name_of(&raw.name),
        map_ids: ids[..n].to_vec(),
    })
}

/// The start of `struct bpf_map_info`.
#[repr(C)]
#[derive(Default)]
struct MapInfoRaw {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    name: [u8; OBJ_NAME_LEN],
}

/// What the kernel says about a map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapInfo {
    /// Map type.
    pub map_type: u32,
    /// Kernel-wide id.
    pub id: u32,
    /// Key bytes.
    pub key_size: u32,
    /// Value bytes (per CPU for per-CPU maps).
    pub value_size: u32,
    /// Capacity.
    pub max_entries: u32,
    /// Name given at creation.
    pub name: String,
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a map.
pub fn map_info(fd: BorrowedFd<'_>) -> io::Result<MapInfo> {
    let mut raw = MapInfoRaw::default();
    let mut a = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: size_of::<MapInfoRaw>() as u32,
        info: &mut raw as *mut MapInfoRaw as u64,
    };
    // SAFETY: the kernel writes at most `info_len` bytes (the size of `raw`) into `raw`.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a) }?;
    Ok(MapInfo {
        map_type: raw.map_type,
        id: raw.id,
        key_size: raw.key_size,
        value_size: raw.value_size,
        max_entries: raw.max_entries,
        name: name_of(&raw.name),
    })
}

#[repr(C)]
struct GetFdByIdAttr {
    id: u32,
    next_id: u32,
    open_flags: u32,
}

/// `BPF_PROG_GET_FD_BY_ID`.
pub fn prog_fd_by_id(id: u32) -> io::Result<OwnedFd> {
    let mut a = GetFdByIdAttr {
        id,
        next_id: 0,
        open_flags: 0,
    };
    // SAFETY: the layout is the GET_FD_BY_ID prefix of bpf_attr; no pointers.
    unsafe { bpf(BPF_PROG_GET_FD_BY_ID, &mut a) }.map(fd_from)
}

/// `BPF_MAP_GET_FD_BY_ID`.
pub fn map_fd_by_id(id: u32) -> io::Result<OwnedFd> {
    let mut a = GetFdByIdAttr {
        id,
        next_id: 0,
        open_flags: 0,
    };
    // SAFETY: as above.
    unsafe { bpf(BPF_MAP_GET_FD_BY_ID, &mut a) }.map(fd_from)
}

// ---- netlink ----

const SOL_NETLINK: libc::c_int = 270;
const NETLINK_CAP_ACK: libc::c_int = 10;
const NETLINK_EXT_ACK: libc::c_int = 11;

fn setsockopt_int(fd: BorrowedFd<'_>, level: libc::c_int, opt: libc::c_int, v: libc::c_int) {
    // SAFETY: passes a pointer to a live c_int and its size; the kernel only reads it. Failure
    // (an old kernel without the option) is harmless and ignored.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            &v as *const libc::c_int as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// A netlink socket of `protocol` (`NETLINK_ROUTE`), with extended acks (error messages from the
/// kernel) and capped acks (the request is not echoed back).
pub fn netlink_socket(protocol: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            protocol,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    setsockopt_int(fd.as_fd(), SOL_NETLINK, NETLINK_EXT_ACK, 1);
    setsockopt_int(fd.as_fd(), SOL_NETLINK, NETLINK_CAP_ACK, 1);
    Ok(fd)
}

/// Send one netlink message to the kernel.
pub fn netlink_send(fd: BorrowedFd<'_>, msg: &[u8]) -> io::Result<()> {
    // SAFETY: an all-zero sockaddr_nl is valid (pid 0 = the kernel).
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: the kernel reads `msg.len()` bytes at `msg` and the address of its stated size.
    let r = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            msg.as_ptr() as *const libc::c_void,
            msg.len(),
            0,
            &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receive one datagram (possibly several netlink messages) into `buf`.
pub fn netlink_recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
        let r = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(r as usize);
    }
}

/// The index of interface `name` in the calling thread's network namespace.
pub fn if_nametoindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

const SO_NETNS_COOKIE: libc::c_int = 71;

/// The calling thread's network namespace cookie: a 64-bit id that is unique for the life of the
/// system (unlike the namespace's inode number, it is never reused). Linux ≥ 5.14.
pub fn netns_cookie() -> io::Result<u64> {
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns (closed on drop).
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut v: u64 = 0;
    let mut len = size_of::<u64>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` (8) bytes into `v`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            &mut v as *mut u64 as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// The effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_and_truncated() {
        assert_eq!(&obj_name("fp-xsk redirect!")[..], b"fp_xsk_redirect\0");
        assert_eq!(&obj_name("a.b")[..4], b"a.b\0");
    }

    #[test]
    fn attr_layouts_match_the_kernel() {
        // Offsets from include/uapi/linux/bpf.h (checked with pahole on 6.x).
        assert_eq!(size_of::<MapCreateAttr>(), 48);
        assert_eq!(size_of::<MapElemAttr>(), 32);
        assert_eq!(size_of::<ProgLoadAttr>(), 72);
        assert_eq!(size_of::<TestRunAttr>(), 80);
        assert_eq!(size_of::<LinkCreateAttr>(), 16);
        assert_eq!(std::mem::offset_of!(ProgInfoRaw, name), 64);
        assert_eq!(std::mem::offset_of!(MapInfoRaw, name), 24);
    }

    #[test]
    fn lookup_of_loopback() {
        assert_eq!(if_nametoindex("lo").unwrap(), 1);
        assert!(if_nametoindex("no-such-if0").is_err());
    }
}
