//! `GET /dashboard/nodes/{node}/console`: a node's serial console in the browser, over a
//! websocket bridged to the console's own TCP endpoint (the `socat` the engine started
//! when the console was enabled: see [`crate::console`]).
//!
//! The first message is text, `{"writable": true|false}`: whether this user may type
//! (see [`super::Access::may_type`]). Then every message is binary: what the machine
//! printed, from the engine; what was typed, from the browser, written to the console
//! only when writable (otherwise dropped: a watcher cannot type by sending anyway).
//! Either side closing ends both.

use std::net::SocketAddr;

use axum::Extension;
use axum::extract::Path;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::api::State;
use crate::api::http::auth::User;
use crate::api::http::error::ApiError;
use crate::api::node_access::find;

/// The websocket close code for "the server cannot do this now" (RFC 6455 §7.4.1: 1011).
const UNAVAILABLE: u16 = 1011;

/// Consoles open in browsers at once: an upgraded connection no longer counts against
/// the API's connection limit, so the consoles have their own.
pub const MAX_OPEN: usize = 64;

pub async fn attach(
    app: State,
    Path(ident): Path<String>,
    Extension(user): Extension<User>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let node = match find(&app, &ident).await {
        Ok(node) => node,
        Err(e) => return e.into_response(),
    };
    let Some(endpoint) = app.conductor.console_endpoint(&node.body, node.uuid()) else {
        return ApiError::bad_request(format!(
            "The console of node {} is not enabled, or has no endpoint to connect to.",
            node.uuid()
        ))
        .into_response();
    };
    let Ok(slot) = app.dashboard.consoles.clone().try_acquire_owned() else {
        return ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_OPEN} consoles are open in browsers already; close one first."),
        )
        .into_response();
    };
    let writable = app.dashboard.access.may_type(&user);
    upgrade.on_upgrade(move |socket| async move {
        bridge(socket, endpoint, writable).await;
        drop(slot);
    })
}

async fn bridge(socket: WebSocket, endpoint: SocketAddr, writable: bool) {
    let (mut to_browser, mut from_browser) = socket.split();
    let hello = json!({ "writable": writable }).to_string();
    if to_browser.send(Message::Text(hello.into())).await.is_err() {
        return;
    }
    let console = match TcpStream::connect(endpoint).await {
        Ok(console) => console,
        Err(e) => {
            let reason = format!("the console at {endpoint} did not answer: {e}");
            let frame = CloseFrame {
                code: UNAVAILABLE,
                reason: reason.into(),
            };
            let _ = to_browser.send(Message::Close(Some(frame))).await;
            return;
        }
    };
    let (mut from_console, mut to_console) = console.into_split();
    let printed = async {
        let mut buf = vec![0u8; 8192];
        loop {
            match from_console.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let bytes = axum::body::Bytes::copy_from_slice(&buf[..n]);
                    if to_browser.send(Message::Binary(bytes)).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to_browser.send(Message::Close(None)).await;
    };
    let typed = async {
        while let Some(Ok(message)) = from_browser.next().await {
            let bytes = match message {
                Message::Binary(bytes) => bytes,
                Message::Text(text) => axum::body::Bytes::copy_from_slice(text.as_bytes()),
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => continue,
            };
            if writable && to_console.write_all(&bytes).await.is_err() {
                break;
            }
        }
    };
    // Whichever side ends first ends the other.
    tokio::select! {
        () = printed => {}
        () = typed => {}
    }
}
