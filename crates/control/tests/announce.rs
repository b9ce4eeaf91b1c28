//! Live tests of the announcer (`fp_control::announce`): real BIRD 2 processes in network
//! namespaces built with fp-testnet.
//!
//! # Topology
//!
//! ```text
//!              10.81.0.0/24, one Linux bridge ("sw")
//!   router ───────────────┬────────────────┐
//!   10.81.0.1             a1 10.81.0.11    a2 10.81.0.12
//!   BIRD: BGP from a1, a2 Announcer        Announcer
//!   (AS 65000), kernel    (AS 65001)       (AS 65001)
//!   protocol with
//!   `merge paths on`
//! ```
//!
//! The router's BIRD installs what it learns into its namespace's kernel table, merging equal
//! routes from several announcers into one ECMP route — what a data-centre router does with
//! the balancers' announcements (Maglev §2.1). The tests read the router's kernel table
//! (`ip route show exact VIP/32`), so they check the whole chain: generated configuration, session,
//! UPDATE, best-path merge, kernel route.
//!
//! # What is asserted
//!
//! 1. `two_announcers_build_one_ecmp_route`: sessions come up; a VIP announced by one announcer is
//!    a single-path route, by both an ECMP route with both next hops; announcing a changed set
//!    withdraws exactly what left; `set` reports whether anything changed; `withdraw_all` removes
//!    the route; `stop` withdraws at once (BGP Cease) and removes the state directory; a BIRD
//!    killed with SIGKILL is noticed by the announcer (`Exited`) and withdrawn by the router
//!    without waiting for the hold timer (the kernel closes its TCP session).
//! 2. `silent_failure_is_withdrawn_after_the_hold_time`: an announcer whose link goes down sends
//!    nothing more; the router withdraws its routes when the hold timer (3 s) expires, not before
//!    (allowing for the last keepalive's age and BIRD's timer jitter).
//! 3. `bird_dies_with_its_owner_process`: a process owning an `Announcer` (this test binary, run
//!    again in a1's namespace) is killed with SIGKILL; its BIRD, in its own process group so
//!    nothing signalled it directly, dies with it (`PR_SET_PDEATHSIG`) and the route is withdrawn
//!    at once.
//!
//! Timings are printed (`cargo test -p fp-control --test announce -- --nocapture`). The tests
//! serialise themselves; they need root, iproute2 and bird2, and fail saying so otherwise.

use anyhow::{bail, ensure, Context, Result};
use fp_control::announce::BgpSpec;
use fp_control::announce::{AnnounceError, Announcer};
use fp_testnet::{Netns, Proc, TestNet};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const ROUTER: &str = "10.81.0.1";
const VIP1: &str = "10.100.81.1";
const VIP2: &str = "10.100.81.2";
const HOLD_S: u64 = 3;
/// How long a change may take to reach the router's kernel table: BIRD reacts within
/// milliseconds; the slack is for a loaded 2-core machine.
const CONVERGE: Duration = Duration::from_secs(3);
/// Sessions: first connection attempt after 1 s on both sides, then retries every 1-5 s.
const SESSION_UP: Duration = Duration::from_secs(15);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn announcer_addr(i: usize) -> String {
    format!("10.81.0.{}", 10 + i)
}

struct Lab {
    net: TestNet,
    router: Netns,
    router_bird: Proc,
    router_socket: PathBuf,
    announcers: Vec<Netns>,
}

/// The router's BIRD: BGP with every announcer (a template with fast timers), routes into the
/// kernel table with ECMP merging. Graceful restart stays at BIRD's default (aware): it is the
/// announcer's job not to ask for it.
fn router_config(n: usize) -> String {
    let mut s = format!(
        "router id {ROUTER};\nlog stderr all;\n\
         protocol device {{ scan time 1; }}\n\
         protocol kernel {{ ipv4 {{ import none; export where source = RTS_BGP; }}; merge paths on; }}\n\
         template bgp lbpeer {{\n  local as 65000;\n  hold time {HOLD_S};\n  keepalive time 1;\n  \
         connect delay time 1;\n  connect retry time 1;\n  error wait time 1, 5;\n  \
         debug {{ states, events }};\n  ipv4 {{ import all; export none; }};\n}}\n"
    );
    for i in 1..=n {
        s += &format!(
            "protocol bgp a{i} from lbpeer {{ neighbor {} as 65001; }}\n",
            announcer_addr(i)
        );
    }
    s
}

fn lab(tag: &str, n: usize) -> Result<Lab> {
    let net = TestNet::new(tag)?;
    net.require_tools(&["bird", "birdc"])?;
    let router = net.ns("router")?;
    let sw = net.ns("sw")?;
    let br = sw.bridge("br0")?;
    for ns in [&router, &sw] {
        ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
    }
    let (r0, p) = net.veth(&router, "eth0", &sw, "p-router")?;
    p.set_master(&br)?;
    r0.addr_add(&format!("{ROUTER}/24"))?;
    let mut announcers = Vec::new();
    for i in 1..=n {
        let a = net.ns(&format!("a{i}"))?;
        a.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        let (e, p) = net.veth(&a, "eth0", &sw, &format!("p-a{i}"))?;
        p.set_master(&br)?;
        e.addr_add(&format!("{}/24", announcer_addr(i)))?;
        announcers.push(a);
    }
    for a in &announcers {
        a.ping(ROUTER, 1)?;
    }
    let dir = net.dir("router")?;
    let conf = dir.join("bird.conf");
    std::fs::write(&conf, router_config(n))?;
    let router_socket = dir.join("bird.ctl");
    let conf_s = conf.to_string_lossy().into_owned();
    let sock_s = router_socket.to_string_lossy().into_owned();
    let router_bird = router
        .cmd(["bird", "-f", "-c", &conf_s, "-s", &sock_s])
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !router_socket.exists() {
        ensure!(
            router_bird.is_running(),
            "router BIRD exited: {}",
            router_bird.log()
        );
        ensure!(Instant::now() < deadline, "router BIRD did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Lab {
        net,
        router,
        router_bird,
        router_socket,
        announcers,
    })
}

impl Lab {
    /// The BGP configuration of announcer `i`.
    fn spec(&self, i: usize) -> Result<BgpSpec> {
        // A directory that does not exist yet: the announcer creates it and removes it on stop.
        let dir = self.net.dir(&format!("bgp-a{i}"))?.join("state");
        Ok(owner_spec(&announcer_addr(i), &dir.display().to_string()))
    }

    /// Start announcer `i` inside its namespace (BIRD inherits the namespace of the thread that
    /// spawns it: the announcer's keeper thread, created inside the namespace).
    fn start(&self, i: usize) -> Result<Announcer> {
        let spec = self.spec(i)?;
        let a = self.announcers[i - 1]
            .enter(move || Announcer::start(&spec))?
            .with_context(|| format!("starting announcer a{i}"))?;
        Ok(a)
    }

    /// The router's next hops for `vip`/32 in its kernel table (empty: no route).
    fn gateways(&self, vip: &str) -> Result<BTreeSet<String>> {
        let out = self
            .router
            .ip(&["route", "show", "exact", &format!("{vip}/32")])?;
        let words: Vec<&str> = out.stdout.split_whitespace().collect();
        Ok(words
            .windows(2)
            .filter(|w| w[0] == "via")
            .map(|w| w[1].to_string())
            .collect())
    }

    /// Wait until the router's next hops for `vip` are exactly `want`; returns how long it took.
    fn wait_gateways(&self, vip: &str, want: &[&str], limit: Duration) -> Result<Duration> {
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        let t0 = Instant::now();
        loop {
            let got = self.gateways(vip)?;
            if got == want {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > limit {
                bail!(
                    "router's next hops for {vip}: {got:?}, expected {want:?} within {limit:?}\n\
                     router BIRD:\n{}\nroute table:\n{}",
                    self.birdc("show protocols")?,
                    self.router.routes()?
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn birdc(&self, cmd: &str) -> Result<String> {
        let sock = self.router_socket.to_string_lossy().into_owned();
        let mut args = vec!["birdc", "-s", &sock];
        args.extend(cmd.split_whitespace());
        Ok(self.router.cmd(args).run()?.stdout)
    }
}

fn wait_established(a: &Announcer, name: &str) -> Result<Duration> {
    let t0 = Instant::now();
    loop {
        let s = a.session_state()?;
        if s == "Established" {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > SESSION_UP {
            bail!(
                "{name}: BGP session {s} after {SESSION_UP:?}; BIRD's log:\n{}",
                a.log_tail(20)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal address")
}

#[test]
fn two_announcers_build_one_ecmp_route() -> Result<()> {
    let _g = serial();
    let lab = lab("announce-ecmp", 2)?;
    let (n1, n2) = (announcer_addr(1), announcer_addr(2));
    let mut a1 = lab.start(1)?;
    let mut a2 = lab.start(2)?;
    let dir1 = a1.state_dir().to_path_buf();
    ensure!(dir1.join("bird.conf").is_file() && a1.socket().exists());
    let t1 = wait_established(&a1, "a1")?;
    let t2 = wait_established(&a2, "a2")?;
    println!("sessions established after {t1:?} and {t2:?}");

    // One announcer: a single-path route.
    ensure!(
        a1.set(&[ip(VIP2), ip(VIP1), ip(VIP1)])?,
        "first set changes"
    );
    ensure!(
        a1.announced() == [ip(VIP1), ip(VIP2)],
        "{:?}",
        a1.announced()
    );
    ensure!(
        !a1.set(&[ip(VIP1), ip(VIP2)])?,
        "the same set again changes nothing"
    );
    let t = lab.wait_gateways(VIP1, &[&n1], CONVERGE)?;
    lab.wait_gateways(VIP2, &[&n1], CONVERGE)?;
    println!("announce (one path) reached the router's kernel table in {t:?}");

    // Both: one ECMP route with both next hops.
    ensure!(a2.set(&[ip(VIP1)])?);
    let t = lab.wait_gateways(VIP1, &[&n1, &n2], CONVERGE)?;
    println!("second announcer merged into the ECMP route in {t:?}");
    let route = lab
        .router
        .ip(&["route", "show", "exact", &format!("{VIP1}/32")])?;
    ensure!(
        route.stdout.matches("nexthop via").count() == 2,
        "expected a multipath route, got {:?}",
        route.stdout
    );
    ensure!(lab.gateways(VIP2)? == BTreeSet::from([n1.clone()]));

    // a1 stops announcing VIP1: only that path goes.
    ensure!(a1.set(&[ip(VIP2)])?);
    let t = lab.wait_gateways(VIP1, &[&n2], CONVERGE)?;
    println!("withdraw of one path in {t:?}");
    lab.wait_gateways(VIP2, &[&n1], CONVERGE)?;

    // withdraw_all: a2's only route goes.
    a2.withdraw_all()?;
    ensure!(a2.announced().is_empty());
    let t = lab.wait_gateways(VIP1, &[], CONVERGE)?;
    println!("withdraw_all removed the last path in {t:?}");
    ensure!(
        a2.session_state()? == "Established",
        "withdrawing keeps the session"
    );

    // stop: BIRD says Cease, the router withdraws at once; the state directory is gone.
    let t0 = Instant::now();
    a1.stop();
    let stop_took = t0.elapsed();
    let t = lab.wait_gateways(VIP2, &[], CONVERGE)?;
    println!("stop took {stop_took:?}; route gone {t:?} after it returned");
    ensure!(!dir1.exists(), "{} left behind", dir1.display());

    // A BIRD killed behind the announcer's back: the kernel closes its TCP session, so the
    // router withdraws without waiting for the hold timer; the announcer reports the exit.
    ensure!(a2.set(&[ip(VIP1)])?);
    lab.wait_gateways(VIP1, &[&n2], CONVERGE)?;
    let pid = a2.pid().to_string();
    let t0 = Instant::now();
    lab.router.cmd(["kill", "-9", &pid]).run()?;
    lab.wait_gateways(VIP1, &[], Duration::from_secs(HOLD_S))?;
    println!(
        "BIRD killed: route gone after {:?} (hold time {HOLD_S} s)",
        t0.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(2);
    while a2.is_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    match a2.set(&[ip(VIP2)]) {
        Err(AnnounceError::Exited { status, .. }) => {
            ensure!(
                status.contains("SIGKILL") || status.contains('9'),
                "{status}"
            )
        }
        other => bail!("set after BIRD was killed: {other:?}"),
    }
    ensure!(lab.router_bird.is_running(), "router BIRD still up");
    drop(a2);
    Ok(())
}

#[test]
fn silent_failure_is_withdrawn_after_the_hold_time() -> Result<()> {
    let _g = serial();
    let lab = lab("announce-hold", 1)?;
    let mut a1 = lab.start(1)?;
    wait_established(&a1, "a1")?;
    a1.set(&[ip(VIP1)])?;
    lab.wait_gateways(VIP1, &[&announcer_addr(1)], CONVERGE)?;
    // The announcer's link goes down: no FIN, no Cease, just silence.
    lab.announcers[0].link("eth0").down()?;
    let t = lab.wait_gateways(VIP1, &[], Duration::from_secs(HOLD_S) + CONVERGE)?;
    println!("silent failure: route withdrawn after {t:?} (hold time {HOLD_S} s)");
    // The router keeps the route until the hold timer runs out. It heard the last keepalive
    // (every 1 s) up to 1 s before the link went down, and BIRD starts its timers with up to
    // 25 % jitter (RFC 4271 §10): the earliest expiry is 0.75 × 3 - 1 s after the cut.
    ensure!(
        t >= Duration::from_millis(HOLD_S * 750 - 1000 - 50),
        "withdrawn after {t:?}, before the hold timer could expire"
    );
    Ok(())
}

/// The BGP settings of an announcer at `addr` with its state in `dir`.
fn owner_spec(addr: &str, dir: &str) -> BgpSpec {
    BgpSpec {
        hold_time_s: HOLD_S as u16,
        state_dir: Some(dir.to_string()),
        ..BgpSpec::new(65001, ip(ROUTER), 65000, addr.parse().unwrap())
    }
}

/// Not a test on its own: the process `bird_dies_with_its_owner_process` runs (this binary again,
/// inside a namespace) to own an `Announcer` and be killed. Without the environment variable it
/// returns at once.
#[test]
#[ignore = "helper process of bird_dies_with_its_owner_process"]
fn announcer_owner_process() {
    let Ok(arg) = std::env::var("FP_ANNOUNCE_OWNER_CONFIG") else {
        return;
    };
    let (addr, dir) = arg.split_once(' ').unwrap();
    let spec = owner_spec(addr, dir);
    let mut a = Announcer::start(&spec).unwrap();
    a.set(&[ip(VIP1)]).unwrap();
    println!("owner: announcing, BIRD pid {}", a.pid());
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn bird_dies_with_its_owner_process() -> Result<()> {
    let _g = serial();
    let lab = lab("announce-owner", 1)?;
    let dir = lab.net.dir("bgp-owner")?;
    let toml = format!("{} {}", announcer_addr(1), dir.display());
    let exe = std::env::current_exe()?;
    let exe = exe.to_string_lossy().into_owned();
    let owner = lab.announcers[0]
        .cmd([
            exe.as_str(),
            "announcer_owner_process",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("FP_ANNOUNCE_OWNER_CONFIG", &toml)
        .spawn()?;
    owner.wait_log("owner: announcing", Duration::from_secs(15))?;
    let log = owner.log();
    let bird_pid: u32 = log
        .split("BIRD pid ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no BIRD pid in {log:?}"))?;
    ensure!(fp_testnet::pid_alive(bird_pid));
    // Session up and route installed (the owner's BIRD started 1 s ago at most).
    lab.wait_gateways(VIP1, &[&announcer_addr(1)], SESSION_UP)?;

    // SIGKILL to the owner's process group: BIRD has its own group, so only the kernel's
    // parent-death signal can stop it.
    let t0 = Instant::now();
    owner.kill();
    let deadline = t0 + Duration::from_secs(2);
    while fp_testnet::pid_alive(bird_pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let died = t0.elapsed();
    ensure!(
        !fp_testnet::pid_alive(bird_pid),
        "BIRD (pid {bird_pid}) survived its owner by {died:?}"
    );
    lab.wait_gateways(VIP1, &[], Duration::from_secs(HOLD_S))?;
    let gone = t0.elapsed();
    println!("owner killed: BIRD gone after {died:?}, route withdrawn after {gone:?}");
    ensure!(
        gone < Duration::from_secs(HOLD_S),
        "the router waited for the hold timer ({gone:?})"
    );
    Ok(())
}
