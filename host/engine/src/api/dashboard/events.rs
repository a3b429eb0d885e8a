//! `GET /dashboard/events`: the fleet as server-sent events. The first event (`fleet`)
//! holds every node's summary; each later one (`changes`) the summaries that changed and
//! the nodes that are gone, at most one a [`super::fleet::TICK`]. Each carries `now`, the
//! engine's clock at its scan, against which the page counts heartbeat ages.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde_json::json;

use super::fleet::{Fleet, Frame};
use crate::api::State;

pub async fn stream(app: State) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let frames = app.dashboard.fleet.watch();
    let events = futures_util::stream::unfold(
        (frames, None::<Arc<Frame>>),
        |(mut frames, mut sent)| async move {
            loop {
                let frame = match sent {
                    None => Fleet::first(&mut frames).await?,
                    Some(_) => Fleet::next(&mut frames).await?,
                };
                let (name, changes) = match &sent {
                    None => ("fleet", frame.changes_since(&Frame::default())),
                    Some(earlier) => ("changes", frame.changes_since(earlier)),
                };
                let first = sent.is_none();
                sent = Some(frame.clone());
                if !first && changes.is_empty() {
                    continue;
                }
                let data = json!({
                    "now": frame.at,
                    "nodes": changes.nodes.iter().map(|n| &**n).collect::<Vec<_>>(),
                    "removed": changes.removed,
                });
                let event = Event::default()
                    .event(name)
                    .json_data(data)
                    .unwrap_or_else(|_| Event::default().comment("unserialisable"));
                return Some((Ok(event), (frames, sent)));
            }
        },
    );
    Sse::new(events).keep_alive(KeepAlive::default())
}
