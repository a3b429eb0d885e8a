//! The demo's live view: one progress bar per node (state, bytes written, heartbeat
//! age), drawn by indicatif on a terminal, and a progress line per node printed every few
//! seconds otherwise (a log, not a drawing); then the summary table with the disks checked
//! against the image.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

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
    /// On a terminal: a bar per row, drawn in place.
    bars: Option<Bars>,
    /// Otherwise: notes printed with the next progress lines, every few seconds.
    notes: Vec<String>,
    last_plain: Option<Instant>,
}

struct Bars {
    multi: MultiProgress,
    bars: Vec<ProgressBar>,
}

impl Bars {
    fn new(rows: usize, total: u64) -> Bars {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let style = ProgressStyle::with_template(
            "{prefix} [{bar:24}] {percent:>3}% {binary_bytes:>10}/{binary_total_bytes}  {msg}",
        )
        .expect("the template parses")
        .progress_chars("#>-");
        let bars = (0..rows)
            .map(|_| multi.add(ProgressBar::new(total).with_style(style.clone())))
            .collect();
        Bars { multi, bars }
    }
}

impl Screen {
    pub fn new(rows: Vec<Row>, total: u64, started: Instant) -> Screen {
        let bars = std::io::stdout()
            .is_terminal()
            .then(|| Bars::new(rows.len(), total));
        Screen {
            rows,
            total,
            started,
            bars,
            notes: vec![],
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
        let note = format!("[{:5.1}s] {note}", self.started.elapsed().as_secs_f64());
        match &self.bars {
            Some(b) => {
                let _ = b.multi.println(note);
            }
            None => self.notes.push(note),
        }
    }

    pub fn all_settled(&self) -> bool {
        self.rows.iter().all(Row::settled)
    }

    /// The row's machine, driver and state, in columns.
    fn label(row: &Row) -> String {
        format!("{:12} {:13} {:15}", row.machine.name, row.driver, row.state)
    }

    fn heartbeat(row: &Row) -> String {
        match (row.settled(), row.heartbeat_age) {
            (false, Some(age)) => format!("heartbeat {age:4.1}s ago"),
            _ => String::new(),
        }
    }

    pub fn draw(&mut self) {
        if let Some(b) = &self.bars {
            for (row, bar) in self.rows.iter().zip(&b.bars) {
                bar.set_prefix(Self::label(row));
                bar.set_position(row.written);
                bar.set_message(Self::heartbeat(row));
                match row.state.as_str() {
                    "active" if !bar.is_finished() => bar.finish(),
                    "deploy failed" | "error" if !bar.is_finished() => bar.abandon(),
                    _ => {}
                }
            }
            return;
        }
        if self
            .last_plain
            .is_some_and(|t| t.elapsed() < Duration::from_secs(2))
        {
            return;
        }
        self.last_plain = Some(Instant::now());
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "[{:5.1}s]", self.started.elapsed().as_secs_f64());
        for (i, row) in self.rows.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {} {:3.0}% {:5}/{} MiB  {}",
                Self::label(row),
                self.fraction(i) * 100.0,
                row.written >> 20,
                self.total >> 20,
                Self::heartbeat(row),
            );
        }
        for note in self.notes.drain(..) {
            let _ = writeln!(out, "  {note}");
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
        // The last lines, and any note not printed yet, whenever the last ones were.
        self.last_plain = None;
        self.draw();
        // The bars stay as they ended; what follows is printed below them.
        if let Some(b) = self.bars.take() {
            for bar in &b.bars {
                bar.abandon();
            }
        }
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
