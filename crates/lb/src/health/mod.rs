//! The balancer's health-check plan (Maglev §2.2): which backend gets which check, deduplicated by
//! address; `fp-control`'s [`HealthMonitor`] runs it.
//!
//! [`plan`] turns a validated [`LbConfig`] into one check per distinct backend address:
//!
//! * Only pools that serve some VIP (directly or nested in a pool that does) contribute checks; a
//!   pool no VIP uses carries no traffic and its check is not run.
//! * A pool's check applies to every backend reachable from the pool, nested pools included.
//! * **Deduplication** (§2.2: "health checks are deduplicated by IP addresses"): an address gets
//!   exactly one check stream, however many pools hold it. If pools holding the same address
//!   configure *different* checks, the **first pool in configuration order that has a check** wins;
//!   the others are listed in [`Plan::conflicts`] (log them) and not run. The rule is simple to
//!   predict and never multiplies the load on a backend.
//! * **Port:** `health.port` if given, else the port of the first VIP (configuration order) that
//!   the pool serves with a fixed port. A pool with a check whose VIPs all use `port = 0` (any
//!   port) and no `health.port` is a configuration error naming `pool "NAME".health.port`.
//! * A backend that no pool checks is **always healthy** (reason `"no health check"`).
//!
//! Backends known when the balancer starts start healthy (it serves at once; a dead backend leaves
//! after `fall` failures); backends added by a reload start unhealthy and get traffic after `rise`
//! successes ([`fp_control::health::HealthOptions`]).

use crate::config::LbConfig;
pub use fp_control::health::{
    HealthCheck, HealthError, HealthEvent, HealthKind, HealthMonitor, HealthOptions, Plan,
    PlannedCheck,
};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

/// Decide the checks for `cfg` (see the module doc for the rules).
pub fn plan(cfg: &LbConfig) -> Result<Plan, HealthError> {
    let order = cfg.backend_addresses();
    let serving: HashSet<IpAddr> = order.iter().copied().collect();
    let mut checks: Vec<PlannedCheck> = Vec::new();
    let mut index: HashMap<IpAddr, usize> = HashMap::new();
    let mut conflicts = Vec::new();
    // Pools that serve some VIP, directly or nested (`VipSpec::pools` lists both).
    let used: HashSet<&str> = cfg
        .vips
        .iter()
        .flat_map(|v| v.pools.iter().map(String::as_str))
        .collect();
    for pool in &cfg.pools {
        let Some(h) = &pool.health else { continue };
        if !used.contains(pool.name.as_str()) {
            continue;
        }
        let field = format!("pool {:?}.health.port", pool.name);
        let port = match h.port {
            Some(0) => {
                return Err(HealthError::Config {
                    field,
                    message: "0 is not a port".into(),
                })
            }
            Some(p) => p,
            None => cfg
                .vips
                .iter()
                .find(|v| v.port != 0 && v.pools.contains(&pool.name))
                .map(|v| v.port)
                .ok_or_else(|| HealthError::Config {
                    field,
                    message: "required: every VIP this pool serves has port = 0 (any port)".into(),
                })?,
        };
        for b in pool
            .backends
            .iter()
            .filter(|b| serving.contains(&b.address))
        {
            match index.get(&b.address) {
                Some(&i) => {
                    let first = &checks[i];
                    if first.check != *h || first.port != port {
                        conflicts.push(format!(
                            "backend {}: pool {:?} configures a different health check than pool \
                             {:?}; pool {:?}'s (first in the configuration) is used",
                            b.address, pool.name, first.pool, first.pool
                        ));
                    }
                }
                None => {
                    index.insert(b.address, checks.len());
                    checks.push(PlannedCheck {
                        address: b.address,
                        pool: pool.name.clone(),
                        port,
                        check: h.clone(),
                    });
                }
            }
        }
    }
    let unchecked = order
        .into_iter()
        .filter(|a| !index.contains_key(a))
        .collect();
    Ok(Plan {
        checks,
        unchecked,
        conflicts,
    })
}

#[cfg(test)]
mod tests;
