//! Lists of strings kept on a node, its traits and its VIFs, and taking one member out.

use axum::http::StatusCode;

use super::App;
use super::http::error::ApiError;
use super::node_access::edit;
use crate::node::{self, NodeBody};

/// A list of strings kept on a node: its traits (an Ironic field, in `attrs`) or its VIFs.
/// VIFs are kept in `driver_internal_info.vifs`: deployd plugs no networks, so they are
/// records for the operator's network tooling, as with Ironic's `noop` interface.
#[derive(Clone, Copy)]
pub(super) enum List {
    Traits,
    Vifs,
}

impl List {
    pub(super) fn get(self, b: &NodeBody) -> Vec<String> {
        match self {
            List::Traits => node::strings(&b.attrs, "traits"),
            List::Vifs => node::strings(&b.driver_internal_info, "vifs"),
        }
    }

    pub(super) fn set(self, b: &mut NodeBody, list: Vec<String>) {
        match self {
            List::Traits => node::set_strings(&mut b.attrs, "traits", list),
            List::Vifs => node::set_strings(&mut b.driver_internal_info, "vifs", list),
        }
    }
}

/// Takes `item` out of a node's list; `missing` says why not, when it is not there.
pub(super) async fn remove_member(
    app: &App,
    ident: &str,
    list: List,
    item: &str,
    missing: fn(&NodeBody, &str) -> ApiError,
) -> Result<StatusCode, ApiError> {
    edit(app, ident, |b| {
        let mut members = list.get(b);
        let before = members.len();
        members.retain(|m| m != item);
        if members.len() == before {
            return Err(missing(b, item));
        }
        list.set(b, members);
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
