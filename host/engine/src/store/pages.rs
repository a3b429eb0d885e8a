//! Every node in uuid order after a marker, a node at a time: what a pass over the fleet
//! (the node list, a filter, the allocator's search) reads. A caller that looks at each
//! node and lets it go holds one node (sled) or one page (the shared store) in memory,
//! never the fleet.

use uuid::Uuid;

use super::StoreError;
use super::postgres::SharedStore;
use crate::node::Node;

/// Nodes the shared store reads per query.
const PAGE: usize = 256;

/// The nodes after a marker (see [`crate::store::Store::nodes_after`]).
pub struct NodePages<'a>(Source<'a>);

enum Source<'a> {
    /// sled: each node read and parsed when it is asked for.
    Sled(Box<dyn Iterator<Item = Result<Node, StoreError>> + Send + 'a>),
    /// The shared store: a page per query, the next one after the last node of this one.
    Shared {
        store: &'a SharedStore,
        marker: Option<Uuid>,
        page: std::vec::IntoIter<Node>,
        done: bool,
    },
}

impl<'a> NodePages<'a> {
    pub(super) fn sled(nodes: impl Iterator<Item = Result<Node, StoreError>> + Send + 'a) -> Self {
        NodePages(Source::Sled(Box::new(nodes)))
    }

    pub(super) fn shared(store: &'a SharedStore, marker: Option<Uuid>) -> Self {
        NodePages(Source::Shared {
            store,
            marker,
            page: Vec::new().into_iter(),
            done: false,
        })
    }

    /// The next node; `None` after the last (or after an error, which is returned once).
    pub async fn next(&mut self) -> Option<Result<Node, StoreError>> {
        match &mut self.0 {
            Source::Sled(nodes) => nodes.next(),
            Source::Shared {
                store,
                marker,
                page,
                done,
            } => {
                if let Some(node) = page.next() {
                    return Some(Ok(node));
                }
                if *done {
                    return None;
                }
                match store.list_nodes(*marker, PAGE).await {
                    Ok(nodes) => {
                        *done = nodes.len() < PAGE;
                        *marker = nodes.last().map(Node::uuid).or(*marker);
                        *page = nodes.into_iter();
                        page.next().map(Ok)
                    }
                    Err(e) => {
                        *done = true;
                        Some(Err(e))
                    }
                }
            }
        }
    }

    /// [`NodePages::next`] on a blocking thread (a streamed answer, a pass off the async
    /// workers): the shared store's query runs on the engine's runtime meanwhile.
    pub fn next_blocking(&mut self) -> Option<Result<Node, StoreError>> {
        match &mut self.0 {
            Source::Sled(nodes) => nodes.next(),
            Source::Shared { .. } => tokio::runtime::Handle::current().block_on(self.next()),
        }
    }
}
