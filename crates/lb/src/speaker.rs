//! The balancer's BGP speaker as the control thread sees it: BIRD, run through
//! `fp_control::announce`, started once the workers forward, told which VIPs to announce
//! (Maglev §2.1–2.2: the router spreads a VIP's traffic over every balancer announcing it, and
//! the controller withdraws when the forwarder is unhealthy), started again when it dies on its
//! own, stopped at shutdown. Without `[bgp]` every call does nothing.

use crate::config::BgpSpec;
use anyhow::{Context as _, Result};
use fp_control::announce::Announcer;
use fp_control::log;
use std::net::IpAddr;

/// The speaker, if the configuration has `[bgp]` and it has been started.
#[derive(Default)]
pub struct Speaker {
    announcer: Option<Announcer>,
}

impl Speaker {
    /// Start the speaker for `spec`. An error stops the balancer (it is the first start).
    pub fn start(&mut self, spec: &BgpSpec) -> Result<()> {
        let a =
            Announcer::start(spec).with_context(|| format!("bgp: starting {}", spec.speaker))?;
        log(format_args!(
            "BGP speaker {} started (pid {}), peer {} AS {}",
            spec.speaker,
            a.pid(),
            spec.peer,
            spec.peer_as
        ));
        self.announcer = Some(a);
        Ok(())
    }

    /// Whether a speaker is running (or was started and not yet found dead).
    pub fn started(&self) -> bool {
        self.announcer.is_some()
    }

    /// Tell the speaker what to announce, if that changed.
    pub fn announce(&mut self, want: &[IpAddr]) {
        let Some(a) = self.announcer.as_mut() else {
            return;
        };
        match a.set(want) {
            Ok(true) => log(format_args!(
                "announcing {} VIP(s) over BGP: {}",
                want.len(),
                join(want)
            )),
            Ok(false) => {}
            Err(e) => log(format_args!("BGP announcement update failed: {e}")),
        }
    }

    /// A speaker that died on its own (not through us) is started again; returns true when it
    /// was, so the caller tells it what to announce (while it is down the router has withdrawn
    /// this balancer, which then receives nothing). A failed restart is retried next time.
    pub fn revive(&mut self, spec: &BgpSpec) -> bool {
        match &self.announcer {
            Some(a) if a.is_running() => return false,
            Some(a) => {
                log(format_args!(
                    "BGP speaker {} exited unexpectedly; its log:\n{}",
                    spec.speaker,
                    a.log_tail(20)
                ));
                self.announcer = None; // Dropping it removes its state files first.
            }
            None => {}
        }
        match Announcer::start(spec) {
            Ok(a) => {
                log(format_args!("BGP speaker restarted (pid {})", a.pid()));
                self.announcer = Some(a);
                true
            }
            Err(e) => {
                log(format_args!("BGP speaker restart failed, will retry: {e}"));
                false
            }
        }
    }

    /// The session state and what is announced, for the admin status page.
    pub fn status(&self) -> Option<String> {
        self.announcer.as_ref().map(|a| {
            format!(
                "session {}; announcing {}",
                a.session_state().unwrap_or_else(|e| e.to_string()),
                if a.announced().is_empty() {
                    "nothing".to_string()
                } else {
                    join(a.announced())
                }
            )
        })
    }

    /// Stop the speaker: the router drops the session and every route through this balancer.
    pub fn stop(&mut self) {
        if let Some(a) = self.announcer.take() {
            a.stop();
        }
    }
}

fn join(addrs: &[IpAddr]) -> String {
    addrs
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
