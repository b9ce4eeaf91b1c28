//! Flow export: IPFIX messages (RFC 7011) and sFlow version 5 datagrams, and the UDP socket that
//! sends them to collectors.
//!
//! Layer: **control** (no packet path; the workers hand fixed-size events to a control thread,
//! which encodes them here and sends them).
//!
//! Neither seed paper exports flows; Maglev §4.4 debugs with a packet tracer and aggregate
//! counters. Operators of the systems flowplane replaces read flow records instead: Open vSwitch
//! and VPP export IPFIX, switches export sFlow, and collectors (nfdump's `nfcapd`, pmacct's
//! `nfacctd`/`sfacctd`) store them. This crate writes both formats byte for byte as their
//! specifications say, without I/O in the encoders:
//!
//! * [`ipfix`]: messages of template, options-template and data sets for one observation domain,
//!   with the message header's export time and data-record sequence number (RFC 7011 §3), and
//!   the information elements of the IANA registry that flowplane uses ([`ipfix::ie`]).
//! * [`sflow`]: datagrams of flow samples (raw packet header and extended switch records) and
//!   counter samples (generic interface counters), as the sFlow version 5 specification lays
//!   them out.
//! * [`udp`]: one socket, many collectors, counting what was sent and what failed.
//! * [`ring`]: the bounded single-producer single-consumer queue a worker hands events to the
//!   exporter through, without waiting and without a read-modify-write per event.
//! * [`config`]: the `[ipfix]` and `[sflow]` configuration sections, validated with errors that
//!   name the field.
//!
//! ```
//! use fp_export::ipfix::{ie, Field, MessageBuilder, Record, Template};
//!
//! let t = Template::data(256, vec![
//!     Field::iana(ie::SOURCE_IPV4_ADDRESS, 4),
//!     Field::iana(ie::DESTINATION_TRANSPORT_PORT, 2),
//! ]);
//! let mut m = MessageBuilder::new(1, 1400);
//! m.begin();
//! assert!(m.push_template(&t));
//! let mut r = Record::new();
//! r.ip([192, 0, 2, 1].into()).u16(80);
//! assert!(m.push_record(&t, &r));
//! let bytes = m.finish(1_700_000_000);
//! assert_eq!(&bytes[..2], &[0, 10]); // IPFIX version 10
//! assert_eq!(u16::from_be_bytes([bytes[2], bytes[3]]) as usize, bytes.len());
//! ```
#![deny(unsafe_code)]

pub mod config;
pub mod ipfix;
pub mod rate;
pub mod ring;
pub mod sflow;
pub mod udp;
