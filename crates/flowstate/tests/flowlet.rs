//! The Flowlet load balancer: flowlet semantics, output choice, counters, and the batch API contract
//! (every token gets exactly one decision, in per-flow order).

use fp_flowstate::workload::{TrafficGen, Workload};
use fp_flowstate::*;
use std::collections::HashMap;

fn key(i: u32) -> FiveTuple {
    FiveTuple::new(0x0a00_0000 | i, 0x0a63_0001, 10_000 + i as u16, 443, 6)
}

fn pkt(k: FiveTuple, ts: u64, token: u32) -> PacketIn {
    PacketIn {
        key: k,
        ts_ns: ts,
        len: 1000,
        token,
    }
}

fn forward(d: &Decision) -> u16 {
    match d.action {
        Action::Forward(o) => o,
        a => panic!("{a:?}"),
    }
}

#[test]
fn a_flowlet_keeps_its_output_and_a_gap_starts_a_new_one() {
    let mut lb: FlowletLb = FlowletLb::new(FlowletConfig::default()).unwrap();
    let mut out = Vec::new();
    let k = key(1);
    lb.process(0, &[pkt(k, 0, 0)], &mut out);
    lb.process(20_000, &[], &mut out); // the insertion pass
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].event, out[0].passes), (FlowletEvent::NewFlowlet, 2));
    let first = forward(&out[0]);
    // 30 us later: same flowlet.
    lb.process(30_000, &[pkt(k, 30_000, 1)], &mut out);
    assert_eq!(
        (forward(&out[1]), out[1].event),
        (first, FlowletEvent::SameFlowlet)
    );
    // 100 us gap: the state expired, the next packet starts a new flowlet (two passes again).
    lb.process(130_000, &[pkt(k, 130_000, 2)], &mut out);
    lb.process(130_100, &[], &mut out);
    assert_eq!(out[2].event, FlowletEvent::NewFlowlet);
    let c = lb.counters();
    assert_eq!((c.new_flowlets, c.same_flowlet, c.gap_flowlets), (2, 1, 0));
    assert_eq!(lb.table_stats().inserts, 2);
}

#[test]
fn a_gap_seen_before_expiry_is_still_a_new_flowlet() {
    // The entry's clock starts at its insertion pass (20 us), but the flow's last packet arrived at 0:
    // a packet arriving at 60 us finds the entry alive and must still see a 60 us gap.
    let mut lb: FlowletLb = FlowletLb::new(FlowletConfig::default()).unwrap();
    let mut out = Vec::new();
    let k = key(2);
    lb.process(0, &[pkt(k, 0, 0)], &mut out);
    lb.process(20_000, &[], &mut out);
    lb.process(60_000, &[pkt(k, 60_000, 1)], &mut out);
    assert_eq!(out[1].event, FlowletEvent::GapFlowlet);
    assert_eq!(lb.counters().gap_flowlets, 1);
}

#[test]
fn least_loaded_spreads_new_flowlets_evenly() {
    let cfg = FlowletConfig {
        outputs: 4,
        ..FlowletConfig::default()
    };
    let mut lb: FlowletLb = FlowletLb::new(cfg).unwrap();
    let mut out = Vec::new();
    for b in 0..100u32 {
        let batch: Vec<_> = (0..10)
            .map(|i| pkt(key(b * 10 + i), b as u64 * 100, b * 10 + i))
            .collect();
        lb.process(b as u64 * 100, &batch, &mut out);
    }
    lb.flush(20_000, &mut out);
    assert_eq!(out.len(), 1000);
    let c = lb.counters();
    assert_eq!(c.bytes_per_output, vec![250_000; 4]);
    assert_eq!(c.new_flowlets, 1000);
}

#[test]
fn random_policy_is_reproducible_and_uses_every_output() {
    let run = || {
        let cfg = FlowletConfig {
            outputs: 8,
            policy: Policy::Random,
            ..FlowletConfig::default()
        };
        let mut lb: FlowletLb = FlowletLb::new(cfg).unwrap();
        let mut out = Vec::new();
        let batch: Vec<_> = (0..400).map(|i| pkt(key(i), 0, i)).collect();
        lb.process(0, &batch, &mut out);
        lb.flush(1, &mut out);
        out.iter().map(forward).collect::<Vec<_>>()
    };
    let a = run();
    assert_eq!(a, run());
    for o in 0..8 {
        assert!(a.iter().filter(|&&x| x == o).count() > 20);
    }
}

#[test]
fn every_token_gets_one_decision_in_flow_order() {
    for w in [
        Workload::ONE,
        Workload::TWO,
        Workload::EIGHT,
        Workload::Zipf {
            flows: 3000,
            exponent: 1.1,
        },
    ] {
        let cfg = FlowletConfig {
            table: Config::with_slots(512),
            ..FlowletConfig::default()
        };
        let mut lb: FlowletLb = FlowletLb::new(cfg).unwrap();
        let mut gen = TrafficGen::new(w, 100.0, 1000, 5);
        let mut out = Vec::new();
        let mut flow_of = Vec::new();
        let mut batch = Vec::new();
        let mut now = 0;
        for b in 0..1000u32 {
            batch.clear();
            for _ in 0..32 {
                let p = gen.next().unwrap();
                batch.push(PacketIn {
                    key: p.key,
                    ts_ns: p.at,
                    len: p.len,
                    token: flow_of.len() as u32,
                });
                flow_of.push((p.flow, p.seq));
                now = p.at;
            }
            lb.process(now, &batch, &mut out);
            assert!(lb.in_flight() <= 4096, "batch {b}");
        }
        lb.flush(now, &mut out);
        assert_eq!(out.len(), flow_of.len(), "{}", w.name());
        let mut seen = vec![false; flow_of.len()];
        let mut last: HashMap<u64, u32> = HashMap::new();
        let mut output_of: HashMap<u64, u16> = HashMap::new();
        for d in &out {
            assert!(
                !std::mem::replace(&mut seen[d.token as usize], true),
                "token twice"
            );
            let (flow, seq) = flow_of[d.token as usize];
            if let Some(&prev) = last.get(&flow) {
                assert!(seq > prev, "flow {flow} reordered");
            }
            last.insert(flow, seq);
            // Within a flowlet the output never changes.
            let o = forward(d);
            if d.event == FlowletEvent::SameFlowlet {
                assert_eq!(output_of.get(&flow), Some(&o));
            }
            output_of.insert(flow, o);
        }
        let c = lb.counters();
        assert_eq!(
            c.new_flowlets + c.gap_flowlets + c.same_flowlet,
            out.len() as u64
        );
    }
}

#[test]
fn bad_configs_name_the_field() {
    let e = FlowletLb::<FiveTuple>::new(FlowletConfig {
        outputs: 0,
        ..FlowletConfig::default()
    })
    .err()
    .unwrap();
    assert!(e.to_string().contains("outputs = 0"));
    let e = FlowletLb::<FiveTuple>::new(FlowletConfig {
        table: Config {
            transient_cells: 0,
            ..Config::default()
        },
        ..FlowletConfig::default()
    })
    .err()
    .unwrap();
    assert!(e.to_string().contains("transient_cells = 0"), "{e}");
}
