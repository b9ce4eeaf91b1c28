//! What a result needs to be trusted: the memory every competitor runs on, and where the result
//! came from.
//!
//! * **Equal pages for peers.** flowplane's tables map their memory themselves, on huge pages
//!   where the system has them (`fp-mem`: explicit 2 MiB pages, else transparent huge pages). The
//!   peers (hashbrown, dashmap, sux, std maps) allocate from the heap, which glibc backs with
//!   4 KiB pages unless told otherwise — and on this kind of machine the page size alone moves
//!   random-access throughput by 1.5-2x. So the benchmark binary's global allocator
//!   ([`crate::heap`]) puts every large allocation on its own mapping advised for transparent
//!   huge pages. Transparent huge
//!   pages are only granted where free memory is not fragmented, so the benchmarks compact memory
//!   before building each table ([`compact_memory`]) and measure the pages each table really got
//!   ([`measure_pages`]: `2M`, `4K` or a share), which records carry as `pages` (ours) and
//!   `peer_pages`. `FLOWPLANE_BENCH_HEAP=4k` keeps the plain heap, to measure the difference.
//! * **Provenance.** [`provenance`] is the first line of every `--json` file: the commit the binary
//!   was built from (and whether tracked files differed), the command line, the date and the
//!   machine (CPU model, cores, memory, kernel, transparent-huge-page setting, reserved huge
//!   pages). scripts/results.py builds the README's tables from these files.

use serde_json::{json, Value};
use std::io::Read;
use std::sync::OnceLock;

const HEAP_ENV: &str = "FLOWPLANE_BENCH_HEAP";

/// Apply `FLOWPLANE_BENCH_HEAP=4k` (the plain heap for the peers, to measure what huge pages are
/// worth); call before anything large is allocated.
pub fn configure_heap() {
    if std::env::var(HEAP_ENV).is_ok_and(|v| v == "4k") {
        crate::heap::set_plain();
    }
}

/// A field of `/proc/self/smaps_rollup`, in bytes.
fn rollup(field: &str) -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/smaps_rollup") else {
        return 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|r| r.trim_start_matches(':').split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Bytes of this process on 2 MiB pages: transparent (`AnonHugePages`) and explicit
/// (`Private_Hugetlb`).
pub fn anon_huge_bytes() -> u64 {
    rollup("AnonHugePages") + rollup("Private_Hugetlb")
}

/// Ask the kernel to compact free memory (root only; otherwise nothing happens). Transparent huge
/// pages are granted at fault time only where 2 MiB of contiguous free memory exists; on a machine
/// that has been running builds, free memory is fragmented and a large allocation may get 4 KiB
/// pages for most of it, whoever makes it. Compacting before each table is built gives every
/// competitor the same chance, and [`measure_pages`] records what each really got.
pub fn compact_memory() {
    // Clean page cache first (it can be re-read), so compaction has room to move pages to.
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "1");
    let _ = std::fs::write("/proc/sys/vm/compact_memory", "1");
}

/// Build something large and report the pages it got: (the value, a label: `"2M"` when at least
/// 90 % of the memory it touched is on 2 MiB pages, `"4K"` when at most 10 %, else
/// `"2M for N %"`). Compacts memory first.
pub fn measure_pages<T>(build: impl FnOnce() -> T) -> (T, String) {
    measure(build, |_| None)
}

/// [`measure_pages`] for a structure that knows its own size: the share on 2 MiB pages is the
/// growth of huge-page memory over `bytes(&value)` rather than over the process's whole growth,
/// so the build's temporaries (freed, but kept by the system allocator) do not dilute it. For
/// small structures and static functions whose builders allocate much more than they keep.
pub fn measure_pages_of<T>(
    build: impl FnOnce() -> T,
    bytes: impl FnOnce(&T) -> usize,
) -> (T, String) {
    measure(build, |v| Some(bytes(v)))
}

fn measure<T>(build: impl FnOnce() -> T, bytes: impl FnOnce(&T) -> Option<usize>) -> (T, String) {
    compact_memory();
    let (rss0, huge0) = (rollup("Rss"), anon_huge_bytes());
    let mut v = build();
    std::hint::black_box(&mut v);
    let (rss1, huge1) = (rollup("Rss"), anon_huge_bytes());
    let size = bytes(&v).map_or_else(|| rss1.saturating_sub(rss0), |b| b as u64);
    let share = huge1.saturating_sub(huge0) as f64 / size.max(1) as f64;
    let label = if share >= 0.9 {
        "2M".to_string()
    } else if share <= 0.1 {
        "4K".to_string()
    } else {
        format!("2M for {:.0} %", share * 100.0)
    };
    (v, label)
}

/// The pages the heap gives a large allocation, measured once: 64 MiB are allocated and written,
/// and the growth of `AnonHugePages` says how much of it is on transparent huge pages. `"thp"` when
/// most of it is, else `"4k"`.
pub fn heap_pages() -> &'static str {
    static PAGES: OnceLock<&'static str> = OnceLock::new();
    PAGES.get_or_init(|| {
        compact_memory();
        let before = anon_huge_bytes();
        let len = 64 << 20;
        let mut v = vec![0u8; len];
        for i in (0..len).step_by(4096) {
            v[i] = 1;
        }
        // The writes must have happened before the second reading (no sinking past it).
        std::hint::black_box(&mut v);
        let after = anon_huge_bytes();
        if after.saturating_sub(before) >= len as u64 / 2 {
            "thp"
        } else if !crate::heap::huge() {
            "4k (FLOWPLANE_BENCH_HEAP=4k)"
        } else {
            "4k (no 2 MiB pages free at start)"
        }
    })
}

fn read(path: &str) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

/// The bracketed choice of a sysfs setting such as `always [madvise] never`.
fn chosen(setting: &str) -> String {
    setting
        .split_whitespace()
        .find(|w| w.starts_with('['))
        .map_or_else(
            || setting.trim().to_string(),
            |w| w.trim_matches(['[', ']']).to_string(),
        )
}

/// The machine, as a results file records it.
pub fn machine() -> Value {
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|r| r.trim_start_matches([' ', '\t', ':']).trim().to_string())
        .unwrap_or_default();
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| (kb / 1024.0 / 1024.0 * 10.0).round() / 10.0);
    json!({
        "cpu": cpu,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "memory_gib": mem_gib,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "thp": chosen(&read("/sys/kernel/mm/transparent_hugepage/enabled")),
        "hugepages_2m_reserved": read("/proc/sys/vm/nr_hugepages").trim().parse::<u64>().unwrap_or(0),
        "heap_pages": heap_pages(),
    })
}

/// UTC now as `YYYY-MM-DDTHH:MM:SSZ` (civil date from the Unix day count).
pub fn utc_now() -> String {
    civil(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()) as i64,
    )
}

fn civil(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The provenance line of a results file.
pub fn provenance(bench: &str) -> Value {
    let args: Vec<String> = std::env::args().skip(1).collect();
    json!({
        "bench": bench,
        "provenance": {
            "commit": env!("FP_BENCH_COMMIT"),
            "tree": env!("FP_BENCH_TREE"),
            "command": format!("flowplane-bench {}", args.join(" ")),
            "date": utc_now(),
            "machine": machine(),
        }
    })
}

/// CPU time as this kernel can measure it exactly. The user/system/irq columns of `/proc/stat`
/// and `/proc/PID/stat` are tick samples (no `VIRT_CPU_ACCOUNTING`): at a paced load, where a
/// core works in short bursts between sleeps, they miss or double-count whole ticks (measured
/// here: a sender paced to 300 kpps showed 100 ms of busy ticks in a window where the cores were
/// out of idle for 1.28 s). Idle time (tickless idle) and each task's run time (`schedstat`) are
/// clock readings, so these use only those.
pub mod cpu {
    use anyhow::{Context, Result};
    use std::time::Instant;

    /// A reading of the machine's idle time.
    #[derive(Clone, Copy, Debug)]
    pub struct Machine {
        at: Instant,
        idle_ns: u64,
        cpus: u64,
    }

    impl Machine {
        /// Read now.
        pub fn now() -> Result<Machine> {
            let text = std::fs::read_to_string("/proc/stat")?;
            let line = text.lines().next().context("/proc/stat is empty")?;
            let v: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            let cpus = text
                .lines()
                .filter(|l| {
                    l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit)
                })
                .count()
                .max(1) as u64;
            // USER_HZ: 100 per second on every architecture user space sees.
            Ok(Machine {
                at: Instant::now(),
                idle_ns: idle * 10_000_000,
                cpus,
            })
        }

        /// Busy time of all CPUs (neither idle nor waiting for I/O) from `self` to `later`, ns:
        /// the CPUs' wall time minus their idle time.
        pub fn busy_until(&self, later: &Machine) -> u64 {
            let wall = later.at.duration_since(self.at).as_nanos() as u64 * self.cpus;
            wall.saturating_sub(later.idle_ns.saturating_sub(self.idle_ns))
        }
    }

    /// Run time of every thread of process `pid` (`"self"` for this one) so far, ns, from each
    /// thread's `schedstat`; 0 if the process is gone.
    pub fn process_run_ns(pid: &str) -> u64 {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return 0;
        };
        dir.flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
            .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }
}

/// Record the calling thread's id in `slot` once (from a stage's `maintain`, so that the
/// benchmark can read that thread's CPU time with [`thread_cpu_ns`]).
pub fn note_thread_id(slot: &std::sync::atomic::AtomicI32) {
    use std::sync::atomic::Ordering;
    if slot.load(Ordering::Relaxed) == 0 {
        // "/proc/thread-self" links to "PID/task/TID".
        let tid = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|l| l.file_name()?.to_str()?.parse::<i32>().ok())
            .unwrap_or(-1);
        slot.store(tid, Ordering::Relaxed);
    }
}

/// A thread of this process's run time so far (`/proc/self/task/TID/schedstat`, ns; the
/// scheduler updates it at least every tick).
pub fn thread_cpu_ns(tid: i32) -> anyhow::Result<u64> {
    use anyhow::Context;
    let t = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))?;
    t.split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .context("unreadable schedstat")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), "1970-01-01T00:00:00Z");
        assert_eq!(civil(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(civil(1_790_000_000), "2026-09-21T14:13:20Z");
        assert_eq!(utc_now().len(), 20);
        assert_eq!(chosen("always [madvise] never"), "madvise");
        assert_eq!(chosen("2"), "2");
    }
}
