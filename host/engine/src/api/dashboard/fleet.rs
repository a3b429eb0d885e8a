//! The fleet as the dashboard shows it: a [`Summary`] per node, read from the store by
//! one scanner for every viewer, published as a [`Frame`] on a watch channel.
//!
//! Why one scanner and a watch channel, not an event per write: heartbeats touch nodes
//! thousands of times a second, and a browser needs a picture a second, not every
//! touch. The scanner reads the fleet once per [`TICK`] while anyone watches (and not
//! at all otherwise), keeps the `Arc` of every summary that did not change, and
//! publishes the new frame. Each viewer diffs the frame it last sent against the newest
//! ([`Frame::changes_since`]: a pointer comparison per unchanged node), so a slow viewer
//! skips frames instead of queueing them, and never misses a change: what it sends is
//! always the difference from what it sent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use uuid::Uuid;

use crate::agent_sessions::{AgentSessions, LastReport};
use crate::clock::Timestamp;
use crate::node::Node;
use crate::state_machine::Timeouts;
use crate::store::Store;

/// How often the scanner reads the fleet while anyone watches.
pub const TICK: Duration = Duration::from_secs(1);

/// Nodes the scanner reads between two yields (sled reads are synchronous), and whose
/// agents' reports it reads under one lock.
const BATCH: usize = 256;

/// One node's line in the fleet view. Times are milliseconds since the Unix epoch, as a
/// browser counts them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub uuid: Uuid,
    pub name: Option<String>,
    pub driver: String,
    pub power: Option<String>,
    pub state: &'static str,
    pub target: Option<&'static str>,
    pub maintenance: bool,
    pub group: String,
    pub last_error: Option<String>,
    /// `provision_updated_at`: the clock the sweeper judges, moved by every heartbeat.
    pub updated_at: i64,
    /// The callback timeout of the node's state in seconds, if it has one enabled.
    pub timeout: Option<u64>,
    /// When the sweeper fails the node, if it waits with a timeout enabled.
    pub deadline: Option<i64>,
    /// The agent's last heartbeat, as it recorded it.
    pub heartbeat_at: Option<i64>,
    /// Image bytes the agent wrote, and of how many (its last `agent_status_message`).
    pub written: u64,
    pub total: Option<u64>,
    /// The agent's own words of its work.
    pub status: Option<String>,
}

fn millis(t: Timestamp) -> i64 {
    t.as_micros() / 1000
}

impl Summary {
    /// The node's line: its stored fields, with what its agent said over the stored.
    pub fn of(node: &Node, timeouts: &Timeouts, heard: LastReport) -> Summary {
        let heard = heard.or_stored(&node.body.driver_internal_info);
        let progress = heard.progress.unwrap_or_default();
        let state = node.state();
        Summary {
            uuid: node.uuid(),
            name: node.body.name.clone(),
            driver: node.body.driver.clone(),
            power: node.body.power_state.clone(),
            state: state.as_str(),
            target: node.provision.target.map(|t| t.as_str()),
            maintenance: node.body.maintenance,
            group: node
                .body
                .attrs
                .get("conductor_group")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            last_error: node.body.last_error.clone(),
            updated_at: millis(node.provision.updated_at),
            timeout: timeouts.for_state(state).map(|d| d.as_secs()),
            deadline: node.provision.deadline.map(millis),
            heartbeat_at: heard.at.map(millis),
            written: progress.written,
            total: progress.total,
            status: heard.message,
        }
    }
}

/// The fleet at one scan.
#[derive(Default)]
pub struct Frame {
    /// Whether a scanner made it since viewers came: the frame left from an earlier
    /// watch is stale, and a new viewer waits for a fresh one.
    pub fresh: bool,
    /// When the scan began, by the engine's clock.
    pub at: i64,
    pub nodes: BTreeMap<Uuid, Arc<Summary>>,
}

/// What changed from one frame to another.
#[derive(Debug, Default)]
pub struct Changes {
    pub nodes: Vec<Arc<Summary>>,
    pub removed: Vec<Uuid>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.removed.is_empty()
    }
}

impl Frame {
    /// The nodes new or changed since `earlier`, and those gone.
    pub fn changes_since(&self, earlier: &Frame) -> Changes {
        let nodes = self
            .nodes
            .iter()
            .filter(|(uuid, now)| {
                earlier
                    .nodes
                    .get(uuid)
                    .is_none_or(|then| !Arc::ptr_eq(then, now) && then != *now)
            })
            .map(|(_, now)| now.clone())
            .collect();
        let removed = earlier
            .nodes
            .keys()
            .filter(|uuid| !self.nodes.contains_key(uuid))
            .copied()
            .collect();
        Changes { nodes, removed }
    }
}

/// The scanner and its frames.
pub struct Fleet {
    store: Arc<Store>,
    agents: Arc<AgentSessions>,
    frames: watch::Sender<Arc<Frame>>,
    scanning: AtomicBool,
}

impl Fleet {
    pub fn new(store: Arc<Store>, agents: Arc<AgentSessions>) -> Arc<Fleet> {
        Arc::new(Fleet {
            store,
            agents,
            frames: watch::Sender::new(Arc::default()),
            scanning: AtomicBool::new(false),
        })
    }

    /// A viewer's subscription: its first fresh frame, then every newer one. The scanner
    /// runs while any subscription lives.
    pub fn watch(self: &Arc<Self>) -> watch::Receiver<Arc<Frame>> {
        let frames = self.frames.subscribe();
        self.ensure_scanning();
        frames
    }

    /// The frame a new viewer starts from: the current one if fresh, else the next.
    pub async fn first(frames: &mut watch::Receiver<Arc<Frame>>) -> Option<Arc<Frame>> {
        let current = frames.borrow_and_update().clone();
        match current.fresh {
            true => Some(current),
            false => Fleet::next(frames).await,
        }
    }

    /// The next fresh frame newer than the one `frames` last saw.
    pub async fn next(frames: &mut watch::Receiver<Arc<Frame>>) -> Option<Arc<Frame>> {
        loop {
            frames.changed().await.ok()?;
            let frame = frames.borrow_and_update().clone();
            if frame.fresh {
                return Some(frame);
            }
        }
    }

    fn ensure_scanning(self: &Arc<Self>) {
        if !self.scanning.swap(true, Ordering::AcqRel) {
            tokio::spawn(self.clone().scan_while_watched());
        }
    }

    async fn scan_while_watched(self: Arc<Self>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.frames.receiver_count() == 0 {
                // Nobody watches: stop, and leave a stale frame for the next viewer to
                // wait past. A viewer that subscribed after the count was read finds
                // `scanning` false (or sees it taken back below) and a scanner running.
                self.frames.send_replace(Arc::default());
                self.scanning.store(false, Ordering::Release);
                if self.frames.receiver_count() == 0 || self.scanning.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
            match self.scan().await {
                Ok(frame) => {
                    self.frames.send_replace(Arc::new(frame));
                }
                Err(e) => tracing::warn!("the dashboard could not read the fleet: {e}"),
            }
        }
    }

    /// The fleet now, each unchanged summary the previous frame's own.
    async fn scan(&self) -> Result<Frame, crate::store::StoreError> {
        let previous = self.frames.borrow().clone();
        let timeouts = self.store.timeouts();
        let at = millis(self.store.clock().now());
        let mut nodes = BTreeMap::new();
        let mut pages = self.store.nodes_after(None);
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let node = pages.next().await.transpose()?;
            let end = node.is_none();
            batch.extend(node);
            if batch.len() < BATCH && !end {
                continue;
            }
            let heard = self.agents.last_reports(batch.iter().map(Node::uuid));
            for (node, heard) in batch.drain(..).zip(heard) {
                let summary = Summary::of(&node, &timeouts, heard);
                let summary = match previous.nodes.get(&summary.uuid) {
                    Some(kept) if **kept == summary => kept.clone(),
                    _ => Arc::new(summary),
                };
                nodes.insert(summary.uuid, summary);
            }
            if end {
                break;
            }
            // sled reads are synchronous: let the runtime's other tasks run.
            tokio::task::yield_now().await;
        }
        Ok(Frame {
            fresh: true,
            at,
            nodes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(uuid: Uuid, state: &'static str) -> Arc<Summary> {
        Arc::new(Summary {
            uuid,
            name: None,
            driver: "fake".into(),
            power: None,
            state,
            target: None,
            maintenance: false,
            group: String::new(),
            last_error: None,
            updated_at: 0,
            timeout: None,
            deadline: None,
            heartbeat_at: None,
            written: 0,
            total: None,
            status: None,
        })
    }

    #[test]
    fn changes_are_the_new_the_changed_and_the_gone_nodes_only() {
        let (a, b, c, d) = (
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
        );
        let kept = summary(a, "active");
        let earlier = Frame {
            fresh: true,
            at: 0,
            nodes: [
                (a, kept.clone()),
                (b, summary(b, "available")),
                (c, summary(c, "deploying")),
            ]
            .into(),
        };
        let later = Frame {
            fresh: true,
            at: 1,
            // a: the same Arc; b: changed; c: gone; d: new.
            nodes: [
                (a, kept),
                (b, summary(b, "manageable")),
                (d, summary(d, "enroll")),
            ]
            .into(),
        };
        let changes = later.changes_since(&earlier);
        let mut changed: Vec<_> = changes.nodes.iter().map(|s| s.uuid).collect();
        changed.sort();
        let mut expected = vec![b, d];
        expected.sort();
        assert_eq!(changed, expected);
        // An equal copy (a rescan that kept nothing) is no change.
        let rescanned = Frame {
            fresh: true,
            at: 2,
            nodes: later
                .nodes
                .iter()
                .map(|(u, s)| (*u, Arc::new((**s).clone())))
                .collect(),
        };
        assert!(rescanned.changes_since(&later).is_empty());
        assert_eq!(changes.removed, vec![c]);
        assert!(later.changes_since(&later).is_empty());
        let everything = later.changes_since(&Frame::default());
        assert_eq!(everything.nodes.len(), 3);
    }
}
