//! API microversions: which one a request asked for, and the headers every answer carries.
//!
//! deployd serves 1.1 to [`MAX`] (why that maximum: `deployd_wire::version`). The
//! `baremetal` CLI asks for its latest (1.115), gets 406 with these bounds, and retries at
//! the maximum.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

pub use deployd_wire::version::{MAX, MIN, Version};

/// The version a request named in a header, if it named a valid one.
pub fn named(headers: &HeaderMap) -> Option<Version> {
    let given = ["x-openstack-ironic-api-version", "openstack-api-version"];
    if given.iter().all(|h| !headers.contains_key(*h)) {
        return None;
    }
    requested(headers).ok()
}

/// The version a request asked for: no header means the minimum, as in Ironic.
fn requested(headers: &HeaderMap) -> Result<Version, ApiError> {
    let legacy = headers
        .get("x-openstack-ironic-api-version")
        .and_then(|v| v.to_str().ok());
    let modern = headers
        .get("openstack-api-version")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("baremetal"))
        .map(str::trim);
    let Some(text) = legacy.or(modern) else {
        return Ok(MIN);
    };
    let text = text.trim();
    if text.eq_ignore_ascii_case("latest") {
        return Ok(MAX);
    }
    let (major, minor) = text
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .ok_or_else(|| {
            ApiError::not_acceptable(format!(
                "Invalid value for X-OpenStack-Ironic-API-Version header: {text}"
            ))
        })?;
    if major != 1 {
        return Err(ApiError::not_acceptable(format!(
            "Mutually exclusive versions requested. Version {text} requested but not supported by this service."
        )));
    }
    let v = Version(minor);
    if v < MIN || v > MAX {
        return Err(ApiError::not_acceptable(format!(
            "Version {v} was requested but the minor version is not supported by this service. The supported version range is: [{MIN}, {MAX}]."
        )));
    }
    Ok(v)
}

fn bounds(headers: &mut HeaderMap, served: Version) {
    let v = |s: String| HeaderValue::from_str(&s).expect("a version is a valid header");
    headers.insert("x-openstack-ironic-api-minimum-version", v(MIN.to_string()));
    headers.insert("x-openstack-ironic-api-maximum-version", v(MAX.to_string()));
    headers.insert("x-openstack-ironic-api-version", v(served.to_string()));
    headers.insert("openstack-api-version", v(format!("baremetal {served}")));
    headers.insert(
        "vary",
        HeaderValue::from_static("X-OpenStack-Ironic-API-Version, OpenStack-API-Version"),
    );
}

/// Middleware: negotiates the version (406 outside the range) and stamps the headers on
/// every answer, errors included.
pub async fn negotiate(mut request: Request, next: Next) -> Response {
    let mut response = match requested(request.headers()) {
        Ok(version) => {
            request.extensions_mut().insert(version);
            let mut r = next.run(request).await;
            bounds(r.headers_mut(), version);
            return r;
        }
        Err(e) => e.into_response(),
    };
    bounds(response.headers_mut(), MIN);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
        h
    }

    #[test]
    fn both_header_forms_and_latest_are_understood() {
        assert_eq!(requested(&HeaderMap::new()).unwrap(), MIN);
        assert_eq!(
            requested(&with("X-OpenStack-Ironic-API-Version", "1.31")).unwrap(),
            Version(31)
        );
        assert_eq!(
            requested(&with("OpenStack-API-Version", "baremetal 1.62")).unwrap(),
            Version(62)
        );
        assert_eq!(
            requested(&with("X-OpenStack-Ironic-API-Version", "latest")).unwrap(),
            MAX
        );
    }

    #[test]
    fn out_of_range_and_malformed_versions_are_406() {
        for bad in ["1.116", "1.0", "2.1", "one.two", "1", ""] {
            let err = requested(&with("X-OpenStack-Ironic-API-Version", bad)).unwrap_err();
            assert_eq!(err.status.as_u16(), 406, "{bad}");
        }
    }
}
