//! The three system calls fp-testnet makes itself (everything else goes through the `ip`
//! command): entering a network namespace from a thread, sending a signal, and reading the
//! effective user id.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;

/// Move the *calling thread* into the network namespace `ns` (an open `/run/netns/NAME`).
///
/// Network namespaces are per thread: other threads of the process are not affected, and sockets
/// created by this thread from now on belong to `ns` for their whole life, whichever thread uses
/// them later.
pub fn setns_net(ns: &std::fs::File) -> io::Result<()> {
    // SAFETY: setns only reads its two integer arguments; `ns` is an open file descriptor that
    // stays open for the duration of the call (we borrow the File). CLONE_NEWNET asks the kernel to
    // check that the descriptor refers to a network namespace, so a wrong file gives EINVAL, not UB.
    let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Send `sig` to `pid` (a negative `pid` addresses a process group). Returns false if the
/// target does not exist (ESRCH) or we may not signal it.
pub fn kill(pid: i32, sig: i32) -> bool {
    if pid == 0 || pid == -1 {
        // 0 is our own process group and -1 is every process we may signal: never meant here.
        return false;
    }
    // SAFETY: kill(2) takes two integers and touches no memory of ours. The guard above keeps the
    // broadcast forms (0, -1) out, so at most one process or one process group is signalled.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no arguments, cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}
