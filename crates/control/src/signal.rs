//! Reload and shutdown signals as flags, and a way to sleep until one arrives.
//!
//! A signal handler may only call async-signal-safe functions, so the handlers here store `true`
//! into a static atomic and write one byte into a pipe (`write(2)` is async-signal-safe): the
//! self-pipe trick. A thread that waits for signals sleeps in [`SignalWait::wait`] (`poll(2)` on
//! the pipe) and then reads the flags: [`ReloadSignal::take`], [`TerminateSignal::is_set`]. Several
//! `SIGHUP`s that arrive before one `take` are one reload, which is what an operator who sends two
//! means: "read the file again". The flags are the truth and the pipe only wakes: a wake-up that
//! another waiter consumed is seen at the waiter's next timeout.
//!
//! The flags are process-wide (signals are delivered to the process): installing twice is harmless
//! and every [`ReloadSignal`] value sees the same flag. Handlers are installed with `SA_RESTART`, so
//! other threads' blocking system calls are restarted instead of failing with `EINTR`.

use crate::sys;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

static HUP: AtomicBool = AtomicBool::new(false);
static TERM: AtomicBool = AtomicBool::new(false);
static USR2: AtomicBool = AtomicBool::new(false);
/// The write end of the wake-up pipe, once made (-1 before).
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// The pipe itself, made once per process.
static PIPE: OnceLock<(OwnedFd, OwnedFd)> = OnceLock::new();

fn wake() {
    let fd = WAKE.load(Ordering::Acquire);
    if fd >= 0 {
        sys::write_byte(fd);
    }
}

extern "C" fn on_hup(_: libc::c_int) {
    HUP.store(true, Ordering::Release);
    wake();
}

extern "C" fn on_usr2(_: libc::c_int) {
    USR2.store(true, Ordering::Release);
    wake();
}

extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::Release);
    wake();
}

/// Sleeps until a signal handled here arrives (or [`SignalWait::poke`]): the self-pipe.
#[derive(Clone, Copy, Debug)]
pub struct SignalWait {
    read: libc::c_int,
}

impl SignalWait {
    /// The process's wake-up pipe, made on first use.
    pub fn new() -> io::Result<SignalWait> {
        if PIPE.get().is_none() {
            let p = sys::pipe()?;
            // Another thread may have won the race; its pipe is kept and this one closed.
            let _ = PIPE.set(p);
        }
        let (r, w) = PIPE.get().expect("set above");
        WAKE.store(w.as_raw_fd(), Ordering::Release);
        Ok(SignalWait {
            read: r.as_raw_fd(),
        })
    }

    /// Sleep until a signal arrives, a [`SignalWait::poke`], or `timeout`. Returns whether
    /// something woke it (then read the flags).
    pub fn wait(&self, timeout: Duration) -> bool {
        sys::wait_readable_and_drain(self.read, timeout)
    }

    /// Wake a thread sleeping in [`SignalWait::wait`] (to have it look at a flag of its own).
    pub fn poke(&self) {
        wake();
    }
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

/// `SIGUSR2` ⇒ "start a successor from the binary's path and hand over to it" (a hitless
/// restart or upgrade).
#[derive(Clone, Copy, Debug)]
pub struct UpgradeSignal(());

impl UpgradeSignal {
    /// Install the `SIGUSR2` handler.
    pub fn install() -> io::Result<UpgradeSignal> {
        sys::install_handler(libc::SIGUSR2, on_usr2)?;
        Ok(UpgradeSignal(()))
    }

    /// Whether `SIGUSR2` arrived since the last call; clears the flag.
    pub fn take(&self) -> bool {
        USR2.swap(false, Ordering::AcqRel)
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
    fn a_signal_wakes_the_waiter() {
        let w = SignalWait::new().unwrap();
        let r = ReloadSignal::install();
        let start = std::time::Instant::now();
        let t = std::thread::spawn(move || w.wait(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(50));
        w.poke();
        assert!(t.join().unwrap(), "woken, not timed out");
        assert!(start.elapsed() < Duration::from_secs(20));
        let _ = r;
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
