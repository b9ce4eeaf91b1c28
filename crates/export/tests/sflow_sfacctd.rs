//! sFlow datagrams from `fp_export::sflow` decoded by an independent collector, pmacct's
//! `sfacctd` (Debian package `pmacct`; scripts/deps.sh installs it).
//!
//! The test starts `sfacctd` on 127.0.0.1 with a free UDP port and a configuration written to a
//! temporary directory: the print plugin writes one JSON line per aggregate (interfaces, VLAN,
//! MACs, addresses, ports, sampling rate, agent, sub-agent) without renormalisation, so the packet
//! count is the number of samples and the byte count the sum of the reported frame lengths; the
//! counter log writes one JSON line per generic interface counter record. It sends hand-built
//! Ethernet frames as flow samples and a few counter samples from an IPv4 agent and an IPv6 agent,
//! waits for both files, and compares every decoded field with what was sent.
//!
//! A missing `sfacctd` fails the test with the reason. `FP_EXPORT_SHOW=1` prints what sfacctd
//! wrote.

use fp_export::sflow::{
    Agent, CounterSample, DatagramBuilder, FlowSample, IfCounters, Output, FCS_LEN,
    IF_DIRECTION_FULL_DUPLEX, IF_STATUS_ADMIN_UP, IF_STATUS_OPER_UP, IF_TYPE_ETHERNET_CSMACD,
    MAX_HEADER,
};
use fp_testnet::collectors::json_field as field;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

const SFACCTD: &str = "/usr/sbin/sfacctd";
/// How long to wait for the daemon to bind and for its output.
const DEADLINE: Duration = Duration::from_secs(10);

const AGENT_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const AGENT_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x51);
const SUB_AGENT: u32 = 7;
const RATE: u32 = 100;

/// One direction of traffic through the switch: its frames and where they went.
struct Flow {
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    /// Frame length without FCS.
    frame_len: usize,
    input: u32,
    output: u32,
    vlan: u16,
    /// Samples sent for this flow.
    samples: u32,
}

const FLOW_A: Flow = Flow {
    src_mac: [0x02, 0x11, 0x22, 0x33, 0x44, 0x55],
    dst_mac: [0x02, 0x66, 0x77, 0x88, 0x99, 0xaa],
    src_ip: Ipv4Addr::new(10, 0, 0, 1),
    dst_ip: Ipv4Addr::new(10, 0, 0, 2),
    src_port: 40000,
    dst_port: 53,
    // Longer than MAX_HEADER: the sample carries the first 128 bytes only.
    frame_len: 1000,
    input: 3,
    output: 5,
    vlan: 10,
    samples: 3,
};

const FLOW_B: Flow = Flow {
    src_mac: [0x02, 0x66, 0x77, 0x88, 0x99, 0xaa],
    dst_mac: [0x02, 0x11, 0x22, 0x33, 0x44, 0x55],
    src_ip: Ipv4Addr::new(10, 0, 0, 2),
    dst_ip: Ipv4Addr::new(10, 0, 0, 1),
    src_port: 53,
    dst_port: 40000,
    // Shorter than MAX_HEADER, and not a multiple of 4: the header is padded.
    frame_len: 83,
    input: 5,
    output: 3,
    vlan: 20,
    samples: 2,
};

/// Sent by the IPv6 agent.
const FLOW_C: Flow = Flow {
    src_mac: [0x02, 0xcc, 0xcc, 0xcc, 0xcc, 0x01],
    dst_mac: [0x02, 0xcc, 0xcc, 0xcc, 0xcc, 0x02],
    src_ip: Ipv4Addr::new(10, 1, 0, 1),
    dst_ip: Ipv4Addr::new(10, 1, 0, 2),
    src_port: 1111,
    dst_port: 2222,
    frame_len: 64,
    input: 7,
    output: 8,
    vlan: 30,
    samples: 1,
};

// Flow A's header is truncated by the encoder; flow B's is copied whole and padded.
const _: () = assert!(
    FLOW_A.frame_len > MAX_HEADER
        && FLOW_B.frame_len < MAX_HEADER
        && !FLOW_B.frame_len.is_multiple_of(4)
);

/// An untagged Ethernet II / IPv4 / UDP frame of `f.frame_len` bytes (no FCS). Untagged, so the
/// VLAN sfacctd reports can only come from the extended_switch record.
fn frame(f: &Flow) -> Vec<u8> {
    let mut p = Vec::with_capacity(f.frame_len);
    p.extend_from_slice(&f.dst_mac);
    p.extend_from_slice(&f.src_mac);
    p.extend_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (f.frame_len - 14) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64; // TTL
    ip[9] = 17; // UDP
    ip[12..16].copy_from_slice(&f.src_ip.octets());
    ip[16..20].copy_from_slice(&f.dst_ip.octets());
    let mut sum = 0u32;
    for w in ip.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p.extend_from_slice(&ip);
    p.extend_from_slice(&f.src_port.to_be_bytes());
    p.extend_from_slice(&f.dst_port.to_be_bytes());
    p.extend_from_slice(&(ip_len - 20).to_be_bytes());
    p.extend_from_slice(&[0, 0]); // no UDP checksum
    p.resize(f.frame_len, 0x5a);
    p
}

fn if_counters(index: u32, in_octets: u64, out_octets: u64) -> IfCounters {
    IfCounters {
        index,
        if_type: IF_TYPE_ETHERNET_CSMACD,
        speed: 10_000_000_000,
        direction: IF_DIRECTION_FULL_DUPLEX,
        status: IF_STATUS_ADMIN_UP | IF_STATUS_OPER_UP,
        in_octets,
        in_ucast: 1001,
        in_multicast: 1002,
        in_broadcast: 1003,
        in_discards: 1004,
        in_errors: 1005,
        in_unknown_protos: 1006,
        out_octets,
        out_ucast: 2001,
        out_multicast: 2002,
        out_broadcast: 2003,
        out_discards: 2004,
        out_errors: 2005,
        promiscuous: 2,
    }
}

/// Removes the directory on every exit path.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let path = std::env::temp_dir().join(format!("fp-export-sfacctd-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create the temporary directory");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The running collector; stopped on every exit path (SIGINT, then SIGKILL to its process group).
struct Sfacctd {
    child: Child,
    log: PathBuf,
}

impl Sfacctd {
    fn start(config: &Path, log: PathBuf) -> Sfacctd {
        if !Path::new(SFACCTD).exists() {
            panic!(
                "{SFACCTD} is missing: install Debian's pmacct package (scripts/deps.sh does) \
                 to run this test"
            );
        }
        let child = Command::new(SFACCTD)
            .arg("-f")
            .arg(config)
            // Its own process group, so that the print plugin's process can be stopped with it.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {SFACCTD}: {e}"));
        Sfacctd { child, log }
    }

    /// The daemon's log, for failure messages.
    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_else(|e| format!("(no log: {e})"))
    }

    /// Panics with the log if the daemon has exited.
    fn check_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("sfacctd exited ({status}); its log:\n{}", self.log());
        }
    }

    /// Waits until the daemon has bound `port` on 127.0.0.1 and its print plugin has run its
    /// first purge: the core drops what it decodes before the plugin is attached.
    fn wait_ready(&mut self, port: u16) {
        let needle = format!("0100007F:{port:04X} ");
        let deadline = Instant::now() + DEADLINE;
        loop {
            self.check_running();
            let table = fs::read_to_string("/proc/net/udp").unwrap_or_default();
            let bound = table.lines().any(|l| {
                l.trim_start()
                    .split_once(' ')
                    .is_some_and(|(_, rest)| rest.starts_with(&needle))
            });
            if bound && self.log().contains("Purging cache - END") {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "sfacctd not ready on 127.0.0.1:{port} within {DEADLINE:?} (bound: {bound}); \
                     its log:\n{}",
                    self.log()
                );
            }
            sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Sfacctd {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // The core blocks SIGTERM while it waits for datagrams; SIGINT makes it stop its plugin
        // and exit.
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            sleep(Duration::from_millis(20));
        }
        // The whole group: the core and its plugin process.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .status();
        let _ = self.child.wait();
    }
}

/// A free UDP port on 127.0.0.1 (free when this returns; the daemon binds it right after).
fn free_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind an ephemeral port");
    s.local_addr().unwrap().port()
}

/// Lines of `path` once it holds `want(lines)`, or after the deadline.
fn wait_lines(
    d: &mut Sfacctd,
    path: &Path,
    what: &str,
    want: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let lines: Vec<String> = fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with('{') && l.ends_with('}'))
            .map(str::to_owned)
            .collect();
        if want(&lines) {
            return lines;
        }
        d.check_running();
        if Instant::now() > deadline {
            panic!(
                "no complete {what} from sfacctd within {DEADLINE:?}; {} has {} lines:\n{}\nits log:\n{}",
                path.display(),
                lines.len(),
                lines.join("\n"),
                d.log()
            );
        }
        sleep(Duration::from_millis(100));
    }
}

fn mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Sum of packets and bytes over the lines of `f`'s aggregate (the print plugin may split one
/// aggregate across refreshes).
fn totals(lines: &[String], f: &Flow) -> (u64, u64, Vec<String>) {
    let mine: Vec<String> = lines
        .iter()
        .filter(|l| field(l, "mac_src") == Some(&mac(f.src_mac)))
        .cloned()
        .collect();
    let sum = |k: &str| {
        mine.iter()
            .map(|l| field(l, k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0))
            .sum()
    };
    (sum("packets"), sum("bytes"), mine)
}

#[test]
fn sfacctd_decodes_flow_and_counter_samples() {
    let started = Instant::now();
    let dir = TempDir::new();
    let flows = dir.0.join("flows.json");
    let counters = dir.0.join("counters.json");
    let log = dir.0.join("sfacctd.log");
    let config = dir.0.join("sfacctd.conf");
    let port = free_port();
    fs::write(
        &config,
        format!(
            "daemonize: false\n\
             logfile: {log}\n\
             sfacctd_ip: 127.0.0.1\n\
             sfacctd_port: {port}\n\
             sfacctd_renormalize: false\n\
             sfacctd_counter_file: {counters}\n\
             sfacctd_counter_output: json\n\
             plugins: print\n\
             aggregate: peer_src_ip, export_proto_sysid, in_iface, out_iface, vlan, src_mac, dst_mac, \
             src_host, dst_host, proto, src_port, dst_port, sampling_rate\n\
             print_output: json\n\
             print_output_file: {flows}\n\
             print_output_file_append: true\n\
             print_refresh_time: 1\n",
            log = log.display(),
            counters = counters.display(),
            flows = flows.display(),
        ),
    )
    .unwrap();

    let mut daemon = Sfacctd::start(&config, log);
    daemon.wait_ready(port);

    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(("127.0.0.1", port)).unwrap();

    // The IPv4 agent: flows A and B, and counters of ports 3 and 5, over three datagrams.
    let mut v4 = DatagramBuilder::new(
        Agent {
            address: IpAddr::V4(AGENT_V4),
            sub_agent_id: SUB_AGENT,
        },
        1400,
    );
    let mut sequence = 0u32;
    let mut pool = 0u32;
    let mut sample = |b: &mut DatagramBuilder, f: &Flow| {
        let bytes = frame(f);
        sequence += 1;
        pool += RATE;
        assert!(b.push_flow(&FlowSample {
            sequence,
            source_index: f.input,
            sampling_rate: RATE,
            sample_pool: pool,
            drops: 0,
            input: f.input,
            output: Output::Port(f.output),
            frame_length: bytes.len() as u32,
            header: &bytes,
            vlans: Some((f.vlan, f.vlan)),
        }));
    };
    v4.begin(60_000);
    sample(&mut v4, &FLOW_A);
    sample(&mut v4, &FLOW_B);
    assert!(v4.push_counters(&CounterSample {
        sequence: 1,
        source_index: 3,
        counters: if_counters(3, 123_456_789_012, 987_654_321)
    }));
    socket.send(v4.finish()).unwrap();
    v4.begin(61_000);
    sample(&mut v4, &FLOW_A);
    sample(&mut v4, &FLOW_B);
    assert!(v4.push_counters(&CounterSample {
        sequence: 1,
        source_index: 5,
        counters: if_counters(5, 55, 66)
    }));
    socket.send(v4.finish()).unwrap();
    v4.begin(62_000);
    sample(&mut v4, &FLOW_A);
    assert_eq!(v4.samples(), 1);
    socket.send(v4.finish()).unwrap();

    // The IPv6 agent: flow C.
    let mut v6 = DatagramBuilder::new(
        Agent {
            address: IpAddr::V6(AGENT_V6),
            sub_agent_id: 0,
        },
        1400,
    );
    v6.begin(1_000);
    let bytes = frame(&FLOW_C);
    assert!(v6.push_flow(&FlowSample {
        sequence: 1,
        source_index: FLOW_C.input,
        sampling_rate: RATE,
        sample_pool: RATE,
        drops: 0,
        input: FLOW_C.input,
        output: Output::Port(FLOW_C.output),
        frame_length: bytes.len() as u32,
        header: &bytes,
        vlans: Some((FLOW_C.vlan, FLOW_C.vlan)),
    }));
    socket.send(v6.finish()).unwrap();

    let all = [
        (&FLOW_A, IpAddr::V4(AGENT_V4), SUB_AGENT),
        (&FLOW_B, IpAddr::V4(AGENT_V4), SUB_AGENT),
        (&FLOW_C, IpAddr::V6(AGENT_V6), 0),
    ];
    let lines = wait_lines(&mut daemon, &flows, "flow aggregates", |lines| {
        all.iter()
            .all(|(f, _, _)| totals(lines, f).0 >= u64::from(f.samples))
    });
    let counter_lines = wait_lines(&mut daemon, &counters, "counter records", |lines| {
        lines
            .iter()
            .filter(|l| field(l, "ifIndex").is_some())
            .count()
            >= 2
    });
    if std::env::var_os("FP_EXPORT_SHOW").is_some() {
        eprintln!(
            "flows:\n{}\ncounters:\n{}\nlog:\n{}",
            lines.join("\n"),
            counter_lines.join("\n"),
            daemon.log()
        );
    }

    for (f, agent, sub_agent) in all {
        let (packets, bytes, mine) = totals(&lines, f);
        let show = mine.join("\n");
        assert_eq!(
            packets,
            u64::from(f.samples),
            "packets of {}:\n{show}",
            mac(f.src_mac)
        );
        let frame_length = f.frame_len as u64 + u64::from(FCS_LEN);
        assert_eq!(
            bytes,
            frame_length * u64::from(f.samples),
            "bytes of {}:\n{show}",
            mac(f.src_mac)
        );
        for l in &mine {
            let expect = [
                ("peer_ip_src", agent.to_string()),
                ("export_proto_sysid", sub_agent.to_string()),
                ("iface_in", f.input.to_string()),
                ("iface_out", f.output.to_string()),
                ("vlan", f.vlan.to_string()),
                ("mac_dst", mac(f.dst_mac)),
                ("ip_src", f.src_ip.to_string()),
                ("ip_dst", f.dst_ip.to_string()),
                ("ip_proto", "udp".to_string()),
                ("port_src", f.src_port.to_string()),
                ("port_dst", f.dst_port.to_string()),
                ("sampling_rate", RATE.to_string()),
            ];
            for (k, v) in expect {
                assert_eq!(field(l, k), Some(v.as_str()), "{k} in\n{l}");
            }
        }
    }

    // (ifIndex, datagram sequence number, ifInOctets, ifOutOctets)
    let sent = [
        (3u32, 1u32, 123_456_789_012u64, 987_654_321u64),
        (5, 2, 55, 66),
    ];
    for (index, datagram, in_octets, out_octets) in sent {
        let l = counter_lines
            .iter()
            .find(|l| field(l, "ifIndex") == Some(&index.to_string()))
            .unwrap_or_else(|| {
                panic!(
                    "no counters for ifIndex {index}:\n{}",
                    counter_lines.join("\n")
                )
            });
        let expect = [
            ("peer_ip_src", AGENT_V4.to_string()),
            ("sflow_seq", datagram.to_string()),
            ("sflow_cnt_seq", "1".to_string()),
            ("sf_cnt_type", "sflow_cnt_generic".to_string()),
            ("source_id_index", index.to_string()),
            ("ifType", "6".to_string()),
            ("ifSpeed", "10000000000".to_string()),
            ("ifDirection", "1".to_string()),
            ("ifStatus", "3".to_string()),
            ("ifInOctets", in_octets.to_string()),
            ("ifInUcastPkts", "1001".to_string()),
            ("ifInMulticastPkts", "1002".to_string()),
            ("ifInBroadcastPkts", "1003".to_string()),
            ("ifInDiscards", "1004".to_string()),
            ("ifInErrors", "1005".to_string()),
            ("ifInUnknownProtos", "1006".to_string()),
            ("ifOutOctets", out_octets.to_string()),
            ("ifOutUcastPkts", "2001".to_string()),
            ("ifOutMulticastPkts", "2002".to_string()),
            ("ifOutBroadcastPkts", "2003".to_string()),
            ("ifOutDiscards", "2004".to_string()),
            ("ifOutErrors", "2005".to_string()),
            ("ifPromiscuousMode", "2".to_string()),
        ];
        for (k, v) in expect {
            assert_eq!(
                field(l, k),
                Some(v.as_str()),
                "{k} of ifIndex {index} in\n{l}"
            );
        }
    }
    eprintln!("sfacctd decoded every field within {:?}", started.elapsed());
}
