//! The crate's only `unsafe` code: thin wrappers over `sigaction(2)` and `raise(3)`.
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
