//! Config drives: what an instance learns about itself at first boot (its hostname, SSH
//! keys, network, user data), as Ironic takes them with a deploy (`configdrive`):
//!
//! - a dict (API 1.56) of `meta_data`, `network_data`, `user_data` and `vendor_data`,
//!   which the engine builds into the ISO 9660 image Nova and Ironic make (`genisoimage
//!   -J -r -V config-2`: Rock Ridge and Joliet, volume `config-2`, files under
//!   `openstack/latest/`), read by cloud-init's ConfigDrive source;
//! - a string: an http(s) url of the gzipped, base64 image (the agent downloads it), or
//!   that image itself.
//!
//! The image is kept with the deploy ([`crate::store`]'s `config_drives`, not in the node
//! record that every heartbeat reads), replaced by the next deploy and served to the
//! node's agent through the staged-image route while the deploy runs. The agent writes it
//! to a partition at the end of the disk, after the image.

use std::io::{Cursor, Read, Write};
use std::sync::Arc;

use base64::Engine;
use serde_json::{Map, Value};
use uuid::Uuid;

/// Largest config drive taken, as its base64 text (Ironic's and Nova's bound).
pub const MAX_BYTES: usize = 64 << 20;

/// A deploy's config drive, as kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigDrive {
    /// The agent downloads it from here.
    Url(String),
    /// The gzipped ISO image.
    Image(Vec<u8>),
}

/// The keys a config drive dict may have.
const KEYS: [&str; 4] = ["meta_data", "network_data", "user_data", "vendor_data"];

impl ConfigDrive {
    /// Reads a provision request's `configdrive`; the error is the operator's 400.
    pub fn from_request(value: &Value, node: Uuid) -> Result<ConfigDrive, String> {
        match value {
            Value::String(s) if s.starts_with("http://") || s.starts_with("https://") => {
                Ok(ConfigDrive::Url(s.clone()))
            }
            Value::String(s) => decode(s).map(ConfigDrive::Image),
            Value::Object(dict) => build(dict, node).map(ConfigDrive::Image),
            other => Err(format!(
                "configdrive must be a string (a url, or a gzipped and base64-encoded ISO image) or a dict, not {other}"
            )),
        }
    }

    /// As stored: a tag byte, then the url or the gzipped image.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            ConfigDrive::Url(u) => [b"u", u.as_bytes()].concat(),
            ConfigDrive::Image(gz) => [b"g", gz.as_slice()].concat(),
        }
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<ConfigDrive> {
        match bytes.split_first()? {
            (b'u', url) => Some(ConfigDrive::Url(String::from_utf8(url.to_vec()).ok()?)),
            (b'g', gz) => Some(ConfigDrive::Image(gz.to_vec())),
            _ => None,
        }
    }

    /// What the agent is sent (by url): the image as Ironic keeps it, base64 text of the
    /// gzipped ISO, which both agents decode.
    pub fn served_text(gz: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(gz)
    }
}

/// A config drive given inline: base64 (line breaks allowed) of a gzipped ISO image.
fn decode(text: &str) -> Result<Vec<u8>, String> {
    if text.len() > MAX_BYTES {
        return Err(too_large(text.len()));
    }
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|e| {
            format!("configdrive is neither a url nor base64 (of a gzipped ISO image): {e}")
        })?;
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Err(
            "configdrive is base64 but not of a gzipped image: gzip the ISO image, then base64 it"
                .into(),
        );
    }
    // The whole stream must inflate: a truncated drive fails here, not at first boot.
    let mut inflated = flate2::read::GzDecoder::new(bytes.as_slice()).take(MAX_BYTES as u64 * 4);
    std::io::copy(&mut inflated, &mut std::io::sink())
        .map_err(|e| format!("configdrive is not a valid gzip stream: {e}"))?;
    Ok(bytes)
}

fn too_large(n: usize) -> String {
    format!("configdrive is {n} bytes, more than the {MAX_BYTES} a config drive may be")
}

/// Builds the ISO image of a config drive dict, gzipped.
fn build(dict: &Map<String, Value>, node: Uuid) -> Result<Vec<u8>, String> {
    if let Some(key) = dict.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!(
            "configdrive has an unknown key {key:?}: it may have {}",
            KEYS.join(", ")
        ));
    }
    let object = |key: &str| match dict.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m.clone())),
        Some(other) => Err(format!("configdrive {key} must be a dict, not {other}")),
    };
    let mut meta = object("meta_data")?.unwrap_or_default();
    // cloud-init's ConfigDrive source needs an instance id; Ironic's default is the node.
    meta.entry("uuid")
        .or_insert_with(|| Value::String(node.to_string()));
    let mut files = vec![file("meta_data.json", json_bytes(&meta))];
    if let Some(network) = object("network_data")? {
        files.push(file("network_data.json", json_bytes(&network)));
    }
    if let Some(vendor) = object("vendor_data")? {
        files.push(file("vendor_data2.json", json_bytes(&vendor)));
    }
    match dict.get("user_data") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => files.push(file("user_data", text.as_bytes().to_vec())),
        // As Ironic: a user_data that is not text is its JSON.
        Some(other) => files.push(file("user_data", other.to_string().into_bytes())),
    }
    let size: usize = files.iter().map(file_len).sum();
    if size > MAX_BYTES {
        return Err(too_large(size));
    }
    let iso = iso(files)?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&iso)
        .and_then(|()| gz.finish())
        .map_err(|e| format!("compressing the config drive: {e}"))
}

fn json_bytes(map: &Map<String, Value>) -> Vec<u8> {
    serde_json::to_vec(map).expect("JSON serialises")
}

fn file(name: &str, contents: Vec<u8>) -> hadris_iso::write::File {
    hadris_iso::write::File::File {
        name: Arc::new(name.to_owned()),
        contents,
    }
}

fn file_len(f: &hadris_iso::write::File) -> usize {
    match f {
        hadris_iso::write::File::File { contents, .. } => contents.len(),
        hadris_iso::write::File::Directory { .. } => 0,
    }
}

/// `openstack/latest/<files>` as an ISO 9660 image with Rock Ridge (the names Linux
/// sees) and Joliet (Windows' cloudbase-init), labelled `config-2`.
fn iso(files: Vec<hadris_iso::write::File>) -> Result<Vec<u8>, String> {
    use hadris_iso::read::PathSeparator;
    use hadris_iso::write::options::{CreationFeatures, IsoFormatOptions};
    use hadris_iso::write::{File, InputFiles, IsoImageWriter};
    let dir = |name: &str, children| File::Directory {
        name: Arc::new(name.to_owned()),
        children,
    };
    let tree = InputFiles {
        path_separator: PathSeparator::ForwardSlash,
        files: vec![dir("openstack", vec![dir("latest", files)])],
    };
    let options = IsoFormatOptions {
        volume_name: "config-2".into(),
        system_id: None,
        volume_set_id: None,
        publisher_id: Some("deployd".into()),
        preparer_id: None,
        application_id: None,
        sector_size: 2048,
        path_separator: PathSeparator::ForwardSlash,
        features: CreationFeatures::extensions(),
        strict_charset: false,
    };
    let written = IsoImageWriter::create(Cursor::new(Vec::new()), tree, options)
        .map_err(|e| format!("building the config drive's ISO image: {e}"))?;
    Ok(written.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gunzip(gz: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn a_dict_becomes_a_config_2_iso_with_the_openstack_layout() {
        let node = Uuid::new_v4();
        let dict = json!({
            "meta_data": {"hostname": "web-1", "public_keys": {"k": "ssh-ed25519 AAAA test"}},
            "network_data": {"links": [], "networks": [], "services": []},
            "user_data": "#!/bin/sh\necho hi\n",
            "vendor_data": {"x": 1},
        });
        let ConfigDrive::Image(gz) = ConfigDrive::from_request(&dict, node).unwrap() else {
            panic!("a dict is built into an image");
        };
        let iso = gunzip(&gz);
        // The primary volume descriptor at sector 16: "CD001", volume id config-2.
        assert_eq!(&iso[0x8001..0x8006], b"CD001");
        assert_eq!(&iso[0x8028..0x8030], b"config-2");
        let text = String::from_utf8_lossy(&iso);
        assert!(text.contains("\"hostname\":\"web-1\""));
        assert!(
            text.contains(&node.to_string()),
            "uuid defaults to the node"
        );
        assert!(text.contains("echo hi"));
    }

    #[test]
    fn strings_are_urls_or_base64_gzip_and_anything_else_is_refused() {
        let node = Uuid::new_v4();
        let url = json!("https://store/cd.gz");
        assert_eq!(
            ConfigDrive::from_request(&url, node).unwrap(),
            ConfigDrive::Url("https://store/cd.gz".into())
        );
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"an iso").unwrap();
        let gz = gz.finish().unwrap();
        let text = ConfigDrive::served_text(&gz);
        let wrapped = format!("{}\n{}", &text[..10], &text[10..]);
        assert_eq!(
            ConfigDrive::from_request(&json!(wrapped), node).unwrap(),
            ConfigDrive::Image(gz.clone())
        );
        for (bad, words) in [
            (json!("not base64 at all!"), "neither a url nor base64"),
            (
                json!(ConfigDrive::served_text(b"plain iso")),
                "not of a gzipped image",
            ),
            (
                json!(ConfigDrive::served_text(&gz[..gz.len() - 4])),
                "not a valid gzip",
            ),
            (
                json!({"meta_data": {}, "colour": 1}),
                "unknown key \"colour\"",
            ),
            (json!({"meta_data": "x"}), "meta_data must be a dict"),
            (json!(42), "must be a string"),
            (json!("A".repeat(MAX_BYTES + 4)), "more than"),
        ] {
            let e = ConfigDrive::from_request(&bad, node).unwrap_err();
            assert!(e.contains(words), "{e}");
        }
        for drive in [ConfigDrive::Url("http://x".into()), ConfigDrive::Image(gz)] {
            assert_eq!(ConfigDrive::from_bytes(&drive.to_bytes()), Some(drive));
        }
    }
}
