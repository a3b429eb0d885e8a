//! The demo's live view: one progress line per node (state, bytes written, heartbeat
//! age), redrawn in place on a terminal and printed every few seconds otherwise; then
//! the summary table with the disks checked against the image.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use deployd_wire::agent::Progress;
use deployd_wire::documents::Node;
use tokio::time::Instant;

use deployd_lab::Enrollment;

pub struct Row {
    pub machine: Enrollment,
    pub driver: &'static str,
    pub uuid: String,
    pub state: String,
    written: u64,
    heartbeat_age: Option<f64>,
    last_error: Option<String>,
    settled_after: Option<Duration>,
}

impl Row {
    pub fn new(machine: Enrollment, driver: &'static str, uuid: String) -> Row {
        Row {
            machine,
            driver,
            uuid,
            state: "available".into(),
            written: 0,
            heartbeat_age: None,
            last_error: None,
            settled_after: None,
        }
    }

    fn settled(&self) -> bool {
        matches!(self.state.as_str(), "active" | "deploy failed" | "error")
    }
}

pub struct Screen {
    pub rows: Vec<Row>,
    total: u64,
    started: Instant,
    notes: Vec<String>,
    terminal: bool,
    drawn_lines: usize,
    last_plain: Option<Instant>,
}

impl Screen {
    pub fn new(rows: Vec<Row>, total: u64, started: Instant) -> Screen {
        Screen {
            rows,
            total,
            started,
            notes: vec![],
            terminal: std::io::stdout().is_terminal(),
            drawn_lines: 0,
            last_plain: None,
        }
    }

    pub fn update(&mut self, nodes: &[Node]) {
        let now = chrono::Utc::now();
        for node in nodes {
            let Some(row) = self.rows.iter_mut().find(|r| node.uuid == r.uuid) else {
                continue;
            };
            row.state = node.provision_state.map_or("?", |s| s.as_str()).to_owned();
            row.last_error = node.last_error.clone();
            let internal = &node.driver_internal_info;
            if let Some(n) = internal
                .get("agent_status_message")
                .and_then(|m| m.as_str())
                .and_then(|m| m.parse::<Progress>().ok())
                .map(|p| p.written)
            {
                row.written = row.written.max(n);
            }
            row.heartbeat_age = internal
                .get("agent_last_heartbeat")
                .and_then(|t| t.as_str())
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| (now - t.with_timezone(&chrono::Utc)).num_milliseconds() as f64 / 1000.0);
            if row.state == "active" {
                row.written = self.total;
            }
            if row.settled() && row.settled_after.is_none() {
                row.settled_after = Some(self.started.elapsed());
            }
        }
    }

    pub fn fraction(&self, row: usize) -> f64 {
        self.rows[row].written as f64 / self.total.max(1) as f64
    }

    /// Seconds since the row's node was last heard from, as the engine last showed it.
    pub fn heartbeat_age(&self, row: usize) -> Option<f64> {
        self.rows[row].heartbeat_age
    }

    pub fn note(&mut self, note: String) {
        self.notes.push(format!(
            "[{:5.1}s] {note}",
            self.started.elapsed().as_secs_f64()
        ));
    }

    pub fn all_settled(&self) -> bool {
        self.rows.iter().all(Row::settled)
    }

    fn line(&self, i: usize) -> String {
        let row = &self.rows[i];
        let fraction = self.fraction(i);
        let filled = (fraction * 24.0).round() as usize;
        let bar = format!("{}{}", "#".repeat(filled), "-".repeat(24 - filled.min(24)));
        let heartbeat = match (row.settled(), row.heartbeat_age) {
            (false, Some(age)) => format!("heartbeat {age:4.1}s ago"),
            _ => String::new(),
        };
        format!(
            "{:12} {:13} {:15} [{bar}] {:3.0}% {:5}/{} MiB  {heartbeat}",
            row.machine.name,
            row.driver,
            row.state,
            fraction * 100.0,
            row.written >> 20,
            self.total >> 20,
        )
    }

    pub fn draw(&mut self) {
        let mut out = std::io::stdout().lock();
        if self.terminal {
            if self.drawn_lines > 0 {
                let _ = write!(out, "\x1b[{}A", self.drawn_lines);
            }
            let mut lines: Vec<String> = (0..self.rows.len()).map(|i| self.line(i)).collect();
            lines.extend(self.notes.iter().cloned());
            for line in &lines {
                let _ = writeln!(out, "\x1b[2K{line}");
            }
            self.drawn_lines = lines.len();
        } else if self
            .last_plain
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(2))
        {
            self.last_plain = Some(Instant::now());
            let _ = writeln!(out, "[{:5.1}s]", self.started.elapsed().as_secs_f64());
            for i in 0..self.rows.len() {
                let _ = writeln!(out, "  {}", self.line(i));
            }
            for note in self.notes.drain(..) {
                let _ = writeln!(out, "  {note}");
            }
        }
        let _ = out.flush();
    }

    /// Checks every disk and prints the summary; true when the story came out as told:
    /// the victim failed by timeout with its disk not the image, every other node is
    /// active with the image on its disk.
    pub fn summary(
        &mut self,
        sha256: &str,
        victim: Option<usize>,
        timeout: u64,
    ) -> anyhow::Result<bool> {
        self.draw();
        println!(
            "\n{:12} {:13} {:14} {:>8} {:14} last_error",
            "machine", "driver", "state", "after", "disk"
        );
        let mut ok = true;
        for (i, row) in self.rows.iter().enumerate() {
            let disk = deployd_lab::disk_head_sha256(&row.machine.disk, self.total)?;
            let matches = disk == sha256;
            let expected = if Some(i) == victim {
                row.state == "deploy failed"
                    && row
                        .last_error
                        .as_deref()
                        .is_some_and(|e| e.contains("Timeout"))
                    && !matches
            } else {
                row.state == "active" && matches
            };
            ok &= expected;
            println!(
                "{:12} {:13} {:14} {:>7.1}s {:14} {}{}",
                row.machine.name,
                row.driver,
                row.state,
                row.settled_after.unwrap_or_default().as_secs_f64(),
                if matches { "= image" } else { "≠ image" },
                row.last_error.as_deref().unwrap_or("-"),
                if expected { "" } else { "   <-- unexpected" },
            );
        }
        let longest = self
            .rows
            .iter()
            .filter(|r| r.state == "active")
            .filter_map(|r| r.settled_after)
            .max()
            .unwrap_or_default();
        println!(
            "\nactive nodes deployed in up to {:.1} s, {:.1}× deploy_callback_timeout ({timeout} s): their heartbeats kept them alive.",
            longest.as_secs_f64(),
            longest.as_secs_f64() / timeout as f64
        );
        if victim.is_some() {
            println!(
                "the node whose agent was killed timed out, and its disk is not reported as deployed."
            );
        }
        println!(
            "{}",
            if ok {
                "the demo ended as expected."
            } else {
                "UNEXPECTED outcome: see the marked rows."
            }
        );
        Ok(ok)
    }
}
