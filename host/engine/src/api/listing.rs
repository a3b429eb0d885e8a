//! Lists of small resources (ports, chassis, port groups, …): Ironic's query parameters
//! (`fields`, `detail`, `limit`, `marker`, sorting by uuid, per-resource filters) and the
//! `{"<key>": [...], "next": …}` answer.

use std::io::Write;

use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::http::error::ApiError;
use super::http::version::Version;
use super::schema::{self, Schema};

const MAX_LIMIT: usize = 1000;

/// The query of a show: `?fields=a,b`.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ShowQuery {
    pub fields: Option<String>,
}

/// A parsed list query.
pub struct Params {
    pub fields: Option<Vec<String>>,
    pub detail: bool,
    limit: usize,
    marker: Option<Uuid>,
    /// The filters given, by name, as the client wrote them.
    pub filters: Vec<(String, String)>,
    raw: Vec<(String, String)>,
}

impl Params {
    /// `filters` names the filters this list takes, each with the microversion it came
    /// with; anything else (but the common parameters) is a 400.
    pub fn parse(
        pairs: Vec<(String, String)>,
        schema: &Schema,
        filters: &[(&str, u32)],
        version: Version,
        detail_path: bool,
    ) -> Result<Params, ApiError> {
        let mut p = Params {
            fields: None,
            detail: detail_path,
            limit: MAX_LIMIT,
            marker: None,
            filters: Vec::new(),
            raw: pairs.clone(),
        };
        for (k, v) in pairs {
            match k.as_str() {
                "fields" => {
                    p.fields = Some(
                        schema
                            .fields(&v, version)?
                            .into_iter()
                            .map(str::to_owned)
                            .collect(),
                    )
                }
                "detail" => {
                    p.detail |= schema::parse_bool(&json!(v)).ok_or_else(|| {
                        ApiError::bad_request(format!("Invalid value for detail: {v}"))
                    })?
                }
                "limit" => {
                    let n: usize = v.parse().map_err(|_| {
                        ApiError::bad_request(format!(
                            "Limit must be a non-negative integer, got '{v}'"
                        ))
                    })?;
                    p.limit = if n == 0 { MAX_LIMIT } else { n.min(MAX_LIMIT) };
                }
                "marker" => {
                    p.marker = Some(Uuid::parse_str(&v).map_err(|_| {
                        ApiError::bad_request(format!("Expected UUID for marker: {v}"))
                    })?)
                }
                "sort_key" if v != "uuid" && v != "id" && v != "created_at" => {
                    return Err(ApiError::bad_request(format!(
                        "The sort_key value \"{v}\" is not supported; deployd sorts by uuid."
                    )));
                }
                "sort_dir" if v != "asc" => {
                    return Err(ApiError::bad_request("Only sort_dir=asc is supported."));
                }
                "sort_key" | "sort_dir" => {}
                name => match filters.iter().find(|(f, _)| *f == name) {
                    Some((_, since)) if version.at_least(*since) => p.filters.push((k, v)),
                    Some((_, since)) => {
                        return Err(ApiError::not_acceptable(format!(
                            "The filter \"{name}\" needs API version 1.{since} or newer."
                        )));
                    }
                    None => {
                        return Err(ApiError::bad_request(format!(
                            "Unknown argument: \"{name}\""
                        )));
                    }
                },
            }
        }
        if detail_path && p.fields.is_some() {
            return Err(ApiError::bad_request(
                "Can not specify ?detail=True and fields in the same request.",
            ));
        }
        Ok(p)
    }

    /// The value of a filter, if given.
    pub fn filter(&self, name: &str) -> Option<&str> {
        self.filters
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The uuid a page starts after.
    pub fn marker(&self) -> Option<Uuid> {
        self.marker
    }

    /// Writes `{"<key>": [...]}` from documents in uuid order, one at a time: after the
    /// marker, at most `limit`, each cut to `fields` (or to `short` unless `detail`), with
    /// a `next` link when full. A write that fails means the client left: it stops there.
    pub fn write(
        &self,
        out: &mut impl Write,
        key: &str,
        docs: impl IntoIterator<Item = Result<(Uuid, Map<String, Value>), ApiError>>,
        short: &[&str],
        next_base: &str,
    ) -> Result<(), ApiError> {
        if write!(out, "{{{}: [", json!(key)).is_err() {
            return Ok(());
        }
        let (mut count, mut last) = (0, None);
        for item in docs {
            let (uuid, doc) = item?;
            if self.marker.is_some_and(|m| uuid <= m) {
                continue;
            }
            let doc = match (&self.fields, self.detail) {
                (Some(f), _) => keep(doc, f.iter().map(String::as_str)),
                (None, true) => doc,
                (None, false) => keep(doc, short.iter().copied()),
            };
            let sent = (count == 0 || out.write_all(b", ").is_ok())
                && serde_json::to_writer(&mut *out, &doc).is_ok();
            if !sent {
                return Ok(());
            }
            count += 1;
            last = Some(uuid);
            if count == self.limit {
                break;
            }
        }
        let mut tail = String::from("]");
        if let (true, Some(last)) = (count == self.limit, last) {
            let mut parts = vec![format!("limit={}", self.limit), format!("marker={last}")];
            parts.extend(
                self.raw
                    .iter()
                    .filter(|(k, _)| k != "limit" && k != "marker")
                    .map(|(k, v)| format!("{k}={}", v.replace(' ', "%20"))),
            );
            let next = format!("{next_base}?{}", parts.join("&"));
            tail.push_str(&format!(", \"next\": {}", json!(next)));
        }
        tail.push('}');
        let _ = out.write_all(tail.as_bytes());
        Ok(())
    }
}

/// Only the named fields of a document.
pub fn keep<'a>(
    doc: Map<String, Value>,
    fields: impl IntoIterator<Item = &'a str>,
) -> Map<String, Value> {
    let fields: Vec<&str> = fields.into_iter().collect();
    doc.into_iter()
        .filter(|(k, _)| fields.contains(&k.as_str()))
        .collect()
}
