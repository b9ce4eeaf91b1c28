//! Reload and shutdown signals as flags the control loop polls.
//!
//! A signal handler may only call async-signal-safe functions, so the handlers here do exactly one
//! thing: store `true` into a static atomic. The control loop calls [`ReloadSignal::take`] (or
//! [`TerminateSignal::is_set`]) once per iteration — a relaxed load, no system call. Several
//! `SIGHUP`s that arrive before one `take` are one reload, which is what an operator who sends two
//! means: "read the file again".
//!
//! The flags are process-wide (signals are delivered to the process): installing twice is harmless
//! and every [`ReloadSignal`] value sees the same flag. Handlers are installed with `SA_RESTART`, so
//! other threads' blocking system calls are restarted instead of failing with `EINTR`.

use crate::sys;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

static HUP: AtomicBool = AtomicBool::new(false);
static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_hup(_: libc::c_int) {
    HUP.store(true, Ordering::Release);
}

extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::Release);
}

/// `SIGHUP` ⇒ "reload the configuration file".
#[derive(Clone, Copy, Debug)]
pub struct ReloadSignal(());

impl ReloadSignal {
    /// Install the `SIGHUP` handler.
    ///
    /// # Panics
    /// Only if `sigaction(2)` rejects `SIGHUP`, which it never does on Linux; use
    /// [`ReloadSignal::try_install`] to get the error instead.
    pub fn install() -> ReloadSignal {
        ReloadSignal::try_install().expect("sigaction(SIGHUP)")
    }

    /// Install the `SIGHUP` handler, reporting a failure of `sigaction(2)`.
    pub fn try_install() -> io::Result<ReloadSignal> {
        sys::install_handler(libc::SIGHUP, on_hup)?;
        Ok(ReloadSignal(()))
    }

    /// Whether `SIGHUP` arrived since the last call; clears the flag.
    pub fn take(&self) -> bool {
        HUP.swap(false, Ordering::AcqRel)
    }
}

/// `SIGTERM` or `SIGINT` ⇒ "shut down cleanly" (detach XDP programs, remove what was set up).
#[derive(Clone, Copy, Debug)]
pub struct TerminateSignal(());

impl TerminateSignal {
    /// Install the `SIGTERM` and `SIGINT` handlers. After this, Ctrl-C no longer kills the process:
    /// the program must poll [`TerminateSignal::is_set`] and exit.
    pub fn install() -> io::Result<TerminateSignal> {
        sys::install_handler(libc::SIGTERM, on_term)?;
        sys::install_handler(libc::SIGINT, on_term)?;
        Ok(TerminateSignal(()))
    }

    /// Whether `SIGTERM` or `SIGINT` has arrived (the flag stays set).
    pub fn is_set(&self) -> bool {
        TERM.load(Ordering::Acquire)
    }
}

/// Send `SIGHUP` to the calling thread, as `kill -HUP` would to the process (tests, tools).
pub fn raise_hup() -> io::Result<()> {
    sys::raise(libc::SIGHUP)
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test touches each flag: tests run on parallel threads of one process and the flags are
    // process-wide.
    #[test]
    fn sighup_sets_the_reload_flag_once() {
        let r = ReloadSignal::install();
        let _ = r.take();
        assert!(!r.take());
        raise_hup().unwrap();
        // raise(3) delivers to the calling thread before it returns.
        assert!(r.take());
        assert!(!r.take(), "take clears the flag");
        raise_hup().unwrap();
        raise_hup().unwrap();
        assert!(ReloadSignal::install().take(), "flag is process-wide");
        assert!(!r.take(), "two signals before a take are one reload");
    }

    #[test]
    fn sigterm_and_sigint_set_the_terminate_flag() {
        let t = TerminateSignal::install().unwrap();
        sys::raise(libc::SIGTERM).unwrap();
        assert!(t.is_set());
        sys::raise(libc::SIGINT).unwrap();
        assert!(t.is_set(), "the flag stays set");
    }
}
