//! `flowplane cluster run --node i`: one node of a ScaleBricks cluster whose state lives in etcd,
//! on the service runner (`fp-service`).
//!
//! * **Start.** The settings every node must share (mode, node count, capacity, hash seed) are
//!   written to `<prefix>config` by the first node; a node whose file disagrees refuses to start.
//!   A node restarted with the same id waits for its previous lease to expire. It reads every
//!   entry at one revision and builds its [`Member`](crate::Member) (its FIB share and its partition-table
//!   replica).
//! * **Data path.** The runner opens the node's external interfaces and its interconnect (one
//!   worker, every frame captured) and runs the node's stage (`crate::stage::NodeStage`).
//! * **Membership.** Once the node forwards, it registers `<prefix>members/<id>` under a lease it
//!   keeps alive (the runner's tick), and a thread watches the prefix from the next revision: each
//!   entry change reaches the control thread as an event and is applied in revision order, then
//!   the member key is rewritten with the revision applied, the entry digest and any error. A
//!   watch that breaks resumes after the last revision seen; one whose history was compacted reads
//!   the state again and applies the difference. A member key that disappears (its lease expired)
//!   marks that node down: frames for its entries are dropped at the ingress node, not flooded.
//! * **Shutdown** (SIGTERM): the node revokes its lease (the others mark it down at once), the
//!   worker drains and the process exits 0.

use crate::config::{Config, NodeSection};
use crate::harness::{self, StatsReader, RING_BYTES};
use crate::membership::Membership;
use crate::metrics::NodeView;
use crate::stage::{NodeConfig, NodeStage, NodeTrace, PublishedCounters, Tables};
use crate::store::Input;
use anyhow::{anyhow, bail, Result};
use fp_control::log;
use fp_engine::driver::{Finished, Options, WorkerCounters};
use fp_engine::live::Capture;
use fp_pipeline::trace::ProbeSender;
use fp_service::{Context, Events, LiveOptions, Ports, Service, Setup};
use std::sync::Arc;
use std::time::Duration;

/// How often the lease and the member record are looked after.
const TICK: Duration = Duration::from_millis(50);

/// A cluster node on the runner: its data path, and its membership on the control side.
struct NodeService {
    cfg: Config,
    id: u8,
    me: NodeSection,
    trace: bool,
    events: Events<Input>,
    node_cfg: NodeConfig,
    tables: Option<Tables>,
    published: Arc<PublishedCounters>,
    membership: Membership,
}

/// Run node `id` of the cluster `cfg` until SIGTERM, its worker pinned to `cpu` if given.
pub fn run(cfg: &Config, id: u8, cpu: Option<usize>, trace: bool) -> Result<()> {
    let Some(me) = cfg.nodes.get(id as usize).cloned() else {
        bail!("--node {id}: the configuration has nodes 0..{}", cfg.n());
    };
    let live = LiveOptions {
        workers: 1,
        cpus: cpu.into_iter().collect(),
        admin: me.admin,
        pin: cpu.is_some(),
        ..LiveOptions::new(cfg.driver)
    };
    fp_service::run(&live, |events| {
        let (membership, tables, node_cfg) = Membership::join(cfg, id, &me)?;
        Ok(NodeService {
            cfg: cfg.clone(),
            id,
            me,
            trace,
            events,
            node_cfg,
            tables: Some(tables),
            published: Arc::new(PublishedCounters::default()),
            membership,
        })
    })
}

impl Service for NodeService {
    type Stage = NodeStage;
    type Probe = NodeTrace;
    type Event = Input;
    type View = NodeView;

    fn name(&self) -> &'static str {
        "cluster"
    }

    fn ports(&self) -> Ports {
        let mut interfaces = self.me.external.clone();
        interfaces.push(self.me.interconnect.clone());
        Ports {
            interfaces,
            capture: Capture::All,
            ring_bytes: Some(RING_BYTES),
        }
    }

    fn driver_options(&self, o: &mut Options) {
        o.name = format!("fp-node{}", self.id);
        harness::driver_options(&self.node_cfg, o);
    }

    fn stage(&mut self, _setup: Setup<'_>, probes: ProbeSender<NodeTrace>) -> Result<NodeStage> {
        let tables = self
            .tables
            .take()
            .ok_or_else(|| anyhow!("a cluster node runs one worker"))?;
        let mut stage = NodeStage::new(self.node_cfg, tables);
        stage.publish_to(self.published.clone());
        if self.trace {
            stage.trace_to(probes);
        }
        Ok(stage)
    }

    fn view(&self, engine: &[Arc<WorkerCounters>]) -> Arc<NodeView> {
        Arc::new(NodeView {
            cfg: self.cfg.clone(),
            id: self.id,
            member: self.membership.member.clone(),
            reader: StatsReader::new(engine[0].clone(), self.published.clone()),
            applied: self.membership.applied.clone(),
            up: self.membership.up.clone(),
        })
    }

    /// Register, then follow the changes.
    fn started(&mut self, _cx: &mut Context<'_>) -> Result<()> {
        self.membership.start(self.events.clone())
    }

    fn ready_status(&self) -> String {
        let (up, n) = self.membership.members_up();
        format!(
            "cluster {:?} node {}: external {} + interconnect {} on {}; {up} of {n} members up",
            self.cfg.cluster.name,
            self.id,
            self.me.external.join(","),
            self.me.interconnect,
            self.cfg.driver,
        )
    }

    fn tick_every(&self) -> Duration {
        TICK
    }

    fn tick(&mut self, _cx: &mut Context<'_>) -> Result<()> {
        if self.membership.watch_stopped() {
            bail!("the watch stopped");
        }
        self.membership.sync();
        Ok(())
    }

    fn event(&mut self, input: Input, _cx: &mut Context<'_>) -> Result<()> {
        self.membership.apply(input);
        self.membership.sync();
        Ok(())
    }

    fn reload(&mut self, _cx: &mut Context<'_>) -> Result<u64> {
        bail!(
            "a cluster node takes its entries from etcd (flowplane cluster entries ...); \
             its configuration file is read at start"
        )
    }

    /// Leave at once: the other nodes mark this one down now, not after the lease's TTL.
    fn drain(&mut self, _cx: &mut Context<'_>, _clean: bool) -> Duration {
        self.membership.leave();
        Duration::ZERO
    }

    fn shutdown(&mut self) {
        self.membership.join_watch();
    }

    fn finished(&mut self, stages: Vec<Finished<NodeStage>>) {
        if let Some(f) = stages.first() {
            let st = harness::stats_of(&f.counters, &f.stage.published());
            log(format_args!(
                "stopped: frames local {}, one hop {}, redirected {}; drops {}",
                st.ports.by_hops[0],
                st.ports.by_hops[1],
                st.ports.by_hops[2],
                st.counters.drops()
            ));
        }
    }
}
