//! Every record of a kind in uuid order after a marker, one at a time: what a pass over the
//! fleet (the node list, a filter, the allocator's search) or over a kind of document (a
//! list of chassis, the allocation holding a node) reads. A caller that looks at each
//! record and lets it go holds one record (sled) or one page (the shared store) in
//! memory, never them all.

use futures_util::future::BoxFuture;
use uuid::Uuid;

use super::StoreError;
use super::documents::Doc;
use super::postgres::SharedStore;
use crate::node::Node;

/// Records the shared store reads per query.
const PAGE: usize = 256;

/// The records after a marker (see [`crate::store::Store::nodes_after`]).
pub struct Pages<'a, T>(Source<'a, T>);

/// Nodes in uuid order.
pub type NodePages<'a> = Pages<'a, Node>;

/// Documents of one kind in uuid order, each with its uuid.
pub type DocumentPages<'a> = Pages<'a, (Uuid, Doc)>;

/// The shared store's query for the page after a marker.
type Fetch<'a, T> =
    Box<dyn Fn(Option<Uuid>) -> BoxFuture<'a, Result<Vec<T>, StoreError>> + Send + Sync + 'a>;

enum Source<'a, T> {
    /// sled: each record read and parsed when it is asked for.
    Sled(Box<dyn Iterator<Item = Result<T, StoreError>> + Send + 'a>),
    /// The shared store: a page per query, the next one after the last record of this one.
    Shared {
        fetch: Fetch<'a, T>,
        key: fn(&T) -> Uuid,
        marker: Option<Uuid>,
        page: std::vec::IntoIter<T>,
        done: bool,
    },
}

impl<'a, T: Send> Pages<'a, T> {
    pub(super) fn sled(records: impl Iterator<Item = Result<T, StoreError>> + Send + 'a) -> Self {
        Pages(Source::Sled(Box::new(records)))
    }

    /// The next record; `None` after the last (or after an error, which is returned once).
    pub async fn next(&mut self) -> Option<Result<T, StoreError>> {
        match &mut self.0 {
            Source::Sled(records) => records.next(),
            Source::Shared {
                fetch,
                key,
                marker,
                page,
                done,
            } => {
                if let Some(record) = page.next() {
                    return Some(Ok(record));
                }
                if *done {
                    return None;
                }
                match fetch(*marker).await {
                    Ok(records) => {
                        *done = records.len() < PAGE;
                        *marker = records.last().map(key).or(*marker);
                        *page = records.into_iter();
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

    /// [`Pages::next`] on a blocking thread (a streamed answer, a pass off the async
    /// workers): the shared store's query runs on the engine's runtime meanwhile.
    pub fn next_blocking(&mut self) -> Option<Result<T, StoreError>> {
        match &mut self.0 {
            Source::Sled(records) => records.next(),
            Source::Shared { .. } => tokio::runtime::Handle::current().block_on(self.next()),
        }
    }

    /// The records as a blocking iterator (see [`Pages::next_blocking`]).
    pub fn blocking(mut self) -> impl Iterator<Item = Result<T, StoreError>> + 'a
    where
        T: 'a,
    {
        std::iter::from_fn(move || self.next_blocking())
    }
}

impl<'a> NodePages<'a> {
    pub(super) fn shared(store: &'a SharedStore, marker: Option<Uuid>) -> Self {
        Pages(Source::Shared {
            fetch: Box::new(move |after| Box::pin(store.list_nodes(after, PAGE))),
            key: Node::uuid,
            marker,
            page: Vec::new().into_iter(),
            done: false,
        })
    }
}

impl<'a> DocumentPages<'a> {
    pub(super) fn shared(store: &'a SharedStore, kind: &'static str, marker: Option<Uuid>) -> Self {
        Pages(Source::Shared {
            fetch: Box::new(move |after| Box::pin(store.documents_after(kind, after, PAGE))),
            key: |(uuid, _)| *uuid,
            marker,
            page: Vec::new().into_iter(),
            done: false,
        })
    }
}
