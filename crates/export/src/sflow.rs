//! sFlow version 5 datagrams (sflow.org, "sFlow Version 5", July 2004): a sans-I/O encoder.
//!
//! [`DatagramBuilder`] writes one datagram at a time into a buffer it owns: [`begin`] writes the
//! datagram header, [`push_flow`] and [`push_counters`] append samples while they fit under the
//! size limit, and [`finish`] patches the sample count and hands out the bytes for the caller to
//! send. The module makes no system call and reads no clock: the agent's uptime is an argument.
//! Every field is XDR, that is big-endian and padded to a multiple of 4 bytes.
//!
//! # What is encoded
//!
//! | structure | data_format (enterprise, format) | content |
//! |---|---|---|
//! | `sample_datagram_v5` | — | version 5, agent address (type 1 IPv4, 2 IPv6), sub-agent id, sequence number, uptime, samples |
//! | `flow_sample` | (0, 1) | a `sampled_header` record, and an `extended_switch` record when VLANs are known |
//! | `sampled_header` | (0, 1) | header_protocol 1 (ETHERNET-ISO88023), frame_length, stripped, the frame's first bytes |
//! | `extended_switch` | (0, 1001) | in and out VLAN; priorities 0 |
//! | `counters_sample` | (0, 2) | one `if_counters` record |
//! | `if_counters` | (0, 1) | the 88 bytes of generic interface counters (RFC 2233) |
//!
//! # Choices and why
//!
//! * **Compact forms only.** Source ids are written as type 0 (ifIndex) with a 24-bit index and
//!   interfaces as 30-bit values. The specification lets an agent use the expanded forms (formats 3
//!   and 4) only if it uses them for every interface, and is explicit that agents whose ifIndex
//!   values stay below 2^24 must use the compact ones; flowplane numbers its ports from 1. Larger
//!   values are masked to the field's width (and trip a debug assertion).
//! * **Frame length and FCS.** A software port sees frames without their 4-byte FCS, but the
//!   specification defines `frame_length` as the octets received on the network *including* the
//!   FCS and says that for an 802.3 frame `stripped` is at least 4. [`FlowSample::frame_length`]
//!   is therefore the length the dataplane saw (no FCS); the encoder writes `frame_length + 4` and
//!   `stripped = 4`, as a hardware agent that strips the FCS would. A collector that counts bytes
//!   from `frame_length` counts what crossed the wire.
//! * **Header truncation.** The header is cut at [`MAX_HEADER`] (128 bytes, the specification's
//!   default header size) by the encoder itself, then zero-padded to a multiple of 4. Truncation
//!   does not change `stripped`, which counts encapsulation removed in front of and behind the
//!   header, not the bytes left uncopied; the header's own length field says how many were copied.
//! * **Dropped frames.** [`Output::Dropped`] is the "packet discarded" format (1) with reason 256,
//!   "unknown". Reasons 0–255 are ICMP unreachable codes (0 is "net unreachable") and would claim
//!   a cause the dataplane did not establish.
//! * **Priorities.** The sample does not carry 802.1p priorities, so `extended_switch` reports 0
//!   for both (the specification's value for an unknown integer).
//! * **No allocation per sample.** The builder allocates its buffer once, with room for
//!   `max_bytes`. Each push first computes the sample's encoded size and writes nothing if it would
//!   cross the limit, so a refused sample leaves the datagram exactly as it was.
//! * **Wrapping.** The datagram sequence number wraps at 2^32 (the specification's sequence numbers
//!   are `unsigned int`), as does `frame_length + 4`.
//!
//! # Example
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr};
//! use fp_export::sflow::{Agent, DatagramBuilder, FlowSample, Output};
//!
//! let agent = Agent { address: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), sub_agent_id: 0 };
//! let mut builder = DatagramBuilder::new(agent, 1400);
//! let frame = [0u8; 60];
//! builder.begin(12_345);
//! let sample = FlowSample {
//!     sequence: 1,
//!     source_index: 3,
//!     sampling_rate: 100,
//!     sample_pool: 100,
//!     drops: 0,
//!     input: 3,
//!     output: Output::Port(5),
//!     frame_length: frame.len() as u32,
//!     header: &frame,
//!     vlans: Some((10, 10)),
//! };
//! assert!(builder.push_flow(&sample));
//! let datagram = builder.finish();
//! assert_eq!(&datagram[..4], &5u32.to_be_bytes());
//! assert_eq!(datagram.len(), sample.encoded_len() + 28);
//! ```
//!
//! [`begin`]: DatagramBuilder::begin
//! [`push_flow`]: DatagramBuilder::push_flow
//! [`push_counters`]: DatagramBuilder::push_counters
//! [`finish`]: DatagramBuilder::finish

use std::net::IpAddr;

/// The datagram version this module writes.
pub const VERSION: u32 = 5;

/// The UDP port collectors listen on by default.
pub const DEFAULT_PORT: u16 = 6343;

/// The most header bytes a flow sample carries; longer headers are truncated.
pub const MAX_HEADER: usize = 128;

/// Octets of Ethernet FCS added to `frame_length` and reported as `stripped`.
pub const FCS_LEN: u32 = 4;

/// Discard reason written for [`Output::Dropped`]: 256, "unknown".
pub const DROP_REASON_UNKNOWN: u32 = 256;

/// `ifType` of an Ethernet port (ethernetCsmacd, IANAifType 6).
pub const IF_TYPE_ETHERNET_CSMACD: u32 = 6;

/// `ifDirection` of a full-duplex port.
pub const IF_DIRECTION_FULL_DUPLEX: u32 = 1;

/// `ifStatus` bit 0: the port is administratively up.
pub const IF_STATUS_ADMIN_UP: u32 = 1;

/// `ifStatus` bit 1: the port is operationally up.
pub const IF_STATUS_OPER_UP: u32 = 2;

/// Encoded length of the `if_counters` record body.
pub const IF_COUNTERS_LEN: usize = 88;

/// Encoded length of a whole counter sample: its data_format and length words, the sample's
/// sequence number, source id and record count, and one `if_counters` record with its format and
/// length words.
pub const COUNTER_SAMPLE_LEN: usize = 8 + 12 + 8 + IF_COUNTERS_LEN;

/// Structure numbers of enterprise 0 (sflow.org's standard structures).
mod format {
    /// `sample_data`: compact flow sample.
    pub const FLOW_SAMPLE: u32 = 1;
    /// `sample_data`: compact counters sample.
    pub const COUNTERS_SAMPLE: u32 = 2;
    /// `flow_data`: raw packet header.
    pub const SAMPLED_HEADER: u32 = 1;
    /// `flow_data`: extended switch data.
    pub const EXTENDED_SWITCH: u32 = 1001;
    /// `counter_data`: generic interface counters.
    pub const IF_COUNTERS: u32 = 1;
}

/// `header_protocol` of an Ethernet frame (ETHERNET-ISO88023).
const HEADER_PROTOCOL_ETHERNET: u32 = 1;
/// `address_type` of an IPv4 agent address.
const ADDRESS_IPV4: u32 = 1;
/// `address_type` of an IPv6 agent address.
const ADDRESS_IPV6: u32 = 2;
/// The index bits of a compact `sflow_data_source` (its top byte is the type, 0 = ifIndex).
const SOURCE_INDEX_MASK: u32 = 0x00FF_FFFF;
/// The value bits of an `interface` field (its top two bits are the format).
const INTERFACE_MASK: u32 = 0x3FFF_FFFF;
/// Bytes of a flow sample before its records: sequence number, source id, sampling rate, sample
/// pool, drops, input, output and the record count.
const FLOW_SAMPLE_FIXED: usize = 8 * 4;
/// Bytes of a `sampled_header` body before the header bytes.
const SAMPLED_HEADER_FIXED: usize = 4 * 4;
/// Bytes of an `extended_switch` body.
const EXTENDED_SWITCH_LEN: usize = 4 * 4;
/// The data_format and length words in front of every sample and record.
const TAG_LEN: usize = 8;

/// A `data_format` word: the enterprise in the top 20 bits, the format in the low 12.
const fn data_format(enterprise: u32, format: u32) -> u32 {
    (enterprise << 12) | format
}

/// `n` rounded up to a multiple of 4 (XDR's unit).
const fn padded(n: usize) -> usize {
    (n + 3) & !3
}

/// The agent that sends the datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agent {
    /// The agent's address (sFlowAgentAddress); a collector keys its state on it.
    pub address: IpAddr,
    /// Distinguishes datagram streams from separate parts of one agent; the specification
    /// recommends a single stream (one sub-agent) per agent.
    pub sub_agent_id: u32,
}

/// Where a sampled frame went: the flow sample's `output` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Sent on one port, by ifIndex (30 bits; 0x3FFF_FFFF means "to the device itself").
    Port(u32),
    /// Discarded, reason unknown ([`DROP_REASON_UNKNOWN`]).
    Dropped,
    /// Sent on this many ports (flooded); 0 means an unknown number greater than one.
    Multiple(u32),
    /// Output interface not known.
    Unknown,
}

impl Output {
    /// The 32-bit `interface` encoding: format in the top two bits, value in the other 30.
    #[inline]
    pub const fn to_wire(self) -> u32 {
        match self {
            Output::Port(index) => index & INTERFACE_MASK,
            Output::Dropped => (1 << 30) | DROP_REASON_UNKNOWN,
            Output::Multiple(ports) => (2 << 30) | (ports & INTERFACE_MASK),
            Output::Unknown => 0,
        }
    }
}

/// One packet sample: a compact `flow_sample` (enterprise 0, format 1) with a `sampled_header`
/// record and, when [`vlans`](Self::vlans) is set, an `extended_switch` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSample<'a> {
    /// This data source's flow-sample sequence number (the caller counts per source).
    pub sequence: u32,
    /// ifIndex of the sampling data source (written as source id type 0, 24 bits).
    pub source_index: u32,
    /// One frame in `sampling_rate` is sampled.
    pub sampling_rate: u32,
    /// Frames that could have been sampled so far (skipped plus sampled).
    pub sample_pool: u32,
    /// Samples lost for lack of resources so far.
    pub drops: u32,
    /// ifIndex the frame came in on (30 bits; 0 = unknown).
    pub input: u32,
    /// Where the frame went.
    pub output: Output,
    /// The frame's length as the dataplane saw it, without FCS; the encoder adds [`FCS_LEN`]
    /// and reports it as stripped (see the module doc).
    pub frame_length: u32,
    /// The frame's first bytes, from the destination MAC on. The encoder copies at most
    /// [`MAX_HEADER`] of them.
    pub header: &'a [u8],
    /// (in VLAN, out VLAN), written as an `extended_switch` record when present.
    pub vlans: Option<(u16, u16)>,
}

impl FlowSample<'_> {
    /// The header bytes the encoder copies.
    #[inline]
    fn header_copied(&self) -> &[u8] {
        &self.header[..self.header.len().min(MAX_HEADER)]
    }

    /// Bytes this sample takes in a datagram, with its data_format and length words.
    #[inline]
    pub fn encoded_len(&self) -> usize {
        let header = TAG_LEN + SAMPLED_HEADER_FIXED + padded(self.header_copied().len());
        let switch = if self.vlans.is_some() {
            TAG_LEN + EXTENDED_SWITCH_LEN
        } else {
            0
        };
        TAG_LEN + FLOW_SAMPLE_FIXED + header + switch
    }
}

/// Generic interface counters: the `if_counters` record (enterprise 0, format 1), field for field.
///
/// A counter the port cannot provide is reported as its maximum value (`u32::MAX` or `u64::MAX`),
/// as the specification asks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IfCounters {
    /// ifIndex.
    pub index: u32,
    /// ifType ([`IF_TYPE_ETHERNET_CSMACD`] for Ethernet).
    pub if_type: u32,
    /// ifSpeed, bits per second.
    pub speed: u64,
    /// 0 unknown, 1 full duplex, 2 half duplex, 3 in, 4 out.
    pub direction: u32,
    /// Bit 0 administratively up, bit 1 operationally up ([`IF_STATUS_ADMIN_UP`],
    /// [`IF_STATUS_OPER_UP`]).
    pub status: u32,
    /// ifInOctets (64-bit).
    pub in_octets: u64,
    /// ifInUcastPkts.
    pub in_ucast: u32,
    /// ifInMulticastPkts.
    pub in_multicast: u32,
    /// ifInBroadcastPkts.
    pub in_broadcast: u32,
    /// ifInDiscards.
    pub in_discards: u32,
    /// ifInErrors.
    pub in_errors: u32,
    /// ifInUnknownProtos.
    pub in_unknown_protos: u32,
    /// ifOutOctets (64-bit).
    pub out_octets: u64,
    /// ifOutUcastPkts.
    pub out_ucast: u32,
    /// ifOutMulticastPkts.
    pub out_multicast: u32,
    /// ifOutBroadcastPkts.
    pub out_broadcast: u32,
    /// ifOutDiscards.
    pub out_discards: u32,
    /// ifOutErrors.
    pub out_errors: u32,
    /// ifPromiscuousMode (1 true, 2 false, as in the MIB; 0 unknown).
    pub promiscuous: u32,
}

/// One counter sample: a compact `counters_sample` (enterprise 0, format 2) holding one
/// `if_counters` record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterSample {
    /// This data source's counter-sample sequence number (the caller counts per source).
    pub sequence: u32,
    /// ifIndex of the data source (written as source id type 0, 24 bits).
    pub source_index: u32,
    /// The counters.
    pub counters: IfCounters,
}

/// Builds sFlow datagrams no larger than a limit, one at a time, in one reusable buffer.
#[derive(Debug, Clone)]
pub struct DatagramBuilder {
    agent: Agent,
    max_bytes: usize,
    buf: Vec<u8>,
    /// Sequence number of the current (or last) datagram.
    sequence: u32,
    samples: u32,
    /// Between `begin` and `finish`.
    open: bool,
}

impl DatagramBuilder {
    /// A builder for `agent`'s datagrams of at most `max_bytes` bytes (1400 keeps them unfragmented
    /// on Ethernet). The header is always written, so a limit below [`header_len`] plus one
    /// sample's size makes every push fail.
    ///
    /// [`header_len`]: Self::header_len
    pub fn new(agent: Agent, max_bytes: usize) -> DatagramBuilder {
        let mut builder = DatagramBuilder {
            agent,
            max_bytes,
            buf: Vec::new(),
            sequence: 0,
            samples: 0,
            open: false,
        };
        builder
            .buf
            .reserve_exact(max_bytes.max(builder.header_len()));
        builder
    }

    /// The agent this builder writes for.
    #[inline]
    pub fn agent(&self) -> Agent {
        self.agent
    }

    /// The size limit.
    #[inline]
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Bytes of the datagram header: 28 for an IPv4 agent, 40 for IPv6.
    #[inline]
    pub fn header_len(&self) -> usize {
        let address = match self.agent.address {
            IpAddr::V4(_) => 4,
            IpAddr::V6(_) => 16,
        };
        6 * 4 + address
    }

    /// Start a datagram with the given agent uptime (ms since the agent started); increments the
    /// datagram sequence number (the first datagram is number 1). An unfinished datagram is
    /// discarded, and its sequence number with it.
    pub fn begin(&mut self, uptime_ms: u32) {
        self.sequence = self.sequence.wrapping_add(1);
        self.samples = 0;
        self.open = true;
        self.buf.clear();
        self.put_u32(VERSION);
        match self.agent.address {
            IpAddr::V4(a) => {
                self.put_u32(ADDRESS_IPV4);
                self.buf.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                self.put_u32(ADDRESS_IPV6);
                self.buf.extend_from_slice(&a.octets());
            }
        }
        self.put_u32(self.agent.sub_agent_id);
        self.put_u32(self.sequence);
        self.put_u32(uptime_ms);
        // The sample count, patched by `finish`.
        self.put_u32(0);
    }

    /// Append a flow sample; false (nothing written) when it does not fit in this datagram or
    /// no datagram was begun.
    pub fn push_flow(&mut self, s: &FlowSample<'_>) -> bool {
        let len = s.encoded_len();
        if !self.fits(len) {
            return false;
        }
        let start = self.buf.len();
        let header = s.header_copied();
        let records = if s.vlans.is_some() { 2 } else { 1 };

        self.put_u32(data_format(0, format::FLOW_SAMPLE));
        self.put_len(len - TAG_LEN);
        self.put_u32(s.sequence);
        self.put_u32(source_id(s.source_index));
        self.put_u32(s.sampling_rate);
        self.put_u32(s.sample_pool);
        self.put_u32(s.drops);
        self.put_u32(interface(s.input));
        self.put_u32(s.output.to_wire());
        self.put_u32(records);

        self.put_u32(data_format(0, format::SAMPLED_HEADER));
        self.put_len(SAMPLED_HEADER_FIXED + padded(header.len()));
        self.put_u32(HEADER_PROTOCOL_ETHERNET);
        self.put_u32(s.frame_length.wrapping_add(FCS_LEN));
        self.put_u32(FCS_LEN);
        self.put_len(header.len());
        self.buf.extend_from_slice(header);
        self.pad();

        if let Some((in_vlan, out_vlan)) = s.vlans {
            self.put_u32(data_format(0, format::EXTENDED_SWITCH));
            self.put_len(EXTENDED_SWITCH_LEN);
            self.put_u32(u32::from(in_vlan));
            self.put_u32(0);
            self.put_u32(u32::from(out_vlan));
            self.put_u32(0);
        }

        debug_assert_eq!(self.buf.len() - start, len);
        self.samples += 1;
        true
    }

    /// Append a counter sample; false (nothing written) when it does not fit in this datagram or
    /// no datagram was begun.
    pub fn push_counters(&mut self, s: &CounterSample) -> bool {
        if !self.fits(COUNTER_SAMPLE_LEN) {
            return false;
        }
        let start = self.buf.len();
        let c = &s.counters;

        self.put_u32(data_format(0, format::COUNTERS_SAMPLE));
        self.put_len(COUNTER_SAMPLE_LEN - TAG_LEN);
        self.put_u32(s.sequence);
        self.put_u32(source_id(s.source_index));
        self.put_u32(1);

        self.put_u32(data_format(0, format::IF_COUNTERS));
        self.put_len(IF_COUNTERS_LEN);
        self.put_u32(c.index);
        self.put_u32(c.if_type);
        self.put_u64(c.speed);
        self.put_u32(c.direction);
        self.put_u32(c.status);
        self.put_u64(c.in_octets);
        self.put_u32(c.in_ucast);
        self.put_u32(c.in_multicast);
        self.put_u32(c.in_broadcast);
        self.put_u32(c.in_discards);
        self.put_u32(c.in_errors);
        self.put_u32(c.in_unknown_protos);
        self.put_u64(c.out_octets);
        self.put_u32(c.out_ucast);
        self.put_u32(c.out_multicast);
        self.put_u32(c.out_broadcast);
        self.put_u32(c.out_discards);
        self.put_u32(c.out_errors);
        self.put_u32(c.promiscuous);

        debug_assert_eq!(self.buf.len() - start, COUNTER_SAMPLE_LEN);
        self.samples += 1;
        true
    }

    /// Samples in the current datagram.
    #[inline]
    pub fn samples(&self) -> u32 {
        self.samples
    }

    /// Bytes written to the current datagram so far (header included).
    #[inline]
    pub fn datagram_len(&self) -> usize {
        self.buf.len()
    }

    /// True between [`begin`](Self::begin) and [`finish`](Self::finish).
    #[inline]
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Sequence number of the current datagram (of the last one after `finish`); 0 before the
    /// first `begin`.
    #[inline]
    pub fn sequence(&self) -> u32 {
        self.sequence
    }

    /// Finish the datagram (writes the sample count) and return its bytes; the builder is ready
    /// for the next [`begin`](Self::begin). Empty when no datagram was begun.
    pub fn finish(&mut self) -> &[u8] {
        if !self.open {
            return &[];
        }
        self.open = false;
        let at = self.header_len() - 4;
        self.buf[at..at + 4].copy_from_slice(&self.samples.to_be_bytes());
        &self.buf
    }

    /// Whether `len` more bytes fit in an open datagram.
    #[inline]
    fn fits(&self, len: usize) -> bool {
        self.open && self.buf.len() + len <= self.max_bytes
    }

    #[inline]
    fn put_u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    #[inline]
    fn put_u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// A length field. Lengths here are bounded by `max_bytes`, which is a `usize` held in memory;
    /// the conversion saturates rather than wraps if a caller ever asks for a 4 GiB datagram.
    #[inline]
    fn put_len(&mut self, len: usize) {
        self.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    }

    /// Zero bytes up to the next multiple of 4.
    #[inline]
    fn pad(&mut self) {
        let n = padded(self.buf.len()) - self.buf.len();
        self.buf.extend_from_slice(&[0; 3][..n]);
    }
}

/// A compact `sflow_data_source`: type 0 (ifIndex) in the top byte, the index in the low 24 bits.
#[inline]
fn source_id(index: u32) -> u32 {
    debug_assert!(
        index <= SOURCE_INDEX_MASK,
        "ifIndex {index} needs the expanded sample formats"
    );
    index & SOURCE_INDEX_MASK
}

/// An `interface` of format 0 (a single ifIndex).
#[inline]
fn interface(index: u32) -> u32 {
    debug_assert!(
        index <= INTERFACE_MASK,
        "ifIndex {index} does not fit an interface field"
    );
    index & INTERFACE_MASK
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4_agent() -> Agent {
        Agent {
            address: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            sub_agent_id: 7,
        }
    }

    /// The big-endian word at byte offset `at`.
    fn word(buf: &[u8], at: usize) -> u32 {
        u32::from_be_bytes(buf[at..at + 4].try_into().unwrap())
    }

    fn hyper(buf: &[u8], at: usize) -> u64 {
        u64::from_be_bytes(buf[at..at + 8].try_into().unwrap())
    }

    fn flow<'a>(header: &'a [u8], vlans: Option<(u16, u16)>) -> FlowSample<'a> {
        FlowSample {
            sequence: 11,
            source_index: 3,
            sampling_rate: 100,
            sample_pool: 1234,
            drops: 2,
            input: 3,
            output: Output::Port(5),
            frame_length: 1000,
            header,
            vlans,
        }
    }

    fn counters() -> CounterSample {
        CounterSample {
            sequence: 21,
            source_index: 4,
            counters: IfCounters {
                index: 4,
                if_type: IF_TYPE_ETHERNET_CSMACD,
                speed: 10_000_000_000,
                direction: IF_DIRECTION_FULL_DUPLEX,
                status: IF_STATUS_ADMIN_UP | IF_STATUS_OPER_UP,
                in_octets: 0x0102_0304_0506_0708,
                in_ucast: 101,
                in_multicast: 102,
                in_broadcast: 103,
                in_discards: 104,
                in_errors: 105,
                in_unknown_protos: 106,
                out_octets: 0x1112_1314_1516_1718,
                out_ucast: 201,
                out_multicast: 202,
                out_broadcast: 203,
                out_discards: 204,
                out_errors: 205,
                promiscuous: 2,
            },
        }
    }

    #[test]
    fn flow_sample_layout_byte_exact() {
        // 62 header bytes: padded to 64 with two zero bytes.
        let header: Vec<u8> = (1..=62).collect();
        let mut b = DatagramBuilder::new(v4_agent(), 1400);
        b.begin(1000);
        assert!(b.push_flow(&flow(&header, Some((10, 20)))));
        assert_eq!(b.samples(), 1);
        let d = b.finish().to_vec();

        // Datagram header.
        assert_eq!(word(&d, 0), 5, "version");
        assert_eq!(word(&d, 4), 1, "address type IPv4");
        assert_eq!(&d[8..12], &[192, 0, 2, 1], "agent address");
        assert_eq!(word(&d, 12), 7, "sub-agent id");
        assert_eq!(word(&d, 16), 1, "datagram sequence number");
        assert_eq!(word(&d, 20), 1000, "uptime");
        assert_eq!(word(&d, 24), 1, "sample count");

        // Sample record: data_format (0 << 12 | 1) and length of what follows.
        assert_eq!(word(&d, 28), 1, "flow_sample data_format");
        // 32 fixed + (8 + 16 + 64) sampled_header + (8 + 16) extended_switch.
        assert_eq!(word(&d, 32), 144, "sample length");
        assert_eq!(word(&d, 36), 11, "sample sequence number");
        assert_eq!(word(&d, 40), 3, "source id: type 0, index 3");
        assert_eq!(word(&d, 44), 100, "sampling rate");
        assert_eq!(word(&d, 48), 1234, "sample pool");
        assert_eq!(word(&d, 52), 2, "drops");
        assert_eq!(word(&d, 56), 3, "input");
        assert_eq!(word(&d, 60), 5, "output");
        assert_eq!(word(&d, 64), 2, "flow record count");

        // sampled_header record.
        assert_eq!(word(&d, 68), 1, "sampled_header data_format");
        assert_eq!(word(&d, 72), 80, "sampled_header length: 16 + 64");
        assert_eq!(word(&d, 76), 1, "header_protocol ETHERNET-ISO88023");
        assert_eq!(word(&d, 80), 1004, "frame_length includes the FCS");
        assert_eq!(word(&d, 84), 4, "stripped: the FCS");
        assert_eq!(word(&d, 88), 62, "header length, unpadded");
        assert_eq!(&d[92..154], &header[..]);
        assert_eq!(&d[154..156], &[0, 0], "padding");

        // extended_switch record.
        assert_eq!(word(&d, 156), 1001, "extended_switch data_format");
        assert_eq!(word(&d, 160), 16, "extended_switch length");
        assert_eq!(word(&d, 164), 10, "src_vlan");
        assert_eq!(word(&d, 168), 0, "src_priority");
        assert_eq!(word(&d, 172), 20, "dst_vlan");
        assert_eq!(word(&d, 176), 0, "dst_priority");
        assert_eq!(d.len(), 180);
        assert_eq!(d.len(), 28 + flow(&header, Some((10, 20))).encoded_len());
    }

    #[test]
    fn flow_sample_without_vlans_has_one_record() {
        let header = [0xAB; 64];
        let mut b = DatagramBuilder::new(v4_agent(), 1400);
        b.begin(0);
        assert!(b.push_flow(&flow(&header, None)));
        let d = b.finish();
        assert_eq!(word(d, 32), 32 + 8 + 16 + 64);
        assert_eq!(word(d, 64), 1, "flow record count");
        assert_eq!(word(d, 88), 64);
        assert_eq!(d.len(), 28 + 8 + 32 + 8 + 16 + 64);
    }

    #[test]
    fn header_capped_at_max_header() {
        let header: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
        let mut s = flow(&header, None);
        s.frame_length = 1500;
        let mut b = DatagramBuilder::new(v4_agent(), 1400);
        b.begin(0);
        assert!(b.push_flow(&s));
        let d = b.finish();
        assert_eq!(word(d, 32), 32 + 8 + 16 + 128, "sample length");
        assert_eq!(word(d, 72), 16 + 128, "record length");
        assert_eq!(
            word(d, 80),
            1504,
            "frame_length: the whole frame plus FCS, not the header"
        );
        assert_eq!(word(d, 84), 4, "stripped is not changed by truncation");
        assert_eq!(word(d, 88), 128, "header length capped");
        assert_eq!(&d[92..220], &header[..128]);
        assert_eq!(d.len(), 220);
    }

    #[test]
    fn header_padding_for_every_remainder() {
        for n in 0..8usize {
            let header = vec![0xFF; n];
            let mut b = DatagramBuilder::new(v4_agent(), 1400);
            b.begin(0);
            assert!(b.push_flow(&flow(&header, None)));
            let d = b.finish();
            assert_eq!(word(d, 88), n as u32);
            assert_eq!(d.len(), 92 + padded(n));
            assert!(
                d[92 + n..].iter().all(|&x| x == 0),
                "padding is zero for n = {n}"
            );
            assert_eq!(d.len() % 4, 0);
        }
    }

    #[test]
    fn output_encodings() {
        assert_eq!(Output::Port(5).to_wire(), 5);
        assert_eq!(Output::Unknown.to_wire(), 0);
        assert_eq!(Output::Dropped.to_wire(), 0x4000_0100);
        assert_eq!(Output::Multiple(7).to_wire(), 0x8000_0007);
        assert_eq!(Output::Multiple(0).to_wire(), 0x8000_0000);
        assert_eq!(Output::Port(0x3FFF_FFFF).to_wire(), 0x3FFF_FFFF);

        let header = [0u8; 14];
        let mut s = flow(&header, None);
        s.output = Output::Multiple(3);
        let mut b = DatagramBuilder::new(v4_agent(), 1400);
        b.begin(0);
        assert!(b.push_flow(&s));
        assert_eq!(word(b.finish(), 60), 0x8000_0003);
    }

    #[test]
    fn ipv6_agent_header() {
        let address = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9);
        let mut b = DatagramBuilder::new(
            Agent {
                address: IpAddr::V6(address),
                sub_agent_id: 3,
            },
            1400,
        );
        assert_eq!(b.header_len(), 40);
        b.begin(77);
        assert!(b.push_counters(&counters()));
        let d = b.finish();
        assert_eq!(word(d, 0), 5);
        assert_eq!(word(d, 4), 2, "address type IPv6");
        assert_eq!(&d[8..24], &address.octets());
        assert_eq!(word(d, 24), 3, "sub-agent id");
        assert_eq!(word(d, 28), 1, "sequence");
        assert_eq!(word(d, 32), 77, "uptime");
        assert_eq!(word(d, 36), 1, "sample count");
        assert_eq!(word(d, 40), 2, "counters_sample data_format");
        assert_eq!(d.len(), 40 + COUNTER_SAMPLE_LEN);
    }

    #[test]
    fn counter_sample_layout_byte_exact() {
        let mut b = DatagramBuilder::new(v4_agent(), 1400);
        b.begin(5000);
        assert!(b.push_counters(&counters()));
        let d = b.finish().to_vec();
        assert_eq!(word(&d, 24), 1, "sample count");

        assert_eq!(word(&d, 28), 2, "counters_sample data_format");
        assert_eq!(word(&d, 32), 12 + 8 + 88, "sample length");
        assert_eq!(word(&d, 36), 21, "sample sequence number");
        assert_eq!(word(&d, 40), 4, "source id");
        assert_eq!(word(&d, 44), 1, "counter record count");
        assert_eq!(word(&d, 48), 1, "if_counters data_format");
        assert_eq!(word(&d, 52), 88, "if_counters length");

        let r = 56;
        assert_eq!(word(&d, r), 4, "ifIndex");
        assert_eq!(word(&d, r + 4), 6, "ifType");
        assert_eq!(hyper(&d, r + 8), 10_000_000_000, "ifSpeed");
        assert_eq!(word(&d, r + 16), 1, "ifDirection");
        assert_eq!(word(&d, r + 20), 3, "ifStatus");
        assert_eq!(hyper(&d, r + 24), 0x0102_0304_0506_0708, "ifInOctets");
        assert_eq!(word(&d, r + 32), 101, "ifInUcastPkts");
        assert_eq!(word(&d, r + 36), 102, "ifInMulticastPkts");
        assert_eq!(word(&d, r + 40), 103, "ifInBroadcastPkts");
        assert_eq!(word(&d, r + 44), 104, "ifInDiscards");
        assert_eq!(word(&d, r + 48), 105, "ifInErrors");
        assert_eq!(word(&d, r + 52), 106, "ifInUnknownProtos");
        assert_eq!(hyper(&d, r + 56), 0x1112_1314_1516_1718, "ifOutOctets");
        assert_eq!(word(&d, r + 64), 201, "ifOutUcastPkts");
        assert_eq!(word(&d, r + 68), 202, "ifOutMulticastPkts");
        assert_eq!(word(&d, r + 72), 203, "ifOutBroadcastPkts");
        assert_eq!(word(&d, r + 76), 204, "ifOutDiscards");
        assert_eq!(word(&d, r + 80), 205, "ifOutErrors");
        assert_eq!(word(&d, r + 84), 2, "ifPromiscuousMode");
        assert_eq!(d.len(), r + 88);
        assert_eq!(d.len(), 28 + COUNTER_SAMPLE_LEN);
    }

    #[test]
    fn size_limit_refuses_whole_samples() {
        // Room for the header and exactly two counter samples.
        let max = 28 + 2 * COUNTER_SAMPLE_LEN;
        let mut b = DatagramBuilder::new(v4_agent(), max);
        b.begin(0);
        assert!(b.push_counters(&counters()));
        assert!(b.push_counters(&counters()));
        assert_eq!(b.datagram_len(), max);
        let before = b.datagram_len();
        assert!(!b.push_counters(&counters()));
        let header = [0u8; 14];
        assert!(!b.push_flow(&flow(&header, Some((1, 1)))));
        assert_eq!(b.datagram_len(), before, "a refused sample writes nothing");
        assert_eq!(b.samples(), 2);
        let d = b.finish();
        assert_eq!(d.len(), max);
        assert_eq!(word(d, 24), 2);

        // One byte short of a flow sample: refused, datagram still valid.
        let header = [0u8; 60];
        let s = flow(&header, Some((1, 1)));
        let mut b = DatagramBuilder::new(v4_agent(), 28 + s.encoded_len() - 1);
        b.begin(0);
        assert!(!b.push_flow(&s));
        assert_eq!(b.datagram_len(), 28);
        assert_eq!(b.samples(), 0);
        let d = b.finish();
        assert_eq!(d.len(), 28);
        assert_eq!(word(d, 24), 0);
    }

    #[test]
    fn mixed_samples_fill_to_the_limit() {
        let header = [0x5A; 100];
        let mut b = DatagramBuilder::new(v4_agent(), 1400);
        b.begin(0);
        let mut pushed = 0;
        loop {
            let ok = if pushed % 2 == 0 {
                b.push_flow(&flow(&header, Some((1, 2))))
            } else {
                b.push_counters(&counters())
            };
            if !ok {
                break;
            }
            pushed += 1;
        }
        assert!(b.datagram_len() <= 1400);
        assert_eq!(b.samples(), pushed);
        let d = b.finish();
        assert_eq!(word(d, 24), pushed);
        // Walk the samples by their length fields: they tile the datagram exactly.
        let mut at = 28;
        for _ in 0..pushed {
            at += 8 + word(d, at + 4) as usize;
        }
        assert_eq!(at, d.len());
    }

    #[test]
    fn sequence_increments_per_begin_and_wraps() {
        let mut b = DatagramBuilder::new(v4_agent(), 1400);
        assert_eq!(b.sequence(), 0);
        for expected in 1..=3u32 {
            b.begin(expected * 10);
            assert_eq!(b.sequence(), expected);
            let d = b.finish();
            assert_eq!(word(d, 16), expected);
            assert_eq!(word(d, 20), expected * 10);
            assert_eq!(word(d, 24), 0);
        }
        // An abandoned datagram still uses up its number.
        b.begin(0);
        b.begin(0);
        assert_eq!(word(b.finish(), 16), 5);

        b.sequence = u32::MAX - 1;
        b.begin(0);
        assert_eq!(word(b.finish(), 16), u32::MAX);
        b.begin(0);
        assert_eq!(word(b.finish(), 16), 0);
    }

    #[test]
    fn reuse_resets_the_datagram() {
        let header = [0u8; 42];
        let mut b = DatagramBuilder::new(v4_agent(), 1400);
        b.begin(0);
        assert!(b.push_flow(&flow(&header, None)));
        assert!(b.push_counters(&counters()));
        let first = b.finish().len();
        let capacity = b.buf.capacity();
        b.begin(1);
        assert_eq!(b.samples(), 0);
        assert_eq!(b.datagram_len(), 28);
        assert!(b.push_counters(&counters()));
        let d = b.finish();
        assert_eq!(d.len(), 28 + COUNTER_SAMPLE_LEN);
        assert!(d.len() < first);
        assert_eq!(word(d, 24), 1);
        assert_eq!(b.buf.capacity(), capacity, "no reallocation");
    }

    #[test]
    fn push_and_finish_without_begin() {
        let mut b = DatagramBuilder::new(v4_agent(), 1400);
        assert!(!b.is_open());
        assert!(!b.push_counters(&counters()));
        assert!(b.finish().is_empty());
        b.begin(0);
        assert!(b.is_open());
        b.finish();
        assert!(!b.is_open());
        assert!(
            !b.push_counters(&counters()),
            "finished datagrams take no more samples"
        );
        assert!(b.finish().is_empty());
    }

    #[test]
    fn frame_length_wraps() {
        let header = [0u8; 14];
        let mut s = flow(&header, None);
        s.frame_length = u32::MAX - 1;
        let mut b = DatagramBuilder::new(v4_agent(), 1400);
        b.begin(0);
        assert!(b.push_flow(&s));
        assert_eq!(word(b.finish(), 80), 2);
    }
}
