//! The systemd service protocol (`sd_notify(3)`): readiness, reloading, stopping, status and the
//! watchdog, spoken over the datagram socket systemd names in `NOTIFY_SOCKET`.
//!
//! A unit with `Type=notify` (packaging/flowplane.service) counts the service as started only
//! once it says `READY=1` — after the workers forward and the admin server listens — so units
//! ordered after it start against a working balancer. A reload says `RELOADING=1` with the
//! monotonic time and `READY=1` when the new configuration is committed or rejected; shutdown says
//! `STOPPING=1` before draining. With `WatchdogSec=` set, systemd passes `WATCHDOG_USEC` and
//! restarts the service when `WATCHDOG=1` stops coming: the control loop sends it on each turn
//! after checking that every worker thread is alive, so a dead worker or a stuck control loop
//! gets the service restarted, not only a dead process.
//!
//! Without `NOTIFY_SOCKET` (run by hand, in a container) every call is a no-op, and so is every
//! call when it names a kind of socket this module does not speak (systemd 253's `vsock:`): a
//! warning says so once. Sending never blocks (the socket is non-blocking; a full queue loses the
//! message) and a failure is reported once, not on every call.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

/// A connection to the service manager, or nothing when not run by one.
#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
    last_ping: Option<Instant>,
    failed: bool,
}

/// The address in `NOTIFY_SOCKET`: a path, or (leading `@`) a name in the abstract namespace.
fn address(s: &str) -> io::Result<SocketAddr> {
    if let Some(name) = s.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        SocketAddr::from_abstract_name(name.as_bytes())
    } else if s.starts_with('/') {
        SocketAddr::from_pathname(s)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("NOTIFY_SOCKET={s:?} is neither a path nor an abstract name"),
        ))
    }
}

/// The watchdog interval systemd asks for, if it is meant for this process (`WATCHDOG_PID`, when
/// set, names the process that must ping).
fn watchdog_from(usec: Option<&str>, pid: Option<&str>) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    match pid.map(|p| p.trim().parse::<u32>()) {
        Some(Ok(p)) if p != std::process::id() => None,
        Some(Err(_)) => None,
        _ => Some(Duration::from_micros(usec)),
    }
}

impl Notifier {
    /// From the environment systemd sets (`NOTIFY_SOCKET`, `WATCHDOG_USEC`, `WATCHDOG_PID`).
    /// A socket that cannot be created is an error; an address of a kind this module does not
    /// speak is a warning on standard error, and nothing is sent.
    pub fn from_env() -> io::Result<Notifier> {
        let var = |k: &str| std::env::var(k).ok();
        let target = match var("NOTIFY_SOCKET").filter(|s| !s.is_empty()) {
            Some(s) => match address(&s) {
                Ok(a) => {
                    let sock = UnixDatagram::unbound()?;
                    sock.set_nonblocking(true)?;
                    Some((sock, a))
                }
                Err(e) => {
                    eprintln!("flowplane: not notifying the service manager: {e}");
                    None
                }
            },
            None => None,
        };
        let watchdog = match &target {
            Some(_) => watchdog_from(
                var("WATCHDOG_USEC").as_deref(),
                var("WATCHDOG_PID").as_deref(),
            ),
            None => None,
        };
        Ok(Notifier {
            target,
            watchdog,
            last_ping: None,
            failed: false,
        })
    }

    /// A notifier that sends nothing.
    pub fn disabled() -> Notifier {
        Notifier {
            target: None,
            watchdog: None,
            last_ping: None,
            failed: false,
        }
    }

    /// Whether a service manager listens.
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// The watchdog interval, when systemd asked for one.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog
    }

    /// Send one message (newline-separated `KEY=VALUE` assignments).
    fn send(&mut self, msg: &str) {
        let Some((sock, addr)) = &self.target else {
            return;
        };
        if let Err(e) = sock.send_to_addr(msg.as_bytes(), addr) {
            if !self.failed {
                eprintln!("flowplane: notifying the service manager failed: {e}");
                self.failed = true;
            }
        }
    }

    /// The service is up: `READY=1` and a status line.
    pub fn ready(&mut self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// A reload begins (`RELOADING=1` with `MONOTONIC_USEC`, as systemd 253's `notify-reload`
    /// expects); follow with [`Notifier::ready`] when it is over, whatever its outcome.
    pub fn reloading(&mut self) {
        let usec = fp_engine::sys::monotonic_ns() / 1000;
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
    }

    /// Shutdown begins and should take about `expect` (a drain): systemd's stop timeout is
    /// extended by that much plus ten seconds, so a long drain is not cut short.
    pub fn stopping(&mut self, expect: Option<Duration>) {
        match expect {
            Some(d) => {
                let usec = (d + Duration::from_secs(10)).as_micros();
                self.send(&format!(
                    "STOPPING=1\nEXTEND_TIMEOUT_USEC={usec}\nSTATUS=stopping (draining for {} ms)",
                    d.as_millis()
                ))
            }
            None => self.send("STOPPING=1\nSTATUS=stopping"),
        }
    }

    /// This process is the service's main process from now on (`MAINPID=`): a successor that
    /// took over from the process systemd started (the unit needs `NotifyAccess=all`).
    pub fn main_pid(&mut self) {
        self.send(&format!("MAINPID={}", std::process::id()));
    }

    /// A free-form status line (`systemctl status` shows it).
    pub fn status(&mut self, status: &str) {
        self.send(&format!("STATUS={}", one_line(status)));
    }

    /// Ping the watchdog if half its interval has passed since the last ping, and only when
    /// `healthy` (the caller checked that the data path runs). Cheap to call every loop turn.
    pub fn watchdog(&mut self, healthy: bool) {
        let Some(every) = self.watchdog else {
            return;
        };
        if !healthy || self.last_ping.is_some_and(|t| t.elapsed() < every / 2) {
            return;
        }
        self.last_ping = Some(Instant::now());
        self.send("WATCHDOG=1");
    }
}

/// Status text must not contain a newline (it would start a new assignment).
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchdog_interval_is_for_this_process_only() {
        let me = std::process::id().to_string();
        assert_eq!(
            watchdog_from(Some("2000000"), None),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            watchdog_from(Some("2000000"), Some(&me)),
            Some(Duration::from_secs(2))
        );
        assert_eq!(watchdog_from(Some("2000000"), Some("1")), None);
        assert_eq!(watchdog_from(Some("0"), None), None);
        assert_eq!(watchdog_from(Some("x"), None), None);
        assert_eq!(watchdog_from(None, None), None);
    }

    /// A directory removed when the test ends, also when it fails.
    struct TempDir(std::path::PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A notifier sending to `addr` (as `NOTIFY_SOCKET` would name it).
    fn notifier_to(addr: &str, watchdog: Option<Duration>) -> Notifier {
        Notifier {
            target: Some((UnixDatagram::unbound().unwrap(), address(addr).unwrap())),
            watchdog,
            last_ping: None,
            failed: false,
        }
    }

    #[test]
    fn messages_arrive_on_the_socket() {
        let dir = std::env::temp_dir().join(format!("fp-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _guard = TempDir(dir.clone());
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let server = UnixDatagram::bind(&path).unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut n = notifier_to(path.to_str().unwrap(), Some(Duration::from_secs(3600)));
        let mut buf = [0u8; 512];
        let mut next = || {
            let k = server.recv(&mut buf).unwrap();
            String::from_utf8(buf[..k].to_vec()).unwrap()
        };
        n.ready("forwarding\non eth0");
        assert_eq!(next(), "READY=1\nSTATUS=forwarding on eth0");
        n.reloading();
        let m = next();
        assert!(m.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{m}");
        n.watchdog(false);
        n.watchdog(true);
        n.watchdog(true); // within half the interval: not sent again
        n.stopping(None);
        assert_eq!(next(), "WATCHDOG=1");
        assert_eq!(next(), "STOPPING=1\nSTATUS=stopping");
        n.stopping(Some(Duration::from_millis(1500)));
        assert_eq!(
            next(),
            "STOPPING=1\nEXTEND_TIMEOUT_USEC=11500000\nSTATUS=stopping (draining for 1500 ms)"
        );
    }

    #[test]
    fn abstract_socket_addresses_work() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("fp-notify-test-{}", std::process::id());
        let server =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut n = notifier_to(&format!("@{name}"), None);
        n.status("up");
        let mut buf = [0u8; 64];
        let k = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..k], b"STATUS=up");
    }

    #[test]
    fn unknown_addresses_are_refused() {
        assert!(address("relative").is_err());
        assert!(address("vsock:2:1234").is_err());
        assert!(!Notifier::disabled().enabled());
    }
}
