//! Errors in Ironic's shape (`deployd_wire::fault`), with Ironic's status codes.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use deployd_wire::fault;

use crate::conductor::ConductorError;
use crate::conductor::allocations::AllocationError;
use crate::store::{ErrorClass, StoreError};

/// Set on an answer whose node was of a conductor group this engine does not serve, for
/// `api::forward` to send the call on (a heartbeat's, found so by its touch).
#[derive(Clone, Debug)]
pub struct OtherGroup {
    pub node: uuid::Uuid,
    pub group: String,
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The node was of another conductor group: the answer says so (see [`OtherGroup`]).
    pub other_group: Option<Box<OtherGroup>>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            other_group: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, message)
    }

    pub fn not_acceptable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_ACCEPTABLE, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, message)
    }
}

/// The JSON envelope of a server-side fault, for answers written outside axum.
pub fn error_body(faultstring: &str) -> String {
    fault::envelope("Server", faultstring).to_string()
}

/// The message, as a log line or a cut-short answer gives it.
impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let faultcode = fault::faultcode(self.status.as_u16());
        let mut response =
            (self.status, Json(fault::envelope(faultcode, &self.message))).into_response();
        if let Some(other) = self.other_group {
            response.extensions_mut().insert(*other);
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        let status = match e.class() {
            ErrorClass::NotFound => StatusCode::NOT_FOUND,
            ErrorClass::Taken | ErrorClass::Conflict => StatusCode::CONFLICT,
            ErrorClass::WrongState | ErrorClass::Invalid => StatusCode::BAD_REQUEST,
            ErrorClass::Transient => StatusCode::SERVICE_UNAVAILABLE,
            ErrorClass::Broken => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = match &e {
            StoreError::NodeNotFound(ident) => format!("Node {ident} could not be found."),
            StoreError::PortNotFound(ident) => format!("Port {ident} could not be found."),
            StoreError::DocumentNotFound { kind, ident } => {
                format!("{kind} {ident} could not be found.")
            }
            StoreError::DocumentTaken { kind, field, value } => {
                format!("A {} with {field} {value} already exists.", in_words(kind))
            }
            StoreError::IllegalTransition { node, source } => format!(
                "The requested action \"{}\" can not be performed on node \"{node}\" while it is in state \"{}\".",
                source.event, source.state
            ),
            other => other.to_string(),
        };
        ApiError::new(status, message)
    }
}

impl From<ConductorError> for ApiError {
    fn from(e: ConductorError) -> ApiError {
        match e {
            ConductorError::Store(e) => e.into(),
            ConductorError::Busy { .. } => ApiError::conflict(e.to_string()),
            ConductorError::Protected(_) => ApiError::new(StatusCode::FORBIDDEN, e.to_string()),
            ConductorError::Hardware(_) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
            }
            ConductorError::NoDriver(_) | ConductorError::Invalid(_) => {
                ApiError::bad_request(e.to_string())
            }
            // Sent on to the group's engines where the call came from; reached only where
            // none could be (a call already sent on once).
            ConductorError::OtherGroup { node, ref group } => ApiError {
                other_group: Some(Box::new(OtherGroup {
                    node,
                    group: group.clone(),
                })),
                ..ApiError::not_found(e.to_string())
            },
        }
    }
}

impl From<AllocationError> for ApiError {
    fn from(e: AllocationError) -> ApiError {
        match e {
            AllocationError::Store(e) => e.into(),
            AllocationError::Conductor(e) => e.into(),
            AllocationError::TakenMeanwhile
            | AllocationError::Deleted
            | AllocationError::NodeBusy { .. } => ApiError::conflict(e.to_string()),
            AllocationError::Refused(_) => ApiError::bad_request(e.to_string()),
        }
    }
}

/// A kind as Ironic's refusals name it: `VolumeConnector` → `volume connector`.
fn in_words(kind: &str) -> String {
    let mut words = String::new();
    for (i, c) in kind.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            words.push(' ');
        }
        words.extend(c.to_lowercase());
    }
    words
}

/// JSON request bodies: malformed JSON, wrong types and unknown fields are 400s that say
/// what is wrong (axum's own rejection would be a 422 without Ironic's shape).
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("Invalid request body: {e}")))
}

/// A query string that does not parse, in Ironic's words where it has them: an unknown
/// parameter is `Unknown argument: "name"` (its `UnknownArgument`), which clients match.
pub fn query_refused(rejection: &axum::extract::rejection::QueryRejection) -> ApiError {
    ApiError::bad_request(query_words(&rejection.body_text()))
}

/// Rewrites axum's "Failed to deserialize query string: x: unknown field `x`, …".
pub fn query_words(text: &str) -> String {
    let unknown = text
        .strip_prefix("Failed to deserialize query string: ")
        .and_then(|rest| rest.split_once("unknown field `"))
        .and_then(|(_, name)| name.split_once('`'))
        .map(|(name, _)| name);
    match unknown {
        Some(name) => format!("Unknown argument: \"{name}\""),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_unknown_query_parameter_is_named_as_ironic_names_it() {
        assert_eq!(
            super::query_words(
                "Failed to deserialize query string: bogus: unknown field `bogus`, expected `fields`"
            ),
            "Unknown argument: \"bogus\""
        );
        let other = "Failed to deserialize query string: limit: invalid digit found in string";
        assert_eq!(super::query_words(other), other);
    }
}
