//! Names that say who owns them, and the sweep that removes what crashed runs left behind.
//!
//! Every object a [`TestNet`](crate::TestNet) creates on the host is named
//! `fpt-<pid>-<start>-<seq>-<tag>-…`: `pid` and `start` (the owner process's start time in clock
//! ticks since boot, base 36) identify the owning process exactly, even after its pid has been
//! reused; `seq` distinguishes test networks of one process (parallel tests in one `cargo test`
//! binary); `tag` is the test's own label for people reading `ip netns list`. The sweep removes
//! objects whose owner is no longer running — and never anything of a live process, so it is safe
//! while other users' and other test binaries' networks exist.

use crate::cmd::{ip_netns_list, ip_netns_pids};
use crate::sys;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Prefix of every name fp-testnet creates on the host (network namespaces and temp dirs).
pub const PREFIX: &str = "fpt-";

/// The identity of one process: `(pid, start time in base 36)`.
pub(crate) fn self_identity() -> (u32, String) {
    let pid = std::process::id();
    (pid, start_token(pid).unwrap_or_else(|| "0".into()))
}

/// The start time of `pid` (field 22 of `/proc/PID/stat`) in base 36, or `None` if it is gone.
fn start_token(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let start: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some(base36(start))
}

fn base36(mut x: u64) -> String {
    const D: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut s = Vec::new();
    loop {
        s.push(D[(x % 36) as usize]);
        x /= 36;
        if x == 0 {
            break;
        }
    }
    s.reverse();
    String::from_utf8(s).expect("ascii")
}

/// The owner `(pid, token)` encoded in a name made by fp-testnet, or `None` for other names.
pub(crate) fn owner_of(name: &str) -> Option<(u32, &str)> {
    let rest = name.strip_prefix(PREFIX)?;
    let mut it = rest.splitn(3, '-');
    let pid = it.next()?.parse().ok()?;
    let tok = it.next()?;
    if tok.is_empty() || !tok.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    Some((pid, tok))
}

/// Whether the process that owns `name` is still running (unknown formats count as alive, so
/// the sweep never touches them).
pub(crate) fn owner_alive(name: &str) -> bool {
    match owner_of(name) {
        None => true,
        Some((pid, tok)) => start_token(pid).as_deref() == Some(tok),
    }
}

/// What [`sweep_stale`] removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// Network namespaces deleted.
    pub namespaces: Vec<String>,
    /// Processes killed inside them.
    pub killed: usize,
    /// Temporary directories removed.
    pub dirs: Vec<PathBuf>,
    /// What could not be removed, and why.
    pub errors: Vec<String>,
}

impl SweepReport {
    /// True if nothing was found.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty() && self.dirs.is_empty() && self.errors.is_empty()
    }
}

/// Remove the network namespaces (with every process still running in them) and temporary
/// directories left by fp-testnet runs whose process has died (a test binary killed by a
/// signal or a CI timeout never runs its destructors). Objects of running processes are never
/// touched. [`TestNet::new`](crate::TestNet::new) calls this once per process.
pub fn sweep_stale() -> SweepReport {
    let mut rep = SweepReport::default();
    match ip_netns_list() {
        Ok(names) => {
            for ns in names {
                if ns.starts_with(PREFIX) && !owner_alive(&ns) {
                    rep.killed += kill_all_in(&ns, &mut rep.errors);
                    match crate::cmd::ip_netns_del(&ns) {
                        Ok(()) => rep.namespaces.push(ns),
                        Err(e) => rep.errors.push(format!("netns {ns}: {e}")),
                    }
                }
            }
        }
        Err(e) => rep.errors.push(format!("listing namespaces: {e}")),
    }
    let tmp = std::env::temp_dir();
    if let Ok(rd) = std::fs::read_dir(&tmp) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(PREFIX) && !owner_alive(&name) {
                let p = e.path();
                match remove_tree(&p) {
                    Ok(()) => rep.dirs.push(p),
                    Err(err) => rep.errors.push(format!("{}: {err}", p.display())),
                }
            }
        }
    }
    rep
}

/// Kill every process in network namespace `ns` (SIGKILL), waiting up to 3 s for them to be
/// gone. Returns how many distinct processes were signalled.
pub(crate) fn kill_all_in(ns: &str, errors: &mut Vec<String>) -> usize {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut seen = std::collections::HashSet::new();
    loop {
        let pids = match ip_netns_pids(ns) {
            Ok(p) => p,
            Err(e) => {
                errors.push(format!("pids of {ns}: {e}"));
                return seen.len();
            }
        };
        if pids.is_empty() {
            return seen.len();
        }
        for pid in pids {
            seen.insert(pid);
            sys::kill(pid as i32, libc::SIGKILL);
        }
        if Instant::now() > deadline {
            errors.push(format!("processes in {ns} survived SIGKILL for 3 s"));
            return seen.len();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `remove_dir_all`, treating "already gone" as success.
pub(crate) fn remove_tree(p: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_encode_their_owner() {
        let (pid, tok) = self_identity();
        let name = format!("{PREFIX}{pid}-{tok}-3-mytest-client");
        assert_eq!(owner_of(&name), Some((pid, tok.as_str())));
        assert!(owner_alive(&name));
        // A different start time with our pid: a previous process that had our pid.
        assert!(!owner_alive(&format!("{PREFIX}{pid}-zzzzzz-0-x")));
        // Not ours: never swept.
        assert!(owner_alive("fz-client"));
        assert!(owner_alive("fpt-notapid-x-y"));
        assert_eq!(base36(0), "0");
        assert_eq!(base36(36 * 36 + 35), "10z");
    }
}
