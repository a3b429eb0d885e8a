//! The web console at `/dashboard`: the fleet live, a node's page and its actions, in a
//! browser, served by the engine on the API's port with no build step for its user.
//!
//! The page is a small single-page application on Preact with htm (tagged templates
//! instead of JSX, so nothing is compiled), embedded in the binary ([`assets`]). It reads
//! the fleet from one server-sent event stream ([`events`]) and everything else from the
//! API itself, with the browser's credentials: what the API refuses, the page refuses,
//! in the API's words.
//!
//! | module | what it holds |
//! |---|---|
//! | [`fleet`] | a summary per node, read by one scanner while anyone watches |
//! | [`events`] | `GET /dashboard/events`: the fleet, then its changes, as server-sent events |
//! | [`console`] | `GET /dashboard/nodes/{node}/console`: a node's serial console over a websocket |
//! | [`assets`] | the page, its script, its style and the vendored libraries |
//!
//! Access: every route passes the API's authentication (`http_basic` asks the browser to
//! log in). Under `noauth` the dashboard answers loopback clients only, unless
//! `[api] dashboard_open_to_remote` says otherwise: an engine listening on every address
//! for its agents should not show its fleet to whoever browses to it. A console is typed
//! into only by the users `[api] dashboard_console_writers` names (everyone by default,
//! as the console's own url lets anyone who may call the API); the others watch it.

pub mod assets;
pub mod console;
pub mod events;
pub mod fleet;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::api::http::auth::{Auth, User};
use crate::api::http::error::ApiError;
use crate::api::{App, State};

/// What the dashboard's routes share.
pub struct Dashboard {
    pub fleet: Arc<fleet::Fleet>,
    pub access: Access,
    /// The consoles open in browsers (at most [`console::MAX_OPEN`]).
    pub consoles: Arc<tokio::sync::Semaphore>,
}

/// Who may see the dashboard, and who may type into a console in it.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// `[api] dashboard_open_to_remote`.
    pub open_to_remote: bool,
    /// `[api] dashboard_console_writers`.
    pub console_writers: Vec<String>,
}

impl Access {
    /// Whether `user` may type into a console: `*` lets everyone who passed the API's
    /// authentication (anyone under `noauth`); a name, that `http_basic` user.
    pub fn may_type(&self, user: &User) -> bool {
        self.console_writers
            .iter()
            .any(|w| w == "*" || user.0.as_deref() == Some(w.as_str()))
    }
}

pub fn routes(app: Arc<App>) -> Router<Arc<App>> {
    Router::new()
        .route("/dashboard", get(assets::page))
        .route("/dashboard/", get(assets::page))
        .route("/dashboard/assets/{file}", get(assets::file))
        .route("/dashboard/events", get(events::stream))
        .route("/dashboard/nodes/{ident}/console", get(console::attach))
        .layer(middleware::from_fn_with_state(app, gate))
}

/// Under `noauth`, refuses clients not on loopback unless the operator opened it.
async fn gate(app: State, request: Request, next: Next) -> Response {
    let remote = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .is_some_and(|c| !c.0.ip().to_canonical().is_loopback());
    if remote && matches!(app.auth, Auth::NoAuth) && !app.dashboard.access.open_to_remote {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "The dashboard answers clients on loopback only while the API has no \
             authentication: set [api] auth_strategy = \"http_basic\", or \
             [api] dashboard_open_to_remote = true.",
        )
        .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_console_is_typed_into_by_the_named_writers_or_by_everyone_for_a_star() {
        let named = Access {
            open_to_remote: false,
            console_writers: vec!["admin".into()],
        };
        assert!(named.may_type(&User(Some("admin".into()))));
        assert!(!named.may_type(&User(Some("viewer".into()))));
        assert!(!named.may_type(&User(None)), "noauth is nobody by name");
        let everyone = Access {
            console_writers: vec!["*".into()],
            ..named.clone()
        };
        assert!(everyone.may_type(&User(None)) && everyone.may_type(&User(Some("viewer".into()))));
        let nobody = Access::default();
        assert!(!nobody.may_type(&User(Some("admin".into()))));
    }
}
