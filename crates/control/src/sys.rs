//! The crate's only `unsafe` code: thin wrappers over `sigaction(2)`, `raise(3)`, `pipe2(2)`,
//! `write(2)`, `poll(2)` and `read(2)`.
//!
//! Each wrapper is safe to call: it checks its arguments, passes only valid pointers, and turns the
//! C return convention into an [`std::io::Result`].

#![allow(unsafe_code)]

use std::io;

/// A signal handler as the kernel calls it.
pub type Handler = extern "C" fn(libc::c_int);

/// Install `handler` for `signal` with `SA_RESTART` (interrupted system calls of other threads are
/// restarted rather than failing with `EINTR`) and an empty blocked-signal mask.
///
/// The handler must be async-signal-safe: the callers in this crate only store to a static atomic.
pub fn install_handler(signal: libc::c_int, handler: Handler) -> io::Result<()> {
    // SAFETY: `libc::sigaction` is a plain C struct (a function-pointer-sized integer, a signal
    // set, flags and, on some targets, a restorer pointer); the all-zero bit pattern is a valid
    // value of it (SIG_DFL, an empty set, no flags, no restorer).
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as usize;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid, writable `sigset_t` owned by this frame.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is fully initialised and outlives the call; a null `oldact` is allowed.
    // `sa_sigaction` holds an `extern "C" fn(c_int)`, the signature the kernel calls without
    // `SA_SIGINFO`. An invalid signal number makes the call fail with EINVAL, which we report.
    let rc = unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Send `signal` to the calling thread (`raise(3)`), for tests and for self-signalling.
pub fn raise(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: `raise` takes a plain integer and has no memory-safety preconditions; an invalid
    // signal number fails with EINVAL.
    let rc = unsafe { libc::raise(signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A pipe whose both ends are non-blocking and close on exec: `(read, write)`.
pub fn pipe() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [-1 as libc::c_int; 2];
    // SAFETY: `fds` is a valid, writable array of two ints, as pipe2(2) requires.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

/// Write one byte to `fd`, ignoring the outcome: async-signal-safe (`write(2)` only), for a signal
/// handler waking a waiting thread. A full non-blocking pipe already holds a wake-up.
pub fn write_byte(fd: libc::c_int) {
    let b = 1u8;
    // SAFETY: `b` is a valid one-byte buffer that outlives the call; a bad descriptor only makes
    // write(2) fail with EBADF, which is ignored.
    let _ = unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
}

/// Wait until `fd` is readable or `timeout` passes; then read (and discard) what it holds.
/// Returns whether it was readable.
pub fn wait_readable_and_drain(fd: libc::c_int, timeout: std::time::Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` is one valid pollfd that outlives the call; nfds is 1.
    let rc = unsafe { libc::poll(&mut p, 1, ms) };
    if rc <= 0 || p.revents & libc::POLLIN == 0 {
        return false;
    }
    let mut buf = [0u8; 64];
    // SAFETY: `buf` is a valid writable buffer of the length passed; the descriptor is
    // non-blocking, so the loop ends at EAGAIN (or at EOF / an error).
    while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    true
}
