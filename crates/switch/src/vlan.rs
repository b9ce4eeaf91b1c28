//! 802.1Q VLANs: which VLAN a received frame belongs to, which ports a VLAN floods to, and the
//! tag a frame carries out of each port.
//!
//! A port is an **access** port (untagged frames, one VLAN; a frame arriving with a tag of another
//! VLAN is dropped) or a **trunk** (tagged frames of its allowed VLANs, and untagged frames in its
//! native VLAN if it has one). That is the model of a Linux bridge with `vlan_filtering 1` (an
//! access port is a port whose only VLAN is its `pvid untagged` one), Open vSwitch's
//! `vlan_mode=access|trunk|native-untagged` and every hardware switch. Frames keep the tag they
//! came with inside the switch; on the way out they get the form the output port wants: the tag
//! popped where the VLAN goes out untagged (access ports, a trunk's native VLAN), pushed where a
//! frame that came in untagged goes out tagged, its VLAN id rewritten where a priority-tagged frame
//! (VLAN id 0) was put into the port's VLAN. The priority bits of a tag are kept.
//!
//! The FIB is keyed by (VLAN, MAC): **independent VLAN learning** (802.1Q §8.8), so two VLANs
//! that reuse a MAC (VRRP's virtual MACs, cloned VMs) are two entries. The key is the compact
//! layout's one word: the MAC in the low 48 bits, the VLAN's *filtering database id* (FID) above
//! it, and the port in the value bits the port count needs ([`value_bits`]). FIDs are assigned
//! by the FIB writer and stay with their VLAN across reloads ([`FidMap`]); a switch of up to 15
//! ports has room for every VLAN id (12 bits of FID), larger ones for fewer configured VLANs.
//!
//! A switch without VLAN settings is VLAN-unaware, like a Linux bridge without `vlan_filtering`:
//! every frame, tagged or not, is switched by its MAC alone (FID 0) and leaves as it came.
//!
//! [`PortPlan`] is what the workers read about the ports — their VLANs, and the storm-control
//! limits of `crate::guard` — immutable, replaced as a whole on reload.

use std::collections::{BTreeMap, BTreeSet};

/// The 802.1Q tag protocol identifier.
pub const TPID: u16 = 0x8100;

/// Highest VLAN id (4095 is reserved).
pub const MAX_VID: u16 = 4094;

/// A port's VLAN settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortVlans {
    /// Untagged frames, all in this VLAN; they leave untagged.
    Access(u16),
    /// Tagged frames of `allowed`; untagged frames in `native` (which leaves untagged) if set.
    Trunk {
        /// VLANs carried tagged.
        allowed: Vec<u16>,
        /// The VLAN of untagged frames.
        native: Option<u16>,
    },
}

impl PortVlans {
    /// Every VLAN the port is a member of.
    pub fn members(&self) -> Vec<u16> {
        match self {
            PortVlans::Access(v) => vec![*v],
            PortVlans::Trunk { allowed, native } => {
                let mut m: BTreeSet<u16> = allowed.iter().copied().collect();
                m.extend(native);
                m.into_iter().collect()
            }
        }
    }

    /// The VLAN untagged frames belong to (and that leaves untagged), if any.
    pub fn untagged(&self) -> Option<u16> {
        match self {
            PortVlans::Access(v) => Some(*v),
            PortVlans::Trunk { native, .. } => *native,
        }
    }
}

impl std::fmt::Display for PortVlans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortVlans::Access(v) => write!(f, "access {v}"),
            PortVlans::Trunk { allowed, native } => {
                let list: Vec<String> = allowed.iter().map(u16::to_string).collect();
                write!(f, "trunk [{}]", list.join(","))?;
                if let Some(n) = native {
                    write!(f, " native {n}")?;
                }
                Ok(())
            }
        }
    }
}

/// Bits of a FIB word the port needs: `value + 1` of every port index fits, 0 means empty.
pub fn value_bits(ports: usize) -> u32 {
    (usize::BITS - ports.leading_zeros()).max(2)
}

/// Bits left for the FID above the 48-bit MAC, for a switch of `ports` ports.
pub fn fid_bits(ports: usize) -> u32 {
    16 - value_bits(ports).min(16)
}

/// The FIB key of `mac` (its 48 bits) in the VLAN with FID `fid`.
#[inline(always)]
pub fn key(fid: u16, mac: u64) -> u64 {
    (fid as u64) << 48 | mac
}

/// The VLANs' FIDs, kept by the FIB writer: a VLAN keeps its FID as long as it is configured, so
/// a reload that adds or removes other VLANs leaves its learned entries where they are.
#[derive(Clone, Debug, Default)]
pub struct FidMap {
    by_vid: BTreeMap<u16, u16>,
}

impl FidMap {
    /// The FID of `vid`, if it has one.
    pub fn get(&self, vid: u16) -> Option<u16> {
        self.by_vid.get(&vid).copied()
    }

    /// FIDs for exactly `vids` (those already mapped keep theirs; new ones take the lowest free
    /// FID from 1; FID 0 is the VLAN-unaware switch's). Err if more than `limit` FIDs exist.
    /// Returns the VLANs dropped (with the FIDs they had).
    pub fn assign(
        &mut self,
        vids: &BTreeSet<u16>,
        limit: usize,
    ) -> Result<Vec<(u16, u16)>, String> {
        if vids.len() > limit {
            return Err(format!(
                "{} VLANs configured, but with this many ports the FIB key has room for {limit}",
                vids.len()
            ));
        }
        let gone: Vec<(u16, u16)> = self
            .by_vid
            .iter()
            .filter(|(v, _)| !vids.contains(v))
            .map(|(&v, &f)| (v, f))
            .collect();
        for (v, _) in &gone {
            self.by_vid.remove(v);
        }
        // A FID freed here is taken again only when no other is free: frames a worker still
        // holds under the old plan must not meet entries of a new VLAN under their old FID.
        let freed: BTreeSet<u16> = gone.iter().map(|&(_, f)| f).collect();
        let mut used: BTreeSet<u16> = self.by_vid.values().copied().collect();
        let top = limit.min(u16::MAX as usize) as u16;
        for &v in vids {
            if let std::collections::btree_map::Entry::Vacant(e) = self.by_vid.entry(v) {
                let f = (1..=top)
                    .find(|f| !used.contains(f) && !freed.contains(f))
                    .or_else(|| (1..=top).find(|f| !used.contains(f)))
                    .expect("no more VLANs than the limit");
                used.insert(f);
                e.insert(f);
            }
        }
        Ok(gone)
    }
}

/// Why a received frame has no VLAN on its port (it is dropped and counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VlanDrop {
    /// Untagged (or priority-tagged) on a port without an untagged VLAN.
    Untagged,
    /// Tagged with a VLAN the port is not a member of.
    NotMember,
    /// Too short for its VLAN tag.
    Truncated,
}

/// A received frame's VLAN: its id, FID, and whether the frame carries a tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ingress {
    /// VLAN id (0 in a VLAN-unaware switch).
    pub vid: u16,
    /// Its FID.
    pub fid: u16,
    /// Whether the frame carries an 802.1Q tag (it is popped where the VLAN leaves untagged).
    pub tagged: bool,
}

/// What the workers read: per port its VLANs and storm limits, per VLAN its FID and member ports.
#[derive(Debug)]
pub struct PortPlan {
    aware: bool,
    /// Per port, the storm-control limits; `storm_on` if any is set.
    storm: Vec<crate::guard::Storm>,
    storm_on: bool,
    /// Per port, the spanning tree's state (none: no spanning tree, every port forwards).
    stp: Option<Vec<crate::stp::State>>,
    /// How often workers refresh a talking MAC's age (a quarter of the aging time; 0: their
    /// own setting).
    refresh_ns: u64,
    /// Per port: the VLAN of untagged frames, 0 if none.
    pvid: Vec<u16>,
    /// Per port: membership bitmap over VLAN ids.
    member: Vec<[u64; 64]>,
    /// VLAN id → FID (0 for VLANs not configured).
    fid: Box<[u16]>,
    /// VLAN id → the member ports, in port order (empty for VLANs not configured).
    ports_of: BTreeMap<u16, Vec<u16>>,
    /// Per port, its settings (for status pages).
    modes: Vec<Option<PortVlans>>,
}

impl PortPlan {
    /// A VLAN-unaware switch of `ports` ports: every frame in FID 0, frames leave as they came.
    pub fn unaware(ports: usize) -> PortPlan {
        PortPlan {
            aware: false,
            storm: vec![Default::default(); ports],
            storm_on: false,
            stp: None,
            refresh_ns: 0,
            pvid: vec![0; ports],
            member: vec![[0; 64]; ports],
            fid: vec![0; 4096].into_boxed_slice(),
            ports_of: BTreeMap::new(),
            modes: vec![None; ports],
        }
    }

    /// The plan for `modes` (one per port), with the FIDs of `fids` (which must map every
    /// member VLAN: [`FidMap::assign`] first).
    pub fn new(modes: &[PortVlans], fids: &FidMap) -> PortPlan {
        let n = modes.len();
        let mut plan = PortPlan::unaware(n);
        plan.aware = true;
        for (p, m) in modes.iter().enumerate() {
            plan.pvid[p] = m.untagged().unwrap_or(0);
            for v in m.members() {
                plan.member[p][v as usize / 64] |= 1 << (v % 64);
                plan.ports_of.entry(v).or_default().push(p as u16);
                plan.fid[v as usize] = fids.get(v).expect("every member VLAN has a FID");
            }
            plan.modes[p] = Some(m.clone());
        }
        plan
    }

    /// The plan with these storm-control limits (one per port).
    pub fn with_storm(mut self, storm: Vec<crate::guard::Storm>) -> PortPlan {
        self.storm_on = storm.iter().any(crate::guard::Storm::any);
        self.storm = storm;
        self
    }

    /// The plan with these spanning-tree port states (`None`: no spanning tree).
    pub fn with_stp(mut self, states: Option<Vec<crate::stp::State>>) -> PortPlan {
        self.stp = states;
        self
    }

    /// The plan with the workers' refresh interval for talking MACs (a quarter of the aging).
    pub fn with_refresh(mut self, refresh_ns: u64) -> PortPlan {
        self.refresh_ns = refresh_ns;
        self
    }

    /// The refresh interval the plan sets, if any.
    pub fn refresh_ns(&self) -> Option<u64> {
        (self.refresh_ns != 0).then_some(self.refresh_ns)
    }

    /// Whether the spanning tree runs (BPDUs go to the control side, port states apply).
    #[inline(always)]
    pub fn stp_on(&self) -> bool {
        self.stp.is_some()
    }

    /// Whether frames may be forwarded from and to `port` (always, without spanning tree).
    #[inline(always)]
    pub fn forwards(&self, port: u16) -> bool {
        match &self.stp {
            None => true,
            Some(s) => s.get(port as usize) == Some(&crate::stp::State::Forwarding),
        }
    }

    /// Whether source MACs are learned on `port` (learning or forwarding).
    #[inline(always)]
    pub fn learns(&self, port: u16) -> bool {
        match &self.stp {
            None => true,
            Some(s) => s.get(port as usize) != Some(&crate::stp::State::Discarding),
        }
    }

    /// The storm-control limits of `port`, if any port has some.
    #[inline(always)]
    pub fn storm(&self, port: u16) -> Option<&crate::guard::Storm> {
        if self.storm_on {
            self.storm.get(port as usize)
        } else {
            None
        }
    }

    /// Whether the switch is VLAN-aware.
    #[inline(always)]
    pub fn aware(&self) -> bool {
        self.aware
    }

    /// The VLAN of untagged frames on `port` (0: none).
    #[inline(always)]
    pub fn untagged_vid(&self, port: u16) -> u16 {
        self.pvid.get(port as usize).copied().unwrap_or(0)
    }

    /// Whether `port` is a member of VLAN `vid`.
    #[inline(always)]
    pub fn is_member(&self, port: u16, vid: u16) -> bool {
        self.member
            .get(port as usize)
            .and_then(|m| m.get(vid as usize / 64))
            .is_some_and(|w| w >> (vid % 64) & 1 == 1)
    }

    /// The FID of a configured VLAN (0 otherwise).
    #[inline(always)]
    pub fn fid(&self, vid: u16) -> u16 {
        self.fid[vid as usize & 0xfff]
    }

    /// The member ports of `vid`, in port order.
    pub fn ports_of(&self, vid: u16) -> &[u16] {
        self.ports_of.get(&vid).map_or(&[], Vec::as_slice)
    }

    /// The configured VLANs, ascending.
    pub fn vids(&self) -> impl Iterator<Item = u16> + '_ {
        self.ports_of.keys().copied()
    }

    /// Port `port`'s settings (none in a VLAN-unaware switch).
    pub fn mode(&self, port: usize) -> Option<&PortVlans> {
        self.modes.get(port).and_then(Option::as_ref)
    }

    /// The VLAN of a frame received on `port` (`frame` at least 14 bytes).
    #[inline]
    pub fn classify(&self, port: u16, frame: &[u8]) -> Result<Ingress, VlanDrop> {
        if !self.aware {
            return Ok(Ingress {
                vid: 0,
                fid: 0,
                tagged: false,
            });
        }
        let tagged = u16::from_be_bytes([frame[12], frame[13]]) == TPID;
        let vid = if tagged {
            let tci = frame.get(14..16).ok_or(VlanDrop::Truncated)?;
            u16::from_be_bytes([tci[0], tci[1]]) & 0xfff
        } else {
            0
        };
        // Untagged and priority-tagged frames (VLAN id 0) belong to the port's untagged VLAN.
        let vid = match vid {
            0 => match self.pvid[port as usize] {
                0 => return Err(VlanDrop::Untagged),
                v => v,
            },
            v if self.is_member(port, v) => v,
            _ => return Err(VlanDrop::NotMember),
        };
        Ok(Ingress {
            vid,
            fid: self.fid(vid),
            tagged,
        })
    }

    /// Give a frame of VLAN `vid` (`tagged`: whether it carries a tag now) the form `port`
    /// sends it in: untagged for the port's untagged VLAN, tagged otherwise. The frame starts at
    /// `start` of `buf` and is `len` bytes; returns its new start and length. Pushing a tag uses 4
    /// bytes of headroom in front of the frame (`start >= 4`).
    #[inline]
    pub fn egress(
        &self,
        port: u16,
        vid: u16,
        tagged: bool,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> (usize, usize) {
        if !self.aware {
            return (start, len);
        }
        let untagged = self.pvid[port as usize] == vid;
        match (tagged, untagged) {
            (true, true) => {
                // Pop: the MACs move 4 bytes up, over the tag.
                buf.copy_within(start..start + 12, start + 4);
                (start + 4, len - 4)
            }
            (false, false) => {
                // Push: the MACs move 4 bytes down into the headroom, the tag goes after them.
                let s = start - 4;
                buf.copy_within(start..start + 12, s);
                buf[s + 12..s + 14].copy_from_slice(&TPID.to_be_bytes());
                buf[s + 14..s + 16].copy_from_slice(&(vid & 0xfff).to_be_bytes());
                (s, len + 4)
            }
            (true, false) => {
                // Keep the tag and its priority; set the VLAN id (a priority tag's is 0).
                let t = start + 14;
                let tci = u16::from_be_bytes([buf[t], buf[t + 1]]) & 0xf000 | vid & 0xfff;
                buf[t..t + 2].copy_from_slice(&tci.to_be_bytes());
                (start, len)
            }
            (false, true) => (start, len),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn frame(tag: Option<u16>) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xb]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xa]);
        match tag {
            Some(tci) => {
                f[12..14].copy_from_slice(&TPID.to_be_bytes());
                f[14..16].copy_from_slice(&tci.to_be_bytes());
                f[16..18].copy_from_slice(&[0x08, 0x00]);
            }
            None => f[12..14].copy_from_slice(&[0x08, 0x00]),
        }
        f[20] = 0x77;
        f
    }

    /// Port 0 access VLAN 10, port 1 access VLAN 20, port 2 trunk of 10 and 20, port 3 trunk of
    /// 20 with native VLAN 10 (also the stage's tests' switch).
    pub(crate) fn four_ports() -> Vec<PortVlans> {
        vec![
            PortVlans::Access(10),
            PortVlans::Access(20),
            PortVlans::Trunk {
                allowed: vec![10, 20],
                native: None,
            },
            PortVlans::Trunk {
                allowed: vec![20],
                native: Some(10),
            },
        ]
    }

    fn plan() -> (PortPlan, FidMap) {
        let modes = four_ports();
        let mut fids = FidMap::default();
        let vids = modes.iter().flat_map(PortVlans::members).collect();
        fids.assign(&vids, 4096).unwrap();
        (PortPlan::new(&modes, &fids), fids)
    }

    #[test]
    fn frames_are_classified_by_port_and_tag() {
        let (p, fids) = plan();
        let (f10, f20) = (fids.get(10).unwrap(), fids.get(20).unwrap());
        assert_ne!(f10, f20);
        let ing = |vid, fid, tagged| Ok(Ingress { vid, fid, tagged });
        assert_eq!(p.classify(0, &frame(None)), ing(10, f10, false));
        // A priority tag (VLAN 0) puts the frame in the port's VLAN, tag kept.
        assert_eq!(p.classify(0, &frame(Some(0xa000))), ing(10, f10, true));
        assert_eq!(p.classify(0, &frame(Some(20))), Err(VlanDrop::NotMember));
        assert_eq!(p.classify(0, &frame(Some(10))), ing(10, f10, true));
        assert_eq!(p.classify(2, &frame(Some(20))), ing(20, f20, true));
        assert_eq!(p.classify(2, &frame(None)), Err(VlanDrop::Untagged));
        assert_eq!(p.classify(2, &frame(Some(30))), Err(VlanDrop::NotMember));
        assert_eq!(p.classify(3, &frame(None)), ing(10, f10, false));
        assert_eq!(p.classify(3, &frame(Some(10))), ing(10, f10, true));
        assert_eq!(
            p.classify(2, &frame(Some(20))[..15]),
            Err(VlanDrop::Truncated)
        );
        assert_eq!(p.ports_of(10), [0, 2, 3]);
        assert_eq!(p.ports_of(20), [1, 2, 3]);
        assert!(p.ports_of(30).is_empty());
        let u = PortPlan::unaware(4);
        assert_eq!(u.classify(1, &frame(Some(77))), ing(0, 0, false));
    }

    /// The frame as `port` sends it.
    fn out(p: &PortPlan, port: u16, vid: u16, f: &[u8]) -> Vec<u8> {
        let tagged = u16::from_be_bytes([f[12], f[13]]) == TPID;
        let mut buf = vec![0u8; 64 + f.len() + 8];
        buf[64..64 + f.len()].copy_from_slice(f);
        let (s, l) = p.egress(port, vid, tagged, &mut buf, 64, f.len());
        buf[s..s + l].to_vec()
    }

    #[test]
    fn frames_leave_in_the_form_of_the_output_port() {
        let (p, _) = plan();
        let untagged = frame(None);
        // Untagged in, tagged out on a trunk: the tag goes after the MACs, the rest follows.
        let t = out(&p, 2, 10, &untagged);
        assert_eq!(t.len(), 64);
        assert_eq!(t[..12], untagged[..12]);
        assert_eq!(t[12..16], [0x81, 0x00, 0x00, 0x0a]);
        assert_eq!(t[16..], untagged[12..]);
        // And back: popped on an access port, and on the trunk whose native VLAN it is.
        assert_eq!(out(&p, 0, 10, &t), untagged);
        assert_eq!(out(&p, 3, 10, &t), untagged);
        // Another VLAN leaves that trunk tagged, as it came.
        assert_eq!(out(&p, 3, 20, &frame(Some(20))), frame(Some(20)));
        // A priority tag gets the VLAN id, the priority bits stay.
        assert_eq!(out(&p, 2, 10, &frame(Some(0xa000))), frame(Some(0xa00a)));
        // Unaware: untouched.
        let u = PortPlan::unaware(4);
        assert_eq!(out(&u, 2, 0, &frame(Some(10))), frame(Some(10)));
    }

    #[test]
    fn fids_stay_with_their_vlan_across_reassignments() {
        let mut m = FidMap::default();
        let set = |v: &[u16]| v.iter().copied().collect::<BTreeSet<u16>>();
        assert!(m.assign(&set(&[10, 20, 30]), 8).unwrap().is_empty());
        let (a, b, c) = (m.get(10).unwrap(), m.get(20).unwrap(), m.get(30).unwrap());
        assert_eq!(m.assign(&set(&[10, 30, 40]), 8).unwrap(), vec![(20, b)]);
        assert_eq!((m.get(10), m.get(30), m.get(20)), (Some(a), Some(c), None));
        assert_eq!(m.get(40), Some(4), "a FID freed in the same change waits");
        // Later, freed FIDs are taken again (lowest first).
        m.assign(&set(&[10, 30, 40, 50]), 8).unwrap();
        assert_eq!(m.get(50), Some(b));
        // With no other room, a FID freed in the same change is taken.
        let mut tight = FidMap::default();
        tight.assign(&set(&[1, 2]), 2).unwrap();
        assert_eq!(tight.assign(&set(&[1, 3]), 2).unwrap(), vec![(2, 2)]);
        assert_eq!(tight.get(3), Some(2));
        let e = m.assign(&set(&[1, 2, 3]), 2).unwrap_err();
        assert!(e.contains("room for 2"), "{e}");
        assert_eq!(value_bits(2), 2);
        assert_eq!(value_bits(3), 2);
        assert_eq!(value_bits(4), 3);
        assert_eq!(value_bits(15), 4);
        assert_eq!(fid_bits(15), 12);
        assert_eq!(fid_bits(16), 11);
    }
}
