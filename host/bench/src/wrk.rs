//! `wrk` (Debian package `wrk`): the load generator of the API benches, run as a second
//! process on loopback, and the figures read from its report.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::Context;
use uuid::Uuid;

/// Writes a `wrk` script, `<name>.lua` in `dir`, sending heartbeats to random nodes of
/// `nodes` (each with its agent token), as the API's version allows; returns its path. The
/// nodes go in a file of their own (`<name>.nodes`) that the script reads when it starts:
/// a Lua function holds at most 65,536 constants, fewer than the nodes of a large fleet.
pub fn heartbeats<'a>(
    dir: &Path,
    name: &str,
    nodes: impl IntoIterator<Item = (Uuid, &'a str)>,
) -> anyhow::Result<std::path::PathBuf> {
    let list = dir.join(format!("{name}.nodes"));
    let mut text = String::new();
    for (uuid, token) in nodes {
        let _ = writeln!(text, "{uuid} {token}");
    }
    std::fs::write(&list, text)?;
    let script = dir.join(format!("{name}.lua"));
    let lua = r#"nodes = {}
for line in io.lines("@LIST@") do
  local uuid, token = line:match("(%S+) (%S+)")
  nodes[#nodes + 1] = {uuid, token}
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-OpenStack-Ironic-API-Version"] = "@VERSION@"
-- Each run its own sequence: unseeded, every wrk process would pick the same nodes in
-- the same order, and runs against several engines would send each node's heartbeats
-- to all of them at once.
init = function(args)
  math.randomseed(tonumber(args[1]) or 0)
end
request = function()
  local n = nodes[math.random(#nodes)]
  local body = '{"callback_url": "http://127.0.0.1:9", "agent_version": "13.0.0", "agent_token": "' .. n[2] .. '"}'
  return wrk.format(nil, "/v1/heartbeat/" .. n[1], nil, body)
end
"#
    .replace("@LIST@", &list.display().to_string())
    .replace("@VERSION@", &deployd_wire::version::MAX.to_string());
    std::fs::write(&script, lua)?;
    Ok(script)
}

/// One `wrk` run under way.
pub struct Load(Child);

/// What a `wrk` run reported.
pub struct Report {
    pub text: String,
}

impl Load {
    /// Starts `wrk` with `script` against `url`: one thread, `connections` connections,
    /// for `seconds`; the script's random choices seeded by the clock (each run its own).
    pub fn start(script: &Path, url: &str, connections: u32, seconds: u64) -> anyhow::Result<Load> {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() ^ d.as_secs() as u32)
            % 1_000_000_007;
        let child = Command::new("wrk")
            .args([
                "-t1",
                &format!("-c{}", connections.max(1)),
                &format!("-d{seconds}s"),
                "--latency",
                "-s",
            ])
            .arg(script)
            .arg(url)
            .args(["--", &seed.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running wrk (apt-get install wrk)")?;
        Ok(Load(child))
    }

    /// Waits for the run's report; one whose script failed (wrk then sends its default
    /// request, and its figures measure something else) is an error.
    pub fn report(self) -> anyhow::Result<Report> {
        let out = self.0.wait_with_output()?;
        let complaint = String::from_utf8_lossy(&out.stderr);
        anyhow::ensure!(complaint.trim().is_empty(), "wrk: {}", complaint.trim());
        Ok(Report {
            text: String::from_utf8_lossy(&out.stdout).into_owned(),
        })
    }
}

impl Report {
    /// The report's line that starts with `prefix`, trimmed ("" if none).
    pub fn line(&self, prefix: &str) -> String {
        self.text
            .lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or("")
            .trim()
            .to_owned()
    }

    /// Requests answered in all.
    pub fn requests(&self) -> f64 {
        self.text
            .lines()
            .find(|l| l.contains("requests in"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0)
    }

    /// Requests a second.
    pub fn rate(&self) -> f64 {
        self.line("Requests/sec:")
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0)
    }

    /// Answers that were not 2xx or 3xx.
    pub fn refused(&self) -> u64 {
        self.line("Non-2xx or 3xx responses:")
            .split_whitespace()
            .last()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// A latency percentile in milliseconds ("99%" → 6.3 for "6.30ms"); NaN if absent.
    pub fn latency_ms(&self, percentile: &str) -> f64 {
        let text = self.latency(percentile);
        let split = text
            .find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let scale = match unit {
            "us" => 1e-3,
            "ms" => 1.0,
            "s" => 1e3,
            "m" => 60e3,
            _ => f64::NAN,
        };
        number.parse::<f64>().map_or(f64::NAN, |n| n * scale)
    }

    /// A latency percentile's line value ("50%" → "1.23ms").
    pub fn latency(&self, percentile: &str) -> String {
        self.line(percentile)
            .split_whitespace()
            .nth(1)
            .unwrap_or("?")
            .to_owned()
    }
}
