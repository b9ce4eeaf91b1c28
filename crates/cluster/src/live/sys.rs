//! `poll(2)` over a node's sockets, so an idle node sleeps until a frame arrives on any of them —
//! the only unsafe code of the crate (one foreign call).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// A fixed set of file descriptors to wait on for input.
pub(crate) struct PollSet {
    fds: Vec<libc::pollfd>,
}

impl PollSet {
    /// Wait on `fds` (readable).
    pub(crate) fn new(fds: &[RawFd]) -> PollSet {
        PollSet {
            fds: fds
                .iter()
                .map(|&fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect(),
        }
    }

    /// Sleep until one of the descriptors is readable or `timeout` (rounded up to whole
    /// milliseconds) passes. Returns whether one is readable; a signal ends the wait early.
    pub(crate) fn wait(&mut self, timeout: Duration) -> io::Result<bool> {
        for p in &mut self.fds {
            p.revents = 0;
        }
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `self.fds` is a live, exclusively borrowed allocation of exactly
        // `self.fds.len()` initialised `pollfd` structs for the whole call; poll(2) reads them and
        // writes only their `revents` fields, and keeps no pointer after returning. A descriptor
        // that was closed meanwhile is not a memory-safety issue (poll reports POLLNVAL).
        let r = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(r > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    #[test]
    fn wakes_on_input_and_times_out_without() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (_c, d) = UnixStream::pair().unwrap();
        let mut set = PollSet::new(&[b.as_raw_fd(), d.as_raw_fd()]);
        let t = Instant::now();
        assert!(!set.wait(Duration::from_millis(20)).unwrap());
        assert!(t.elapsed() >= Duration::from_millis(19));
        a.write_all(b"x").unwrap();
        assert!(set.wait(Duration::from_secs(5)).unwrap());
    }
}
