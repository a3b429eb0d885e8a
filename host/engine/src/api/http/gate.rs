//! Routes that exist only from a microversion on. The gate is declared where the route
//! is (`routes()` of each resource), not checked inside the handler: a request at an
//! older version gets Ironic's 404 before anything of it is read.

use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use axum::routing::MethodRouter;

use super::error::ApiError;
use super::version::{MIN, Version};
use crate::api::App;

/// `routes` (the methods of one path) from API 1.`minor` on; older requests get 404.
pub fn since(minor: u32, routes: MethodRouter<Arc<App>>) -> MethodRouter<Arc<App>> {
    routes.route_layer(middleware::from_fn(
        move |request: Request, next: Next| async move {
            let version = request
                .extensions()
                .get::<Version>()
                .copied()
                .unwrap_or(MIN);
            match version.at_least(minor) {
                true => next.run(request).await,
                false => too_old(minor).into_response(),
            }
        },
    ))
}

/// The answer to a request older than its route: 404, as Ironic answers it.
fn too_old(minor: u32) -> ApiError {
    ApiError::not_found(format!(
        "The resource could not be found; it needs API version 1.{minor} or newer."
    ))
}
