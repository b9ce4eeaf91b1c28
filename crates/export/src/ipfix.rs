//! IPFIX messages (RFC 7011): templates, options templates and data records for one observation
//! domain.
//!
//! A message (§3.1) is a 16-byte header — version 10, length, export time (seconds since the
//! epoch), the sequence number (data records of this domain sent *before* this message, modulo
//! 2^32), the observation domain id — followed by sets (§3.3): a template set (id 2), an options
//! template set (id 3) or a data set (id = its template's id, 256 or more). A set is a 4-byte
//! header (id, length including the header) and records; a template record (§3.4.1) is its id, its
//! field count and the field specifiers; an options template record (§3.4.2) adds the count of
//! scope fields, which come first. A field specifier (§3.2) is the element id and length, with the
//! enterprise bit and a 4-byte enterprise number for elements outside the IANA registry.
//!
//! [`MessageBuilder`] writes messages up to a size limit (a UDP export keeps them under the
//! path MTU: RFC 7011 §10.3.3); consecutive records of one template share a set. Records are
//! written into a [`Record`] in the template's field order; the builder checks the length.
//! Over UDP the exporter sends its templates again periodically (§8.4): that is the caller's
//! clock, the builder only writes what it is given.

use std::net::IpAddr;

/// IPFIX version number in the message header.
pub const VERSION: u16 = 10;
/// Message header bytes.
pub const HEADER: usize = 16;
/// Set id of template sets.
pub const TEMPLATE_SET: u16 = 2;
/// Set id of options template sets.
pub const OPTIONS_TEMPLATE_SET: u16 = 3;
/// The first template id a data set may use.
pub const FIRST_TEMPLATE_ID: u16 = 256;

/// Information elements of the IANA IPFIX registry that flowplane exports (id; the registry's
/// abstract type and length in the comment).
pub mod ie {
    /// octetDeltaCount (unsigned64).
    pub const OCTET_DELTA_COUNT: u16 = 1;
    /// packetDeltaCount (unsigned64).
    pub const PACKET_DELTA_COUNT: u16 = 2;
    /// protocolIdentifier (unsigned8).
    pub const PROTOCOL_IDENTIFIER: u16 = 4;
    /// sourceTransportPort (unsigned16).
    pub const SOURCE_TRANSPORT_PORT: u16 = 7;
    /// sourceIPv4Address (ipv4Address).
    pub const SOURCE_IPV4_ADDRESS: u16 = 8;
    /// ingressInterface (unsigned32).
    pub const INGRESS_INTERFACE: u16 = 10;
    /// destinationTransportPort (unsigned16).
    pub const DESTINATION_TRANSPORT_PORT: u16 = 11;
    /// destinationIPv4Address (ipv4Address).
    pub const DESTINATION_IPV4_ADDRESS: u16 = 12;
    /// ipNextHopIPv4Address (ipv4Address).
    pub const IP_NEXT_HOP_IPV4_ADDRESS: u16 = 15;
    /// sourceIPv6Address (ipv6Address).
    pub const SOURCE_IPV6_ADDRESS: u16 = 27;
    /// destinationIPv6Address (ipv6Address).
    pub const DESTINATION_IPV6_ADDRESS: u16 = 28;
    /// exportedMessageTotalCount (unsigned64).
    pub const EXPORTED_MESSAGE_TOTAL_COUNT: u16 = 41;
    /// exportedFlowRecordTotalCount (unsigned64).
    pub const EXPORTED_FLOW_RECORD_TOTAL_COUNT: u16 = 42;
    /// ipNextHopIPv6Address (ipv6Address).
    pub const IP_NEXT_HOP_IPV6_ADDRESS: u16 = 62;
    /// flowEndReason (unsigned8): 1 idle timeout, 2 active timeout, 3 end of flow detected,
    /// 4 forced end, 5 lack of resources.
    pub const FLOW_END_REASON: u16 = 136;
    /// exportingProcessId (unsigned32).
    pub const EXPORTING_PROCESS_ID: u16 = 144;
    /// observationDomainId (unsigned32).
    pub const OBSERVATION_DOMAIN_ID: u16 = 149;
    /// flowStartMilliseconds (dateTimeMilliseconds).
    pub const FLOW_START_MILLISECONDS: u16 = 152;
    /// flowEndMilliseconds (dateTimeMilliseconds).
    pub const FLOW_END_MILLISECONDS: u16 = 153;
    /// notSentFlowTotalCount (unsigned64).
    pub const NOT_SENT_FLOW_TOTAL_COUNT: u16 = 166;
    /// firewallEvent (unsigned8): 1 flow created, 2 flow deleted, 5 flow update.
    pub const FIREWALL_EVENT: u16 = 233;
    /// selectorId (unsigned64).
    pub const SELECTOR_ID: u16 = 302;
    /// selectorAlgorithm (unsigned16): 3 = random n-out-of-N sampling (RFC 5477).
    pub const SELECTOR_ALGORITHM: u16 = 304;
    /// samplingPacketInterval (unsigned32).
    pub const SAMPLING_PACKET_INTERVAL: u16 = 305;
    /// samplingPacketSpace (unsigned32).
    pub const SAMPLING_PACKET_SPACE: u16 = 306;
    /// observationTimeMilliseconds (dateTimeMilliseconds).
    pub const OBSERVATION_TIME_MILLISECONDS: u16 = 323;
}

/// `flowEndReason` values (RFC 7012 / IANA registry).
pub mod end_reason {
    /// The flow was idle longer than its timeout.
    pub const IDLE_TIMEOUT: u8 = 1;
    /// The flow ended (e.g. TCP FIN) and was detected.
    pub const END_OF_FLOW: u8 = 3;
    /// The exporter ended the flow for an external reason (e.g. shutdown).
    pub const FORCED_END: u8 = 4;
    /// The flow was ended for lack of resources (its entry was taken by another flow).
    pub const LACK_OF_RESOURCES: u8 = 5;
}

/// A field specifier: an information element and its length on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Element id (without the enterprise bit).
    pub id: u16,
    /// Length in bytes.
    pub len: u16,
    /// Private Enterprise Number of the element; 0 for the IANA registry.
    pub enterprise: u32,
}

impl Field {
    /// An element of the IANA registry.
    pub const fn iana(id: u16, len: u16) -> Field {
        Field {
            id,
            len,
            enterprise: 0,
        }
    }

    /// An enterprise-specific element.
    pub const fn enterprise(enterprise: u32, id: u16, len: u16) -> Field {
        Field {
            id,
            len,
            enterprise,
        }
    }

    /// Bytes of the specifier in a template record.
    fn wire_len(&self) -> usize {
        if self.enterprise == 0 {
            4
        } else {
            8
        }
    }
}

/// A template (or options template) record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// Template id (256 and up); data sets of its records carry it as their set id.
    pub id: u16,
    /// Fields that are scope fields (the first ones); 0 for a plain template.
    pub scope: u16,
    /// The fields, in record order.
    pub fields: Vec<Field>,
}

impl Template {
    /// A template for data records.
    pub fn data(id: u16, fields: Vec<Field>) -> Template {
        assert!(id >= FIRST_TEMPLATE_ID, "template ids start at 256");
        Template {
            id,
            scope: 0,
            fields,
        }
    }

    /// An options template: the first `scope` fields are its scope.
    pub fn options(id: u16, scope: u16, fields: Vec<Field>) -> Template {
        assert!(id >= FIRST_TEMPLATE_ID, "template ids start at 256");
        assert!(
            scope >= 1 && scope as usize <= fields.len(),
            "an options template has 1..=fields scope fields"
        );
        Template { id, scope, fields }
    }

    /// Bytes of one data record of this template.
    pub fn record_len(&self) -> usize {
        self.fields.iter().map(|f| f.len as usize).sum()
    }

    /// Bytes of the template record itself.
    fn wire_len(&self) -> usize {
        let head = if self.scope == 0 { 4 } else { 6 };
        head + self.fields.iter().map(Field::wire_len).sum::<usize>()
    }

    fn set_id(&self) -> u16 {
        if self.scope == 0 {
            TEMPLATE_SET
        } else {
            OPTIONS_TEMPLATE_SET
        }
    }
}

/// A data record being written, field by field, in network byte order.
#[derive(Clone, Debug, Default)]
pub struct Record {
    buf: Vec<u8>,
}

impl Record {
    /// An empty record.
    pub fn new() -> Record {
        Record {
            buf: Vec::with_capacity(128),
        }
    }

    /// Empty the record for the next one (keeps its memory).
    pub fn clear(&mut self) -> &mut Record {
        self.buf.clear();
        self
    }

    /// An unsigned8 field.
    pub fn u8(&mut self, v: u8) -> &mut Record {
        self.buf.push(v);
        self
    }

    /// An unsigned16 field.
    pub fn u16(&mut self, v: u16) -> &mut Record {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// An unsigned32 field.
    pub fn u32(&mut self, v: u32) -> &mut Record {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// An unsigned64 (or dateTimeMilliseconds) field.
    pub fn u64(&mut self, v: u64) -> &mut Record {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// An ipv4Address (4 bytes) or ipv6Address (16 bytes) field.
    pub fn ip(&mut self, a: IpAddr) -> &mut Record {
        match a {
            IpAddr::V4(a) => self.buf.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => self.buf.extend_from_slice(&a.octets()),
        }
        self
    }

    /// The bytes written so far.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// Writes IPFIX messages of one observation domain, each at most `max_bytes` long.
#[derive(Debug)]
pub struct MessageBuilder {
    buf: Vec<u8>,
    max: usize,
    domain: u32,
    /// Data records of the domain in messages finished so far.
    sequence: u32,
    /// Data records in the message being written.
    records: u32,
    /// The open set: where its header starts, and its id.
    set: Option<(usize, u16)>,
    /// A message was begun and not finished.
    begun: bool,
}

impl MessageBuilder {
    /// A builder for observation domain `domain`, messages of at most `max_bytes` (at least 256).
    pub fn new(domain: u32, max_bytes: usize) -> MessageBuilder {
        let max = max_bytes.clamp(256, u16::MAX as usize);
        MessageBuilder {
            buf: Vec::with_capacity(max),
            max,
            domain,
            sequence: 0,
            records: 0,
            set: None,
            begun: false,
        }
    }

    /// The observation domain.
    pub fn domain(&self) -> u32 {
        self.domain
    }

    /// Data records in finished messages (the next message's sequence number).
    pub fn sequence(&self) -> u32 {
        self.sequence
    }

    /// Start a message, dropping any unfinished one.
    pub fn begin(&mut self) {
        self.buf.clear();
        self.set = None;
        self.records = 0;
        self.begun = true;
        self.buf.extend_from_slice(&VERSION.to_be_bytes());
        self.buf.extend_from_slice(&0u16.to_be_bytes());
        self.buf.extend_from_slice(&0u32.to_be_bytes());
        self.buf.extend_from_slice(&self.sequence.to_be_bytes());
        self.buf.extend_from_slice(&self.domain.to_be_bytes());
    }

    /// Whether the message holds no set yet (or was not begun).
    pub fn is_empty(&self) -> bool {
        !self.begun || self.buf.len() <= HEADER
    }

    /// Whether a message was begun and not finished.
    pub fn begun(&self) -> bool {
        self.begun
    }

    /// Data records in the message so far.
    pub fn records(&self) -> u32 {
        self.records
    }

    /// Append a template record (in a template or options template set); false, with nothing
    /// written, when it does not fit.
    pub fn push_template(&mut self, t: &Template) -> bool {
        assert!(self.begun(), "push without begin");
        let (id, need) = (t.set_id(), t.wire_len());
        if !self.room(id, need) {
            return false;
        }
        self.open(id);
        self.buf.extend_from_slice(&t.id.to_be_bytes());
        self.buf
            .extend_from_slice(&(t.fields.len() as u16).to_be_bytes());
        if t.scope != 0 {
            self.buf.extend_from_slice(&t.scope.to_be_bytes());
        }
        for f in &t.fields {
            if f.enterprise == 0 {
                self.buf.extend_from_slice(&f.id.to_be_bytes());
                self.buf.extend_from_slice(&f.len.to_be_bytes());
            } else {
                self.buf.extend_from_slice(&(f.id | 0x8000).to_be_bytes());
                self.buf.extend_from_slice(&f.len.to_be_bytes());
                self.buf.extend_from_slice(&f.enterprise.to_be_bytes());
            }
        }
        true
    }

    /// Append a data record of template `t`; false, with nothing written, when it does not fit.
    ///
    /// # Panics
    /// When the record's length is not the template's record length (a programming error).
    pub fn push_record(&mut self, t: &Template, r: &Record) -> bool {
        assert_eq!(
            r.bytes().len(),
            t.record_len(),
            "record of template {} has the wrong length",
            t.id
        );
        assert!(self.begun(), "push without begin");
        if !self.room(t.id, r.bytes().len()) {
            return false;
        }
        self.open(t.id);
        self.buf.extend_from_slice(r.bytes());
        self.records += 1;
        true
    }

    /// Close the message as it leaves at `export_time_s` (seconds since the epoch): its length
    /// and export time go into the header, its records into the sequence number. Returns the
    /// message's bytes; the next one needs [`MessageBuilder::begin`].
    ///
    /// # Panics
    /// When no message was begun.
    pub fn finish(&mut self, export_time_s: u32) -> &[u8] {
        assert!(self.begun(), "finish without begin");
        self.close();
        let len = self.buf.len() as u16;
        self.buf[2..4].copy_from_slice(&len.to_be_bytes());
        self.buf[4..8].copy_from_slice(&export_time_s.to_be_bytes());
        self.sequence = self.sequence.wrapping_add(self.records);
        self.records = 0;
        self.begun = false;
        &self.buf
    }

    /// Whether `bytes` more fit, with a new set header unless the open set has id `set`.
    fn room(&self, set: u16, bytes: usize) -> bool {
        let header = if matches!(self.set, Some((_, s)) if s == set) {
            0
        } else {
            4
        };
        self.buf.len() + header + bytes <= self.max
    }

    /// Make the open set one of id `set`.
    fn open(&mut self, set: u16) {
        if matches!(self.set, Some((_, s)) if s == set) {
            return;
        }
        self.close();
        self.set = Some((self.buf.len(), set));
        self.buf.extend_from_slice(&set.to_be_bytes());
        self.buf.extend_from_slice(&0u16.to_be_bytes());
    }

    /// Write the open set's length (no padding: records are written whole).
    fn close(&mut self) {
        if let Some((start, _)) = self.set.take() {
            let len = (self.buf.len() - start) as u16;
            self.buf[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    fn be32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn tuple() -> Template {
        Template::data(
            256,
            vec![
                Field::iana(ie::SOURCE_IPV4_ADDRESS, 4),
                Field::iana(ie::SOURCE_TRANSPORT_PORT, 2),
                Field::iana(ie::PROTOCOL_IDENTIFIER, 1),
                Field::enterprise(32473, 1, 1),
            ],
        )
    }

    fn record(port: u16) -> Record {
        let mut r = Record::new();
        r.ip([10, 0, 0, 1].into()).u16(port).u8(6).u8(1);
        r
    }

    #[test]
    fn a_message_is_laid_out_as_the_rfc_says() {
        let t = tuple();
        let mut m = MessageBuilder::new(7, 1400);
        m.begin();
        assert!(m.push_template(&t));
        assert!(m.push_record(&t, &record(80)));
        assert!(m.push_record(&t, &record(81)));
        let b = m.finish(0x6000_0000).to_vec();
        // Header.
        assert_eq!(be16(&b, 0), 10);
        assert_eq!(be16(&b, 2) as usize, b.len());
        assert_eq!(be32(&b, 4), 0x6000_0000);
        assert_eq!(be32(&b, 8), 0, "no data records before the first message");
        assert_eq!(be32(&b, 12), 7);
        // Template set: id 2, length 4 + (4 + 3 * 4 + 8).
        assert_eq!(be16(&b, 16), TEMPLATE_SET);
        assert_eq!(be16(&b, 18), 4 + 4 + 12 + 8);
        assert_eq!(be16(&b, 20), 256);
        assert_eq!(be16(&b, 22), 4);
        assert_eq!((be16(&b, 24), be16(&b, 26)), (8, 4));
        assert_eq!((be16(&b, 28), be16(&b, 30)), (7, 2));
        assert_eq!((be16(&b, 32), be16(&b, 34)), (4, 1));
        // The enterprise bit, then the enterprise number.
        assert_eq!((be16(&b, 36), be16(&b, 38)), (0x8001, 1));
        assert_eq!(be32(&b, 40), 32473);
        // One data set with both records.
        let d = 44;
        assert_eq!(be16(&b, d), 256);
        assert_eq!(be16(&b, d + 2), 4 + 2 * 8);
        assert_eq!(&b[d + 4..d + 12], &[10, 0, 0, 1, 0, 80, 6, 1]);
        assert_eq!(&b[d + 12..d + 20], &[10, 0, 0, 1, 0, 81, 6, 1]);
        assert_eq!(b.len(), d + 20);
        // The next message counts the two records before it.
        m.begin();
        assert!(m.push_record(&t, &record(82)));
        let b = m.finish(1).to_vec();
        assert_eq!(be32(&b, 8), 2);
        assert_eq!(be16(&b, 16), 256);
    }

    #[test]
    fn an_options_template_names_its_scope() {
        let t = Template::options(
            300,
            1,
            vec![
                Field::iana(ie::SELECTOR_ID, 8),
                Field::iana(ie::SELECTOR_ALGORITHM, 2),
                Field::iana(ie::SAMPLING_PACKET_INTERVAL, 4),
                Field::iana(ie::SAMPLING_PACKET_SPACE, 4),
            ],
        );
        let mut m = MessageBuilder::new(1, 1400);
        m.begin();
        assert!(m.push_template(&t));
        let b = m.finish(1).to_vec();
        assert_eq!(be16(&b, 16), OPTIONS_TEMPLATE_SET);
        assert_eq!(be16(&b, 18), 4 + 6 + 4 * 4);
        assert_eq!((be16(&b, 20), be16(&b, 22), be16(&b, 24)), (300, 4, 1));
        assert_eq!((be16(&b, 26), be16(&b, 28)), (ie::SELECTOR_ID, 8));
    }

    #[test]
    fn records_that_do_not_fit_are_refused_whole() {
        let t = tuple();
        let mut m = MessageBuilder::new(1, 256);
        m.begin();
        assert!(m.push_template(&t));
        let mut n = 0;
        while m.push_record(&t, &record(n)) {
            n += 1;
        }
        let b = m.finish(1).to_vec();
        assert!(b.len() <= 256);
        // Header 16, template set 28, data set header 4: the rest in whole 8-byte records.
        assert_eq!(n as usize, (256 - 16 - 28 - 4) / 8);
        assert_eq!(b.len(), 16 + 28 + 4 + 8 * n as usize);
        assert_eq!(be16(&b, 44 + 2) as usize, 4 + 8 * n as usize);
    }

    #[test]
    #[should_panic(expected = "wrong length")]
    fn a_record_of_the_wrong_length_is_a_bug() {
        let t = tuple();
        let mut m = MessageBuilder::new(1, 1400);
        m.begin();
        let mut r = Record::new();
        r.u8(1);
        m.push_record(&t, &r);
    }
}
