//! Print flowplane's eBPF programs in the verifier's syntax (map descriptors shown as placeholders
//! 3, 4, 5). Needs no privileges: `cargo run -p fp-ebpf --example dump_programs`.

fn main() {
    println!(
        "== fp_xsk_redirect (XDP; map_fd(3) = VIPs, map_fd(4) = XSKMAP, map_fd(5) = stats) =="
    );
    print!(
        "{}",
        fp_ebpf::asm::disassemble(&fp_ebpf::xsk::program(3, 4, 5).expect("assembles"))
    );
    println!("\n== fp_tc_decap (tc cls_bpf direct-action; map_fd(3) = stats) ==");
    print!(
        "{}",
        fp_ebpf::asm::disassemble(
            &fp_ebpf::decap::program(fp_ebpf::decap::DecapConfig::ALL, 3).expect("assembles")
        )
    );
    println!("\n== fp_vip_shield (tcx / tc cls_bpf direct-action; map_fd(3) = destinations, map_fd(4) = stats) ==");
    print!(
        "{}",
        fp_ebpf::asm::disassemble(&fp_ebpf::shield::program(3, 4).expect("assembles"))
    );
}
