//! Routes that exist only from a microversion on. The gate is declared where the route
//! is (`routes()` of each resource), not checked inside the handler: a request at an
//! older version gets Ironic's 404 before anything of it is read.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use axum::routing::MethodRouter;

use super::error::ApiError;
use super::version::{MIN, Version};
use crate::api::App;

/// What a request older than its route is answered. Ironic answers 404 where the
/// resource did not exist yet, but some of its controllers refuse an older request
/// otherwise, and clients test for it.
#[derive(Clone, Copy, Debug)]
pub enum TooOld {
    /// 404: the resource does not exist at that version.
    NotFound,
    /// 406: the resource exists but not for that version (`GET …/traits` at 1.27).
    NotAcceptable,
    /// 405: a write the version does not know (`PUT …/traits` at 1.27).
    NotAllowed,
}

/// `routes` (the methods of one path) from API 1.`minor` on; older requests get 404.
pub fn since(minor: u32, routes: MethodRouter<Arc<App>>) -> MethodRouter<Arc<App>> {
    gated(minor, TooOld::NotFound, routes)
}

/// `routes` from API 1.`minor` on; older requests get `answer`.
pub fn gated(minor: u32, answer: TooOld, routes: MethodRouter<Arc<App>>) -> MethodRouter<Arc<App>> {
    routes.route_layer(middleware::from_fn(
        move |request: Request, next: Next| async move {
            let version = request
                .extensions()
                .get::<Version>()
                .copied()
                .unwrap_or(MIN);
            match version.at_least(minor) {
                true => next.run(request).await,
                false => too_old(minor, answer).into_response(),
            }
        },
    ))
}

/// A method the path does not take: 405 from API 1.`minor` on; before it, the path does
/// not exist at all (404), as Ironic answers (`PUT …/vmedia` at 1.79).
pub async fn other_method(minor: u32, version: Version, method: Method) -> ApiError {
    match version.at_least(minor) {
        true => ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("The method {method} is not allowed here."),
        ),
        false => too_old(minor, TooOld::NotFound),
    }
}

/// The answer to a request older than its route.
pub fn too_old(minor: u32, answer: TooOld) -> ApiError {
    let status = match answer {
        TooOld::NotFound => StatusCode::NOT_FOUND,
        TooOld::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
        TooOld::NotAllowed => StatusCode::METHOD_NOT_ALLOWED,
    };
    let message = match answer {
        TooOld::NotFound => "The resource could not be found",
        TooOld::NotAcceptable | TooOld::NotAllowed => "The request is not allowed at this version",
    };
    ApiError::new(
        status,
        format!("{message}; it needs API version 1.{minor} or newer."),
    )
}
