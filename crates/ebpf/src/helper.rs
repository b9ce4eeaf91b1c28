//! Helper function numbers (`enum bpf_func_id` in `include/uapi/linux/bpf.h`) and kernel constants
//! the programs use. The numbers are kernel ABI: they never change.

/// `void *bpf_map_lookup_elem(map, key)`
pub const MAP_LOOKUP_ELEM: i32 = 1;
/// `long bpf_map_update_elem(map, key, value, flags)`
pub const MAP_UPDATE_ELEM: i32 = 2;
/// `long bpf_map_delete_elem(map, key)`
pub const MAP_DELETE_ELEM: i32 = 3;
/// `u64 bpf_ktime_get_ns(void)`: `CLOCK_MONOTONIC` in ns (the clock user space reads with
/// `clock_gettime(CLOCK_MONOTONIC)`).
pub const KTIME_GET_NS: i32 = 5;
/// `long bpf_skb_store_bytes(skb, offset, from, len, flags)`
pub const SKB_STORE_BYTES: i32 = 9;
/// `bpf_l3_csum_replace(skb, offset, from, to, size)`: update the 16-bit checksum at `offset`
/// for a 2- or 4-byte field changing from `from` to `to` (as stored in the packet).
pub const L3_CSUM_REPLACE: i32 = 10;
/// `long bpf_skb_load_bytes(skb, offset, to, len)`
pub const SKB_LOAD_BYTES: i32 = 26;
/// `long bpf_skb_change_proto(skb, proto, flags)`
pub const SKB_CHANGE_PROTO: i32 = 31;
/// `long bpf_skb_pull_data(skb, len)`
pub const SKB_PULL_DATA: i32 = 39;
/// `long bpf_xdp_adjust_head(xdp_md, delta)`
pub const XDP_ADJUST_HEAD: i32 = 44;
/// `long bpf_skb_adjust_room(skb, len_diff, mode, flags)`
pub const SKB_ADJUST_ROOM: i32 = 50;
/// `long bpf_redirect_map(map, key, flags)`
pub const REDIRECT_MAP: i32 = 51;
/// `bpf_sk_lookup_tcp(ctx, tuple, tuple_size, netns, flags)`: a full TCP socket or NULL (to be
/// released with [`SK_RELEASE`]).
pub const SK_LOOKUP_TCP: i32 = 84;
/// `bpf_sk_lookup_udp(ctx, tuple, tuple_size, netns, flags)`: a UDP socket or NULL.
pub const SK_LOOKUP_UDP: i32 = 85;
/// `bpf_sk_release(sock)`.
pub const SK_RELEASE: i32 = 86;
/// `bpf_skc_lookup_tcp(ctx, tuple, tuple_size, netns, flags)`: like [`SK_LOOKUP_TCP`] but also
/// finds request (SYN_RECV) and time-wait sockets, as a `sock_common`.
pub const SKC_LOOKUP_TCP: i32 = 99;
/// `bpf_redirect_neigh(ifindex, params, plen, flags)`: send the skb out of `ifindex` to the next
/// hop of its IP destination, the Ethernet header filled from the neighbour table (tc only).
pub const REDIRECT_NEIGH: i32 = 152;
/// `long bpf_xdp_adjust_meta(xdp_md, delta)`: grow (negative delta) or shrink the metadata area
/// in front of the frame.
pub const XDP_ADJUST_META: i32 = 54;

/// The helper's name, for disassembly.
pub fn name(id: i32) -> String {
    match id {
        MAP_LOOKUP_ELEM => "bpf_map_lookup_elem".into(),
        MAP_UPDATE_ELEM => "bpf_map_update_elem".into(),
        MAP_DELETE_ELEM => "bpf_map_delete_elem".into(),
        KTIME_GET_NS => "bpf_ktime_get_ns".into(),
        SKB_STORE_BYTES => "bpf_skb_store_bytes".into(),
        SKB_LOAD_BYTES => "bpf_skb_load_bytes".into(),
        SKB_CHANGE_PROTO => "bpf_skb_change_proto".into(),
        SKB_PULL_DATA => "bpf_skb_pull_data".into(),
        XDP_ADJUST_HEAD => "bpf_xdp_adjust_head".into(),
        SKB_ADJUST_ROOM => "bpf_skb_adjust_room".into(),
        REDIRECT_MAP => "bpf_redirect_map".into(),
        XDP_ADJUST_META => "bpf_xdp_adjust_meta".into(),
        n => format!("helper#{n}"),
    }
}

/// XDP return codes.
pub mod xdp {
    /// Drop the frame.
    pub const ABORTED: i32 = 0;
    /// Drop the frame.
    pub const DROP: i32 = 1;
    /// Hand the frame to the kernel stack.
    pub const PASS: i32 = 2;
    /// Send the frame back out of the interface it came in on.
    pub const TX: i32 = 3;
    /// Redirect (to an AF_XDP socket, another device, a CPU).
    pub const REDIRECT: i32 = 4;
}

/// tc (cls_bpf direct-action) return codes.
pub mod tc {
    /// Continue processing (deliver the packet).
    pub const OK: i32 = 0;
    /// Drop the packet.
    pub const SHOT: i32 = 2;
    /// The packet was redirected (what a successful redirect helper returns).
    pub const REDIRECT: i32 = 7;
}

/// tcx return codes (programs attached with a `BPF_TCX_INGRESS` / `BPF_TCX_EGRESS` link). They
/// equal the tc codes a direct-action `cls_bpf` filter returns: `NEXT` is `TC_ACT_UNSPEC` (run the
/// next filter), `PASS` is `TC_ACT_OK`, `DROP` is `TC_ACT_SHOT`, so one program serves both
/// attachments.
pub mod tcx {
    /// Run the next program or filter; with none left, the packet continues.
    pub const NEXT: i32 = -1;
    /// Deliver the packet now (skip later programs and filters).
    pub const PASS: i32 = 0;
    /// Drop the packet.
    pub const DROP: i32 = 2;
}

/// `bpf_skb_adjust_room` modes and flags.
pub mod adjust_room {
    /// Adjust room at the network layer (after the IP header).
    pub const MODE_NET: i32 = 0;
    /// Adjust room at the MAC layer (right after the Ethernet header).
    pub const MODE_MAC: i32 = 1;
    /// Do not change the GSO size of GSO packets.
    pub const F_FIXED_GSO: i32 = 1 << 0;
    /// After shrinking, the outermost L3 header is IPv4: set `skb->protocol` (Linux ≥ 6.3).
    pub const F_DECAP_L3_IPV4: i32 = 1 << 7;
    /// After shrinking, the outermost L3 header is IPv6: set `skb->protocol` (Linux ≥ 6.3).
    pub const F_DECAP_L3_IPV6: i32 = 1 << 8;
}
