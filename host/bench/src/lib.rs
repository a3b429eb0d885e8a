//! `deployd bench`: the measurements quoted in the README and the issue notes.
//! Figures are medians and p99s of many samples, printed with the command that made them.

pub mod agent;
pub mod api;
pub mod boot;
pub mod cluster;
pub mod compare;
pub mod core;
pub mod dashboard;
pub mod fleet;
pub mod flood;
pub mod plugins;
pub mod ports;
pub mod shared_store;
pub mod wrk;

pub use self::agent::{AgentBench, run_agent};
pub use self::api::{ApiBench, run_api};
pub use self::boot::{BootBench, run_boot};
pub use self::cluster::{ClusterBench, run_cluster};
pub use self::compare::{CompareBench, run_compare};
pub use self::core::{CoreBench, run_core};
pub use self::dashboard::{DashboardBench, run_dashboard};
pub use self::fleet::{FleetBench, run_fleet};
pub use self::flood::{FloodBench, run_flood};
pub use self::plugins::{PluginBench, run_plugins};
pub use self::ports::{PortsBench, run_ports};
pub use self::shared_store::{SharedStoreBench, run_shared_store};

use std::time::Duration;

use tokio::time::Instant;

/// The runtime every bench runs on: two workers, as the engine has on this 2-core machine.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

pub fn sample(n: usize, mut f: impl FnMut()) -> Vec<Duration> {
    let mut out: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    out.sort();
    out
}

/// `n` samples of an async call that may fail, sorted.
pub async fn sample_async<T, E, F: Future<Output = Result<T, E>>>(
    n: usize,
    mut f: impl FnMut() -> F,
) -> Result<Vec<Duration>, E> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f().await?;
        out.push(t.elapsed());
    }
    out.sort();
    Ok(out)
}

pub fn median(sorted: &[Duration]) -> Duration {
    sorted[sorted.len() / 2]
}

pub fn report(what: &str, sorted: &[Duration]) {
    let p99 = sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)];
    println!(
        "{what}: median {:.2} µs, p99 {:.2} µs ({} samples)",
        median(sorted).as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6,
        sorted.len()
    );
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

pub fn rss_bytes() -> u64 {
    rss_of("self")
}

/// The resident set of a process (`/proc/<pid>/status`), 0 if unknown.
pub fn rss_of(pid: impl std::fmt::Display) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// This process's threads (`/proc/self/status`), 0 if unknown.
pub fn threads() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The peak resident set of this process so far (`VmHWM`), 0 if unknown.
pub fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Where this process's resident memory is: the `n` mappings holding the most
/// (`/proc/self/smaps`), each as its resident and mapped size and its name (a file, a
/// `[stack]`, or anonymous: the allocator's segments, wasmtime's instance pool).
pub fn resident_mappings(n: usize) -> String {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut maps: Vec<(u64, u64, String)> = Vec::new();
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            let mut fields = line.split_whitespace();
            let range = fields.next().unwrap_or("");
            let name = fields.nth(4).unwrap_or("[anonymous]").to_owned();
            let size = range
                .split_once('-')
                .and_then(|(a, b)| {
                    Some(u64::from_str_radix(b, 16).ok()? - u64::from_str_radix(a, 16).ok()?)
                })
                .unwrap_or(0);
            maps.push((0, size, name));
        } else if let (Some(rss), Some(last)) = (line.strip_prefix("Rss:"), maps.last_mut()) {
            last.0 = rss
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap_or(0)
                * 1024;
        }
    }
    maps.sort_by_key(|m| std::cmp::Reverse(m.0));
    let total: u64 = maps.iter().map(|m| m.0).sum();
    let mut out = format!(
        "{:.1} MiB resident in {} mappings; the largest:",
        mib(total),
        maps.len()
    );
    for (rss, size, name) in maps.iter().take(n) {
        out += &format!(
            "\n  {:8.1} MiB of {:10.1} MiB  {name}",
            mib(*rss),
            mib(*size)
        );
    }
    out
}

pub fn dir_size(path: &std::path::Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// CPU time (user + system) a process has used, in seconds, from `/proc/<pid>/stat`
/// (clock ticks of USER_HZ, 100 a second on Linux).
pub fn cpu_seconds_of(pid: impl std::fmt::Display) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces:
    // state is field 3, utime 14 and stime 15.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum();
    ticks as f64 / 100.0
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`), printed beside a figure so a
/// run on a busy machine can be told apart.
pub fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
