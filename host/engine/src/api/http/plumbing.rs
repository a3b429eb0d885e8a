//! What every request passes through besides authentication: Ironic's paths (without
//! `/v1`, with `.json`) rewritten before routing, then one layer ([`envelope`]) for its
//! id, its time limit, its version, its body's type, Ironic's error shape for every
//! refusal, and the connection a refused body closes.

use std::time::Duration;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::version::Version;

/// How long a request may take, but a driver upload.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// What every request of the API passes through but the parts that need the engine's
/// state (its base, authentication, forwarding), in one layer: from the outside in,
/// Ironic's error shape for every refusal, `Connection: close` after a refused body, the
/// request's id, its time limit, its version (406 outside the range, the bounds on every
/// answer), and a body that says it is not JSON refused. One layer, not six: each
/// `from_fn` layer clones the router's boxed service and boxes a future per request (a
/// sixth of a node GET's CPU in perf).
pub async fn envelope(request: Request, next: Next, upload: &str) -> Response {
    let id = format!("req-{}", uuid::Uuid::new_v4());
    let is_upload = request.method() == axum::http::Method::POST && request.uri().path() == upload;
    let answer = negotiated(request, next, upload);
    let mut response = match is_upload {
        true => answer.await,
        false => within_time_limit(answer).await,
    };
    let value = HeaderValue::from_str(&id).expect("a uuid is a valid header");
    let headers = response.headers_mut();
    headers.insert("openstack-request-id", value.clone());
    headers.insert("x-openstack-request-id", value);
    close_after_refused_body(&mut response);
    shaped(response).await
}

/// Every request must be answered within [`REQUEST_TIMEOUT`], but a driver upload: a large
/// component (a Python runtime is tens of MiB) over a slow link, then its compile, can
/// take longer while making progress all along. An upload is bounded by progress instead
/// ([`crate::api::drivers::UPLOAD_IDLE`] between bytes) and compiles one at a time.
async fn within_time_limit(answer: impl Future<Output = Response>) -> Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            format!(
                "The request was not answered within {} s.",
                REQUEST_TIMEOUT.as_secs()
            ),
        )
        .into_response(),
    }
}

/// The request at its negotiated version ([`super::version`]), its body's type checked.
async fn negotiated(mut request: Request, next: Next, raw: &str) -> Response {
    let version = match super::version::requested(request.headers()) {
        Ok(version) => version,
        Err(refused) => {
            let mut response = refused.into_response();
            super::version::bounds(response.headers_mut(), super::version::MIN);
            return response;
        }
    };
    let mut response = match not_json(&request, raw) {
        Some(refused) => refused.into_response(),
        None => {
            request.extensions_mut().insert(version);
            next.run(request).await
        }
    };
    super::version::bounds(response.headers_mut(), version);
    response
}

/// The first microversion at which a `.json` suffix is part of the identifier it ends.
const JSON_SUFFIX_REFUSED: Version = Version(91);

/// The first path segments deployd serves outside `/v1` besides the root document: its
/// metrics, its store's backup, the image and boot file servers, the dashboard. Never
/// rewritten.
const OWN_ROOTS: &[&str] = &["metrics", "store", "images", "boot", "dashboard"];

/// Rewrites a path as Ironic routes it, before routing, so every resource sees it so:
/// - a path without the version (`/nodes/{id}`: what every `bookmark` link names) is
///   served as `/v1/…`, as Ironic's root controller does (but deployd's own roots);
/// - before 1.91, a trailing `.json` is stripped (`/v1/nodes/{id}.json`, a leftover of
///   Ironic's old content-type guessing) when the request names its version; from 1.91 on
///   the suffix is part of the identifier.
///
/// The listener calls it on each request before the router sees it (a middleware of the
/// router would run after routing, and a router around it routed every request twice).
pub fn ironic_path<B>(request: &mut axum::http::Request<B>) {
    if let Some(path) = rewritten(request.uri(), request.headers()) {
        let rewritten = match request.uri().query() {
            Some(query) => format!("{path}?{query}"),
            None => path,
        };
        if let Ok(uri) = rewritten.parse() {
            *request.uri_mut() = uri;
        }
    }
}

/// The path Ironic would route `uri` to, if not its own (most requests: no allocation).
fn rewritten(uri: &axum::http::Uri, headers: &axum::http::HeaderMap) -> Option<String> {
    let path = uri.path().trim_end_matches('/');
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    if OWN_ROOTS.contains(&first) {
        return None;
    }
    let unversioned = !path.is_empty() && first != "v1";
    let suffixed = path.ends_with(".json")
        && super::version::named(headers).is_some_and(|v| v < JSON_SUFFIX_REFUSED);
    let trailing = path.len() != uri.path().len() && !path.is_empty();
    if !(unversioned || suffixed || trailing) {
        return None;
    }
    let path = path
        .strip_suffix(".json")
        .filter(|_| suffixed)
        .unwrap_or(path);
    Some(match unversioned {
        true => format!("/v1{path}"),
        false => path.to_owned(),
    })
}

/// A request body that says it is not JSON is refused (415), as Ironic refuses it, but
/// where a resource takes other bytes (a driver upload, at `raw`): a JSON body sent as
/// `text/plain` is a client's mistake to hear about, not a guess to make.
fn not_json(request: &Request, raw: &str) -> Option<ApiError> {
    let m = request.method();
    let has_body = m == axum::http::Method::POST
        || m == axum::http::Method::PUT
        || m == axum::http::Method::PATCH;
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim())
        .filter(|_| has_body && request.uri().path() != raw)?;
    // Compared without a copy: every heartbeat passes here.
    let json = |t: &str| {
        let suffix = t.len().checked_sub(5).and_then(|at| t.get(at..));
        t.eq_ignore_ascii_case("application/json")
            || suffix.is_some_and(|s| s.eq_ignore_ascii_case("+json"))
    };
    (!json(declared)).then(|| {
        ApiError::new(
            axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Unknown mimetype: {declared}; send the body as application/json."),
        )
    })
}

/// A path no route serves: 404 in Ironic's error shape (clients parse every 4xx body).
pub async fn unrouted(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("The resource could not be found: {}", uri.path()))
}

/// A known path with a method it does not take: 405 in Ironic's error shape.
pub async fn not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        format!("The method {method} is not allowed for {}", uri.path()),
    )
}

/// A body refused for its size (413) is answered before it is read, and hyper then closes
/// the connection rather than read the rest. The answer says so (`Connection: close`):
/// otherwise a client that had written the whole body into its socket pools the
/// connection, and its next request there is cut off (seen as an incomplete message).
fn close_after_refused_body(response: &mut Response) {
    if response.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        let close = HeaderValue::from_static("close");
        response
            .headers_mut()
            .insert(axum::http::header::CONNECTION, close);
    }
}

/// How a failed answer (a 5xx, or an error mid-response) is logged. A 503 is the engine
/// refusing work it has no room for (a full bcrypt queue, a store that cannot write):
/// under a flood there is one per request, so those are DEBUG, and the part that
/// refuses says so once; any other failure is an ERROR.
pub fn log_failure(
    class: tower_http::classify::ServerErrorsFailureClass,
    latency: Duration,
    _span: &tracing::Span,
) {
    use tower_http::classify::ServerErrorsFailureClass::StatusCode as Status;
    match class {
        Status(status) if status == axum::http::StatusCode::SERVICE_UNAVAILABLE => {
            tracing::debug!(%status, ?latency, "refused: no room")
        }
        other => tracing::error!(classification = %other, ?latency, "response failed"),
    }
}

/// Every refusal in Ironic's JSON error shape, whoever made it: axum's own rejections (a
/// query string that does not parse, a body past its limit) and the image and boot
/// servers answer in plain text, which Ironic's clients cannot read. The status and the
/// headers (`Retry-After`, `Allow`, `WWW-Authenticate`, `Connection`…) are kept; the text
/// becomes the `faultstring`.
pub async fn json_errors(request: Request, next: Next) -> Response {
    shaped(next.run(request).await).await
}

/// `response`, in Ironic's error shape if it is a refusal in another ([`json_errors`]).
async fn shaped(response: Response) -> Response {
    use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
    let status = response.status();
    let json = response
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    if json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    // A refusal's text is short; one past this is cut, never buffered whole.
    let text = axum::body::to_bytes(body, 16 << 10)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_owned();
    let message = match text.is_empty() {
        true => status.canonical_reason().unwrap_or("Error").to_owned(),
        false => super::error::query_words(&text),
    };
    let mut shaped = ApiError::new(status, message).into_response();
    for (name, value) in &parts.headers {
        if name != CONTENT_TYPE && name != CONTENT_LENGTH {
            shaped.headers_mut().insert(name.clone(), value.clone());
        }
    }
    shaped
}
