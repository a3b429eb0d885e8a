//! The dashboard's files, embedded in the binary: the page, its script and style, and the
//! vendored libraries (`web/vendor/`, with their licences and where they came from).
//! Each is sent with an `ETag` of its content, and a request that names it gets a 304:
//! a browser revalidates instead of downloading again, and never runs a stale script
//! after an upgrade.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const JS: &str = "text/javascript; charset=utf-8";

/// An embedded file of `web/`.
macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            name: $name,
            content_type: $content_type,
            body: include_bytes!(concat!("web/", $name)),
        }
    };
}

const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("widgets.js", JS),
    asset!("node.js", JS),
    asset!("engines.js", JS),
    asset!("console.js", JS),
    asset!("style.css", "text/css; charset=utf-8"),
    Asset {
        name: "preact-htm.js",
        content_type: JS,
        body: include_bytes!("web/vendor/preact-htm.js"),
    },
    Asset {
        name: "xterm.js",
        content_type: JS,
        body: include_bytes!("web/vendor/xterm.js"),
    },
    Asset {
        name: "xterm.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("web/vendor/xterm.css"),
    },
];

/// Each asset's `ETag`, in [`ASSETS`]' order.
static TAGS: LazyLock<Vec<HeaderValue>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| {
            let digest = Sha256::digest(a.body);
            HeaderValue::from_str(&format!("\"{}\"", hex::encode(&digest[..12])))
                .expect("hex is a valid header")
        })
        .collect()
});

/// `GET /dashboard`: the page.
pub async fn page(headers: HeaderMap) -> Response {
    send("index.html", &headers)
}

/// `GET /dashboard/assets/{file}`.
pub async fn file(Path(name): Path<String>, headers: HeaderMap) -> Response {
    send(&name, &headers)
}

fn send(name: &str, headers: &HeaderMap) -> Response {
    let Some(i) = ASSETS.iter().position(|a| a.name == name) else {
        return crate::api::http::error::ApiError::not_found(format!(
            "The dashboard has no file {name}."
        ))
        .into_response();
    };
    let (asset, tag) = (&ASSETS[i], TAGS[i].clone());
    let cache = (header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if headers.get(header::IF_NONE_MATCH) == Some(&tag) {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, tag), cache]).into_response();
    }
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            (header::ETAG, tag),
            cache,
        ],
        asset.body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_the_page_and_its_scripts_name_is_embedded() {
        let ours = ASSETS
            .iter()
            .filter(|a| !["preact-htm.js", "xterm.js", "xterm.css"].contains(&a.name))
            .map(|a| std::str::from_utf8(a.body).unwrap());
        for named in ours.flat_map(|text| text.split("/dashboard/assets/").skip(1)) {
            let name: String = named
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
                .collect();
            assert!(
                ASSETS.iter().any(|a| a.name == name),
                "{name} is named but not embedded"
            );
        }
    }

    #[test]
    fn a_known_tag_is_a_304_and_an_unknown_file_a_404() {
        let mut headers = HeaderMap::new();
        let fresh = send("app.js", &headers);
        assert_eq!(fresh.status(), StatusCode::OK);
        headers.insert(header::IF_NONE_MATCH, fresh.headers()[header::ETAG].clone());
        assert_eq!(send("app.js", &headers).status(), StatusCode::NOT_MODIFIED);
        assert_eq!(
            send("../Cargo.toml", &headers).status(),
            StatusCode::NOT_FOUND
        );
    }
}
