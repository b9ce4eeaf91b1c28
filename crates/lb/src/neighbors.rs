//! The kernel's neighbour tables, read for the balancer's control side: which MAC each on-link
//! backend (and peer balancer) has, and a way to make the kernel resolve the ones it lacks. Only
//! the service (`service.rs`) calls these; the state machine takes the result as an event.

use fp_wire::ethernet::MacAddr;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// The complete neighbour entries of `ifname` (IPv4 always; IPv6 when `v6`).
pub fn read(ifname: &str, v6: bool) -> HashMap<IpAddr, MacAddr> {
    let mut table = HashMap::new();
    neighbors_v4(ifname, &mut table);
    if v6 {
        neighbors_v6(ifname, &mut table);
    }
    table
}

/// Make the kernel resolve neighbours it has no entry for: an empty datagram to the discard port
/// (a health check would do the same, but not every pool has one).
pub fn resolve(addrs: &[IpAddr]) {
    for &a in addrs {
        let bind: SocketAddr = if a.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        if let Ok(s) = UdpSocket::bind(bind) {
            let _ = s.send_to(&[], SocketAddr::new(a, 9));
        }
    }
}

/// A neighbour's MAC; the kernel shows an incomplete entry as all zeros.
fn neighbor_mac(s: &str) -> Option<MacAddr> {
    s.parse().ok().filter(|m: &MacAddr| m.0 != [0; 6])
}

/// Complete IPv4 neighbour entries of `ifname` from `/proc/net/arp` (flag ATF_COM).
fn neighbors_v4(ifname: &str, out: &mut HashMap<IpAddr, MacAddr>) {
    let Ok(text) = std::fs::read_to_string("/proc/net/arp") else {
        return;
    };
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[5] != ifname {
            continue;
        }
        let complete = u32::from_str_radix(f[2].trim_start_matches("0x"), 16).unwrap_or(0) & 2;
        if let (Ok(ip), Some(mac), true) =
            (f[0].parse::<IpAddr>(), neighbor_mac(f[3]), complete != 0)
        {
            out.insert(ip, mac);
        }
    }
}

/// IPv6 neighbour entries with a link-layer address (`ip -6 neigh show dev IF`); there is no
/// procfs file for them.
fn neighbors_v6(ifname: &str, out: &mut HashMap<IpAddr, MacAddr>) {
    let Ok(o) = std::process::Command::new("ip")
        .args(["-6", "neigh", "show", "dev", ifname])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(i) = f.iter().position(|w| *w == "lladdr") else {
            continue;
        };
        if f.last() == Some(&"FAILED") || f.last() == Some(&"INCOMPLETE") {
            continue;
        }
        if let (Ok(ip), Some(mac)) = (
            f[0].parse::<IpAddr>(),
            f.get(i + 1).and_then(|m| neighbor_mac(m)),
        ) {
            out.insert(ip, mac);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbor_macs() {
        assert_eq!(
            neighbor_mac("02:66:70:00:00:01"),
            Some(MacAddr([2, 0x66, 0x70, 0, 0, 1]))
        );
        assert_eq!(
            neighbor_mac("00:00:00:00:00:00"),
            None,
            "incomplete ARP entries"
        );
        assert_eq!(neighbor_mac("02:66:70:00:00"), None);
        assert_eq!(neighbor_mac("02:66:70:00:00:01:02"), None);
    }
}
