//! How a node route reaches its node: by uuid or name, and edited under its claim (the
//! conductor waits for a busy node as Ironic's lock retry does).

use super::App;
use super::http::error::ApiError;
use crate::node::{Node, NodeBody};

/// The node `ident` (a uuid or a name) names; 404 if none.
pub async fn find(app: &App, ident: &str) -> Result<Node, ApiError> {
    Ok(app.conductor.store().find_node(ident).await?)
}

/// Changes a node's body under its claim.
pub async fn edit(
    app: &App,
    ident: &str,
    change: impl Fn(&mut NodeBody) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let uuid = find(app, ident).await?.uuid();
    app.conductor.edit(uuid, |_, b| change(b)).await?;
    Ok(())
}
