//! Records which source the benchmark binary was built from (the commit, and whether the tracked
//! sources — crates/, Cargo.toml, Cargo.lock — differed from it), so every result file can say what
//! code produced it.
use std::path::Path;
use std::process::Command;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // Only what the binary is built from counts (stored results and docs change with every run).
    let state = match git(&[
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        "crates",
        "Cargo.toml",
        "Cargo.lock",
    ]) {
        Some(s) if s.is_empty() => "clean",
        Some(_) => "modified",
        None => "unknown",
    };
    println!("cargo:rustc-env=FP_BENCH_COMMIT={commit}");
    println!("cargo:rustc-env=FP_BENCH_TREE={state}");
    // Run again when HEAD moves, the index changes or any source file does.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{r}");
        }
    }
    for p in ["crates", "Cargo.lock", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    // `--features dpdk`: link DPDK's hash library and its EAL (their own dependencies come with
    // the shared libraries), from where pkg-config says DPDK is.
    if std::env::var_os("CARGO_FEATURE_DPDK").is_some() {
        let out = Command::new("pkg-config")
            .args(["--libs", "libdpdk"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .expect("feature dpdk: `pkg-config --libs libdpdk` failed (install libdpdk-dev)");
        for arg in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Some(dir) = arg.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={dir}");
            }
        }
        for lib in ["rte_hash", "rte_eal"] {
            println!("cargo:rustc-link-lib={lib}");
        }
    }
}
