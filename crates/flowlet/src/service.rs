//! `flowplane flowlet --interface IN --paths IF1,IF2,... --next-hops MAC1,MAC2,...`: the Flowlet
//! balancer on live interfaces — Switcharoo's driving network function between one input and N
//! output paths, each worker the same stage as offline ([`crate::stage`]) on the service runner.
//!
//! ```text
//!  worker w: rx_burst(IN, queue w) ─► parse (malformed frames dropped by reason)
//!              ─► FlowletLb (IPv4, IPv6): the flow-state table decides, inserting in the data path,
//!                 recirculating what needs more passes
//!              ─► decision Forward(o): destination MAC := next hop o, source MAC := path o's MAC
//!                 ─► tx_burst(path o, queue w)
//!  frames arriving on a path port are dropped (counted): the paths carry traffic away only
//! ```
//!
//! Time is each frame's receive time (docs/live-ports.md says what each port driver stamps), so a
//! flowlet is a run of a flow's packets whose gaps, as this host received them, stay under
//! `--gap-us`. The gap must exceed the largest difference in delay between the paths (plus the
//! time a packet may wait in this host), or a moved flowlet can overtake its predecessor; with a
//! gap shorter than any pause (`--gap-us 0.001`) every packet is a flowlet of its own: per-packet
//! spraying, the usual negative control.
//!
//! Ports, as for the switch: every interface with one receive and one transmit queue per worker
//! (AF_PACKET fan-out or AF_XDP queues), every frame captured; an AF_XDP worker count is capped by
//! the smallest number of queues among the interfaces. `--admin ADDR` serves the metrics (frames
//! by path, flowlet events, drops by reason, passes), `/status` and `/trace`: a frame carrying the
//! tracer's probe is balanced as usual and recorded with its flow, the output and next hop it was
//! given and the passes it took.

use crate::metrics::FlowletView;
use crate::stage::{FlowletRecord, FlowletStage, Hooks, LiveStats, PathMemory, MAX_PROBES};
use anyhow::{bail, Result};
use fp_control::log;
use fp_engine::driver::{Finished, Options};
use fp_engine::live::Capture;
use fp_flowstate::FlowletConfig;
use fp_pipeline::packet::MAX_BURST;
use fp_pipeline::trace::ProbeSender;
use fp_service::{LiveOptions, Ports, Service, Setup};
use fp_wire::ethernet::MacAddr;
use std::sync::Arc;
use std::time::Duration;

/// The live balancer's settings (from `flowplane flowlet`'s arguments).
pub struct FlowletLive {
    /// The input interface.
    pub input: String,
    /// The output paths' interfaces; output `o` is `paths[o]`.
    pub paths: Vec<String>,
    /// Next-hop MAC per path.
    pub next_hops: Vec<MacAddr>,
    /// The balancer's settings (outputs = paths).
    pub lb: FlowletConfig,
    /// Look for tracer probes.
    pub trace: bool,
}

/// The Flowlet balancer on the runner.
struct FlowletService {
    o: FlowletLive,
    /// The input, then the paths: port index = position.
    interfaces: Vec<String>,
    src_macs: Vec<MacAddr>,
    stats: Vec<Arc<LiveStats>>,
}

/// Run the live balancer until SIGTERM/SIGINT.
pub fn run(o: FlowletLive, live: &LiveOptions) -> Result<()> {
    let n = o.paths.len();
    if n == 0 {
        bail!("--paths: at least one output path is needed");
    }
    if o.next_hops.len() != n {
        bail!(
            "--next-hops: {} MAC(s) for {n} path(s); give one next hop per path",
            o.next_hops.len()
        );
    }
    let mut interfaces = vec![o.input.clone()];
    interfaces.extend(o.paths.iter().cloned());
    for (i, p) in interfaces.iter().enumerate() {
        if interfaces[..i].contains(p) {
            bail!("--interface/--paths: {p:?} is listed twice");
        }
    }
    let src_macs = o
        .paths
        .iter()
        .map(|p| Ok(fp_engine::live::interface_mac(p)?))
        .collect::<Result<_>>()?;
    fp_service::run(live, |_events| {
        Ok(FlowletService {
            o,
            interfaces,
            src_macs,
            stats: Vec::new(),
        })
    })
}

impl Service for FlowletService {
    type Stage = FlowletStage;
    type Probe = FlowletRecord;
    type Event = ();
    type View = FlowletView;

    fn name(&self) -> &'static str {
        "flowlet"
    }

    fn ports(&self) -> Ports {
        Ports {
            interfaces: self.interfaces.clone(),
            capture: Capture::All,
            ring_bytes: None,
        }
    }

    fn driver_options(&self, o: &mut Options) {
        o.idle_after = Duration::from_millis(1);
        o.maintain_every = Duration::from_millis(100);
        o.buffers = self.o.lb.engine.recirc_capacity + MAX_BURST * (self.o.paths.len() + 8);
    }

    fn stage(
        &mut self,
        setup: Setup<'_>,
        probes: ProbeSender<FlowletRecord>,
    ) -> Result<FlowletStage> {
        let st = Arc::new(LiveStats::new(self.o.paths.len()));
        // The batching window as offline (a tenth of the gap): a burst arriving later than that
        // after the last pass first finishes the packets still recirculating.
        let window_ns = self.o.lb.flowlet_timeout_ns / 10;
        let mut stage =
            FlowletStage::new(self.o.lb.clone(), self.o.next_hops.clone(), window_ns, 1)?
                .per_path(1, self.src_macs.clone());
        stage.live = Some(Hooks {
            worker: setup.worker,
            stats: st.clone(),
            trace: self.o.trace.then_some(probes),
            paths: Arc::new(self.o.paths.clone()),
            probes: Vec::with_capacity(MAX_PROBES),
            last_path: PathMemory::new(),
        });
        self.stats.push(st);
        Ok(stage)
    }

    fn view(&self, _: &[Arc<fp_engine::driver::WorkerCounters>]) -> Arc<FlowletView> {
        Arc::new(FlowletView {
            names: Arc::new(self.interfaces.clone()),
            next_hops: self.o.next_hops.clone(),
            workers: self.stats.clone(),
            gap_ns: self.o.lb.flowlet_timeout_ns,
        })
    }

    fn ready_status(&self) -> String {
        format!(
            "balancing flowlets from {} over {} path(s) ({}), gap {} us",
            self.o.input,
            self.o.paths.len(),
            self.o.paths.join(","),
            self.o.lb.flowlet_timeout_ns as f64 / 1e3
        )
    }

    fn finished(&mut self, stages: Vec<Finished<FlowletStage>>) {
        let mut per_path = vec![0u64; self.o.paths.len()];
        for w in &self.stats {
            for (t, c) in per_path.iter_mut().zip(&w.packets) {
                *t += c.get();
            }
        }
        log(format_args!(
            "{} worker(s) stopped; frames per path: {per_path:?}",
            stages.len()
        ));
    }
}
