#!/usr/bin/env python3
"""Write seed frames for the fuzz targets into fuzz/seeds/frames (valid frames of every shape the
parser knows; the fuzzer mutates from there). Run from anywhere; deterministic output."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "frames")


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def eth(et, tags=()):
    h = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1])
    for tpid, tci in tags:
        h += struct.pack("!HH", tpid, tci)
    return h + struct.pack("!H", et)


def ipv4(proto, payload, src=b"\xc6\x33\x64\x07", dst=b"\xcb\x00\x71\x0a", flags=0x4000, opts=b"", ident=0x1234):
    hl = 20 + len(opts)
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | hl // 4, 0, hl + len(payload), ident, flags, 64, proto, 0, src, dst) + opts
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload


V6S = bytes.fromhex("20010db8000000000000000000000007")
V6D = bytes.fromhex("20010db8000000000000000000000010")


def ipv6(nh, payload, exts=b""):
    return struct.pack("!IHBB16s16s", 6 << 28, len(exts) + len(payload), nh, 64, V6S, V6D) + exts + payload


def tcp(src, dst, ph, flags=0x02, opts=b"\x02\x04\x05\xb4"):
    hl = 20 + len(opts)
    t = struct.pack("!HHIIHHHH", 40000, 443, 1, 0, (hl // 4) << 12 | flags, 65535, 0, 0) + opts
    return t[:16] + struct.pack("!H", csum(ph(6, len(t)) + t)) + t[18:]


def udp(ph, payload=b"hello"):
    u = struct.pack("!HHHH", 5353, 53, 8 + len(payload), 0) + payload
    return u[:6] + struct.pack("!H", csum(ph(17, len(u)) + u) or 0xFFFF) + u[8:]


def ph4(p, n):
    return b"\xc6\x33\x64\x07\xcb\x00\x71\x0a" + struct.pack("!BBH", 0, p, n)


def ph6(p, n):
    return V6S + V6D + struct.pack("!IxxxB", n, p)


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {}
    seeds["v4_tcp_syn"] = eth(0x0800) + ipv4(6, tcp(0, 0, ph4))
    seeds["v4_udp_vlan"] = eth(0x0800, [(0x8100, 0x0064)]) + ipv4(17, udp(ph4))
    seeds["v4_qinq_opts"] = eth(0x0800, [(0x88A8, 1), (0x8100, 2)]) + ipv4(17, udp(ph4), opts=b"\x94\x04\x00\x00")
    seeds["v4_first_frag"] = eth(0x0800) + ipv4(17, udp(ph4), flags=0x2000)
    seeds["v4_later_frag"] = eth(0x0800) + ipv4(17, b"x" * 24, flags=185)
    icmp_body = bytes([3, 4, 0, 0, 0, 0, 5, 0x78]) + ipv4(6, tcp(0, 0, ph4))[:28]
    icmp_body = icmp_body[:2] + struct.pack("!H", csum(icmp_body)) + icmp_body[4:]
    seeds["v4_icmp_frag_needed"] = eth(0x0800) + ipv4(1, icmp_body)
    ah = bytes([6, 4, 0, 0]) + struct.pack("!II", 0x100, 1) + b"\xaa" * 12
    seeds["v4_ah_tcp"] = eth(0x0800) + ipv4(51, ah + tcp(0, 0, ph4))
    seeds["v6_tcp"] = eth(0x86DD) + ipv6(6, tcp(0, 0, ph6))
    hbh = bytes([60, 0, 5, 2, 0, 0, 1, 0])
    dst = bytes([44, 0, 1, 4, 0, 0, 0, 0])
    frag = struct.pack("!BBHI", 17, 0, 1, 0xCAFEF00D)
    seeds["v6_hbh_dst_frag_udp"] = eth(0x86DD) + ipv6(0, udp(ph6), hbh + dst + frag)
    seeds["v6_later_frag"] = eth(0x86DD) + ipv6(44, b"y" * 32, struct.pack("!BBHI", 17, 0, 1480, 7))
    icmp6 = bytes([128, 0, 0, 0, 0, 1, 0, 1]) + b"ping"
    icmp6 = icmp6[:2] + struct.pack("!H", csum(ph6(58, len(icmp6)) + icmp6)) + icmp6[4:]
    seeds["v6_icmp_echo"] = eth(0x86DD) + ipv6(58, icmp6)
    inner = ipv4(6, tcp(0, 0, ph4))
    seeds["gre_v4"] = eth(0x0800) + ipv4(47, bytes([0x21, 0, 8, 0, 0, 0, 0, 9]) + inner, src=b"\x0a\0\0\x01", dst=b"\x0a\0\x01\x05")
    seeds["ipip_v4"] = eth(0x0800) + ipv4(4, inner, src=b"\x0a\0\0\x01", dst=b"\x0a\0\x01\x05")
    vx = struct.pack("!HHHH", 49999, 4789, 8 + 8 + 14 + len(inner), 0) + bytes([8, 0, 0, 0, 0, 0, 42, 0]) + eth(0x0800) + inner
    seeds["vxlan_v4"] = eth(0x0800) + ipv4(17, vx, src=b"\x0a\0\0\x01", dst=b"\x0a\0\x01\x05")
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, b"\2\0\0\0\0\1", b"\x0a\0\0\1", b"\0" * 6, b"\x0a\0\0\2")
    seeds["arp"] = eth(0x0806) + arp + b"\0" * 18
    for name, frame in sorted(seeds.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(frame)
    print(f"wrote {len(seeds)} seeds to {OUT}")


if __name__ == "__main__":
    main()
