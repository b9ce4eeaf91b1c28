//! The `[ipfix]` and `[sflow]` sections of the balancer's and the switch's configuration files:
//! the raw form `serde` reads (unknown keys refused) and the validated settings, with errors
//! naming the field.
//!
//! ```toml
//! [ipfix]                       # the balancer
//! collectors = ["192.0.2.10:4739"]
//! connections = true            # a record when a connection entry is made and when it ends
//! sample_one_in = 1000          # packet records: one packet in each 1000, at random (0: none)
//!
//! [sflow]                       # the switch
//! collectors = ["192.0.2.10:6343"]
//! agent = "192.0.2.1"
//! sample_one_in = 1000
//! counters_interval_s = 20
//! ```

use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};

/// A field and what is wrong with it (the caller puts it into its own error type).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path, e.g. `ipfix.collectors[1]`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn fail(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// Default IPFIX collector port (RFC 7011 §10.3.1... the registered port 4739).
pub const IPFIX_PORT: u16 = 4739;
/// Default sFlow collector port (6343).
pub const SFLOW_PORT: u16 = 6343;
/// Default `sample_one_in`.
pub const DEFAULT_SAMPLE_ONE_IN: u32 = 1000;
/// Largest `sample_one_in`.
pub const MAX_SAMPLE_ONE_IN: u32 = 1 << 24;
/// Default per-worker queue of events for the exporter.
pub const DEFAULT_QUEUE: usize = 16_384;
/// Default message size limit (fits an Ethernet MTU with IPv6 and UDP headers).
pub const DEFAULT_MESSAGE_BYTES: usize = 1400;
/// Default slots of the balancer exporter's table of connection start times (2 MiB).
pub const DEFAULT_CONNECTION_STARTS: usize = 1 << 18;
/// Default `ipfix.max_records_per_second`: connection and packet records the balancer's exporter
/// takes from the workers' queues per second (see docs/operations.md for the measurement behind
/// it).
pub const DEFAULT_MAX_RECORDS_PER_SECOND: u32 = 100_000;
/// Default `sflow.max_samples_per_second`: flow samples the switch's exporter takes from the
/// workers' queues per second.
pub const DEFAULT_MAX_SAMPLES_PER_SECOND: u32 = 100_000;
/// Default template refresh over UDP (RFC 7011 §8.4 leaves it to configuration).
pub const DEFAULT_TEMPLATE_REFRESH_S: u32 = 60;
/// The Private Enterprise Number RFC 5612 sets aside for documentation: flowplane's own
/// information elements are exported under it unless `enterprise_number` names another.
pub const DOCUMENTATION_PEN: u32 = 32473;

/// `[ipfix]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIpfix {
    collectors: Vec<String>,
    connections: Option<bool>,
    sample_one_in: Option<u64>,
    observation_domain: Option<u32>,
    template_refresh_s: Option<u64>,
    queue: Option<usize>,
    max_message_bytes: Option<usize>,
    enterprise_number: Option<u32>,
    connection_starts: Option<usize>,
    max_records_per_second: Option<u64>,
}

/// Validated `[ipfix]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpfixSpec {
    /// Collectors (address and UDP port).
    pub collectors: Vec<SocketAddr>,
    /// Records when a connection entry is made and when it ends (default on).
    pub connections: bool,
    /// Packet records: one packet in each `sample_one_in`, chosen at random (0: none).
    pub sample_one_in: u32,
    /// Observation domain id in every message.
    pub observation_domain: u32,
    /// Templates are sent again this often (seconds).
    pub template_refresh_s: u32,
    /// Events each worker may have waiting for the exporter (more are dropped and counted).
    pub queue: usize,
    /// Largest message in bytes.
    pub max_message_bytes: usize,
    /// Private Enterprise Number of flowplane's own information elements.
    pub enterprise_number: u32,
    /// Slots of the exporter's table of connection start times (a power of two, 8 bytes each;
    /// 0: end records carry no start time).
    pub connection_starts: usize,
    /// Connection and packet records taken from the workers' queues per second (0: no limit);
    /// what the limit leaves in the queues makes them full, and the workers drop (counted).
    pub max_records_per_second: u32,
}

/// `[sflow]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSflow {
    collectors: Vec<String>,
    agent: String,
    sample_one_in: Option<u64>,
    counters_interval_s: Option<u64>,
    queue: Option<usize>,
    max_datagram_bytes: Option<usize>,
    sub_agent_id: Option<u32>,
    max_samples_per_second: Option<u64>,
}

/// Validated `[sflow]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SflowSpec {
    /// Collectors (address and UDP port).
    pub collectors: Vec<SocketAddr>,
    /// The agent address datagrams carry (the switch's management address).
    pub agent: IpAddr,
    /// Sub-agent id.
    pub sub_agent_id: u32,
    /// Each port samples one frame in each `sample_one_in`, at random (0: no flow samples).
    pub sample_one_in: u32,
    /// Interface counters are sent this often (seconds; 0: never).
    pub counters_interval_s: u32,
    /// Samples each worker may have waiting for the exporter.
    pub queue: usize,
    /// Largest datagram in bytes.
    pub max_datagram_bytes: usize,
    /// Flow samples taken from the workers' queues per second (0: no limit); what the limit
    /// leaves makes the queues full, and the samplers drop (counted in each port's `drops`).
    pub max_samples_per_second: u32,
}

/// `collectors`: at least one, `address:port` or a bare address (the format's port).
fn collectors(section: &str, raw: &[String], port: u16) -> Result<Vec<SocketAddr>, FieldError> {
    if raw.is_empty() {
        return Err(fail(
            format!("{section}.collectors"),
            "at least one collector (address:port)",
        ));
    }
    let mut out = Vec::with_capacity(raw.len());
    for (i, c) in raw.iter().enumerate() {
        let f = format!("{section}.collectors[{i}]");
        let a = match (c.parse::<SocketAddr>(), c.parse::<IpAddr>()) {
            (Ok(a), _) => a,
            (_, Ok(ip)) => SocketAddr::new(ip, port),
            _ => {
                return Err(fail(
                    f,
                    format!(
                    "{c:?} is not an address:port (e.g. 192.0.2.10:{port}, [2001:db8::1]:{port})"
                ),
                ))
            }
        };
        if a.port() == 0 {
            return Err(fail(f, "port 0"));
        }
        if a.ip().is_unspecified() || a.ip().is_multicast() {
            return Err(fail(f, format!("{} cannot receive flow records", a.ip())));
        }
        if out.contains(&a) {
            return Err(fail(f, format!("{a} is listed twice")));
        }
        out.push(a);
    }
    Ok(out)
}

fn sample(section: &str, v: Option<u64>) -> Result<u32, FieldError> {
    let v = v.unwrap_or(DEFAULT_SAMPLE_ONE_IN as u64);
    if v > MAX_SAMPLE_ONE_IN as u64 {
        return Err(fail(
            format!("{section}.sample_one_in"),
            format!("{v} is more than {MAX_SAMPLE_ONE_IN}"),
        ));
    }
    Ok(v as u32)
}

fn queue(section: &str, v: Option<usize>) -> Result<usize, FieldError> {
    let v = v.unwrap_or(DEFAULT_QUEUE);
    if !(64..=1 << 22).contains(&v) {
        return Err(fail(
            format!("{section}.queue"),
            format!("{v} is not in 64..=4194304"),
        ));
    }
    Ok(v)
}

/// A per-second limit (0: none).
fn per_second(field: &str, v: Option<u64>, default: u32) -> Result<u32, FieldError> {
    let v = v.unwrap_or(default as u64);
    u32::try_from(v).map_err(|_| fail(field, format!("{v} is more than {}", u32::MAX)))
}

fn message_bytes(field: &str, v: Option<usize>) -> Result<usize, FieldError> {
    let v = v.unwrap_or(DEFAULT_MESSAGE_BYTES);
    if !(512..=65_000).contains(&v) {
        return Err(fail(field, format!("{v} is not in 512..=65000")));
    }
    Ok(v)
}

impl RawIpfix {
    /// Check `[ipfix]`.
    pub fn validate(&self) -> Result<IpfixSpec, FieldError> {
        let refresh = self
            .template_refresh_s
            .unwrap_or(DEFAULT_TEMPLATE_REFRESH_S as u64);
        if !(1..=86_400).contains(&refresh) {
            return Err(fail(
                "ipfix.template_refresh_s",
                format!("{refresh} is not in 1..=86400"),
            ));
        }
        let enterprise_number = self.enterprise_number.unwrap_or(DOCUMENTATION_PEN);
        if enterprise_number == 0 {
            return Err(fail(
                "ipfix.enterprise_number",
                "0 is the IANA registry, not an enterprise",
            ));
        }
        let starts = self.connection_starts.unwrap_or(DEFAULT_CONNECTION_STARTS);
        if starts > 1 << 26 {
            return Err(fail(
                "ipfix.connection_starts",
                format!("{starts} is more than 67108864"),
            ));
        }
        Ok(IpfixSpec {
            max_records_per_second: per_second(
                "ipfix.max_records_per_second",
                self.max_records_per_second,
                DEFAULT_MAX_RECORDS_PER_SECOND,
            )?,
            connection_starts: if starts == 0 {
                0
            } else {
                starts.next_power_of_two()
            },
            collectors: collectors("ipfix", &self.collectors, IPFIX_PORT)?,
            connections: self.connections.unwrap_or(true),
            sample_one_in: sample("ipfix", self.sample_one_in)?,
            observation_domain: self.observation_domain.unwrap_or(1),
            template_refresh_s: refresh as u32,
            queue: queue("ipfix", self.queue)?,
            max_message_bytes: message_bytes("ipfix.max_message_bytes", self.max_message_bytes)?,
            enterprise_number,
        })
    }
}

impl RawSflow {
    /// Check `[sflow]`.
    pub fn validate(&self) -> Result<SflowSpec, FieldError> {
        let agent: IpAddr = self.agent.trim().parse().map_err(|_| {
            fail(
                "sflow.agent",
                format!("{:?} is not an IP address", self.agent),
            )
        })?;
        let counters = self.counters_interval_s.unwrap_or(20);
        if counters > 3600 {
            return Err(fail(
                "sflow.counters_interval_s",
                format!("{counters} is more than 3600"),
            ));
        }
        Ok(SflowSpec {
            collectors: collectors("sflow", &self.collectors, SFLOW_PORT)?,
            agent,
            sub_agent_id: self.sub_agent_id.unwrap_or(0),
            sample_one_in: sample("sflow", self.sample_one_in)?,
            counters_interval_s: counters as u32,
            queue: queue("sflow", self.queue)?,
            max_datagram_bytes: message_bytes("sflow.max_datagram_bytes", self.max_datagram_bytes)?,
            max_samples_per_second: per_second(
                "sflow.max_samples_per_second",
                self.max_samples_per_second,
                DEFAULT_MAX_SAMPLES_PER_SECOND,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipfix(text: &str) -> Result<IpfixSpec, FieldError> {
        #[derive(Deserialize)]
        struct F {
            ipfix: RawIpfix,
        }
        toml::from_str::<F>(text).unwrap().ipfix.validate()
    }

    #[test]
    fn defaults_and_ports() {
        let s = ipfix("[ipfix]\ncollectors = [\"192.0.2.1\", \"[2001:db8::1]:9995\"]").unwrap();
        assert_eq!(
            s.collectors,
            vec![
                "192.0.2.1:4739".parse().unwrap(),
                "[2001:db8::1]:9995".parse().unwrap()
            ]
        );
        assert!(s.connections);
        assert_eq!(s.sample_one_in, DEFAULT_SAMPLE_ONE_IN);
        assert_eq!(s.enterprise_number, DOCUMENTATION_PEN);
        assert_eq!(s.max_records_per_second, DEFAULT_MAX_RECORDS_PER_SECOND);
    }

    #[test]
    fn errors_name_the_field() {
        let e = ipfix("[ipfix]\ncollectors = [\"192.0.2.1:1\", \"nowhere\"]").unwrap_err();
        assert_eq!(e.field, "ipfix.collectors[1]");
        let e = ipfix("[ipfix]\ncollectors = []").unwrap_err();
        assert_eq!(e.field, "ipfix.collectors");
        let e = ipfix("[ipfix]\ncollectors = [\"192.0.2.1\"]\nsample_one_in = 99999999999")
            .unwrap_err();
        assert_eq!(e.field, "ipfix.sample_one_in");
        let e = ipfix("[ipfix]\ncollectors = [\"0.0.0.0:4739\"]").unwrap_err();
        assert_eq!(e.field, "ipfix.collectors[0]");
        let e = ipfix("[ipfix]\ncollectors = [\"192.0.2.1\"]\nqueue = 1").unwrap_err();
        assert_eq!(e.field, "ipfix.queue");
        let e = ipfix("[ipfix]\ncollectors = [\"192.0.2.1\"]\nmax_records_per_second = 5000000000")
            .unwrap_err();
        assert_eq!(e.field, "ipfix.max_records_per_second");
    }

    #[test]
    fn sflow_needs_an_agent_address() {
        #[derive(Deserialize)]
        struct F {
            sflow: RawSflow,
        }
        let v = |t: &str| toml::from_str::<F>(t).unwrap().sflow.validate();
        let s = v("[sflow]\ncollectors = [\"127.0.0.1\"]\nagent = \"10.0.0.1\"").unwrap();
        assert_eq!(s.collectors[0].port(), SFLOW_PORT);
        assert_eq!(s.counters_interval_s, 20);
        let e = v("[sflow]\ncollectors = [\"127.0.0.1\"]\nagent = \"x\"").unwrap_err();
        assert_eq!(e.field, "sflow.agent");
    }
}
