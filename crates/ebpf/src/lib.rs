//! (being written: eBPF assembler, loader, XDP and tc programs)
