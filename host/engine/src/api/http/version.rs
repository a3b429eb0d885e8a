//! API microversions: which one a request asked for, and the headers every answer carries.
//!
//! deployd serves 1.1 to [`MAX`] (why that maximum: `deployd_wire::version`). The
//! `baremetal` CLI asks for its latest (1.115), gets 406 with these bounds, and retries at
//! the maximum.

use std::sync::LazyLock;

use axum::http::{HeaderMap, HeaderValue};

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
pub(super) fn requested(headers: &HeaderMap) -> Result<Version, ApiError> {
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

/// The headers that name a version served, per minor version from [`MIN`] to [`MAX`]
/// (`X-OpenStack-Ironic-API-Version`, `OpenStack-API-Version`), made once: every answer
/// carries them.
static SERVED: LazyLock<Vec<[HeaderValue; 2]>> = LazyLock::new(|| {
    (MIN.0..=MAX.0)
        .map(|minor| {
            let v = Version(minor);
            [value(v.to_string()), value(format!("baremetal {v}"))]
        })
        .collect()
});

static RANGE: LazyLock<[HeaderValue; 2]> =
    LazyLock::new(|| [value(MIN.to_string()), value(MAX.to_string())]);

fn value(text: String) -> HeaderValue {
    HeaderValue::from_str(&text).expect("a version is a valid header")
}

pub(super) fn bounds(headers: &mut HeaderMap, served: Version) {
    let [min, max] = RANGE.clone();
    headers.insert("x-openstack-ironic-api-minimum-version", min);
    headers.insert("x-openstack-ironic-api-maximum-version", max);
    if let Some([legacy, modern]) = served
        .0
        .checked_sub(MIN.0)
        .and_then(|i| SERVED.get(i as usize))
    {
        headers.insert("x-openstack-ironic-api-version", legacy.clone());
        headers.insert("openstack-api-version", modern.clone());
    }
    headers.insert(
        "vary",
        HeaderValue::from_static("X-OpenStack-Ironic-API-Version, OpenStack-API-Version"),
    );
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
    fn every_answer_names_the_range_and_the_version_served() {
        for served in [MIN, Version(31), MAX] {
            let mut h = HeaderMap::new();
            bounds(&mut h, served);
            let named = |n: &str| h[n].to_str().unwrap().to_owned();
            assert_eq!(
                named("x-openstack-ironic-api-minimum-version"),
                MIN.to_string()
            );
            assert_eq!(
                named("x-openstack-ironic-api-maximum-version"),
                MAX.to_string()
            );
            assert_eq!(named("x-openstack-ironic-api-version"), served.to_string());
            assert_eq!(
                named("openstack-api-version"),
                format!("baremetal {served}")
            );
        }
    }

    #[test]
    fn out_of_range_and_malformed_versions_are_406() {
        for bad in ["1.116", "1.0", "2.1", "one.two", "1", ""] {
            let err = requested(&with("X-OpenStack-Ironic-API-Version", bad)).unwrap_err();
            assert_eq!(err.status.as_u16(), 406, "{bad}");
        }
    }
}
