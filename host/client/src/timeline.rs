//! A node's timeline, as `deployd node show` and the demo's summary print it: its history
//! events (state changes and milestones), each with the time since the one before.

use deployd_wire::documents::HistoryEvent;

fn at(event: &HistoryEvent) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(&event.created_at)
        .ok()
        .map(|t| t.to_utc())
}

/// One line per event: its time, the time since the previous event, the state the node
/// was in after it, and what happened.
pub fn lines(events: &[HistoryEvent]) -> Vec<String> {
    let mut previous: Option<chrono::DateTime<chrono::Utc>> = None;
    events
        .iter()
        .map(|e| {
            let now = at(e);
            let step = match (previous, now) {
                (Some(p), Some(n)) => {
                    format!("+{:.1}s", (n - p).num_milliseconds() as f64 / 1000.0)
                }
                _ => String::new(),
            };
            previous = now.or(previous);
            let time = now.map_or_else(
                || e.created_at.clone(),
                |t| t.format("%H:%M:%S%.3f").to_string(),
            );
            format!(
                "{time} {step:>8}  {:<16} {}{}",
                e.state.as_deref().unwrap_or("-"),
                if e.severity == "ERROR" { "ERROR: " } else { "" },
                e.event
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at: &str, state: &str, text: &str) -> HistoryEvent {
        HistoryEvent {
            uuid: "u".into(),
            created_at: at.into(),
            severity: "INFO".into(),
            event: text.into(),
            state: Some(state.into()),
            duration_seconds: None,
        }
    }

    #[test]
    fn each_line_has_the_step_since_the_last() {
        let lines = lines(&[
            event(
                "2026-12-01T10:00:00Z",
                "deploying",
                "Provision state changed",
            ),
            event(
                "2026-12-01T10:00:02.5Z",
                "wait call-back",
                "Image transfer started",
            ),
        ]);
        assert!(lines[0].starts_with("10:00:00.000"), "{}", lines[0]);
        assert!(lines[1].contains("+2.5s  wait call-back"), "{}", lines[1]);
        assert!(lines[1].ends_with("Image transfer started"));
    }
}
