//! The checksum a deploy's image must match, as an operator gives it (Ironic's rules):
//! `image_os_hash_algo` with `image_os_hash_value`, else `image_checksum` — a digest,
//! told apart by its length, or the url of a checksum file (`SHA256SUMS`, as distributions
//! publish next to their images) that has a line for the image. MD5 is refused unless the
//! engine allows it (`allow_md5_checksum`, off by default as in Ironic).

use serde_json::Value;

use crate::node::JsonMap;

/// Largest checksum file read (a distribution's SHA256SUMS is a few KiB).
const MAX_CHECKSUM_FILE: usize = 1 << 20;

/// An algorithm and the lowercase hex digest the image must hash to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    pub algo: String,
    pub value: String,
}

/// The algorithm a hex digest of this length is, as IPA tells them apart.
fn algo_of(digest: &str) -> Result<&'static str, String> {
    if digest.is_empty() || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("image checksum {digest:?} is not a hex digest"));
    }
    match digest.len() {
        32 => Ok("md5"),
        64 => Ok("sha256"),
        128 => Ok("sha512"),
        n => Err(format!(
            "image checksum {digest:?} ({n} hex digits) is not an md5, sha256 or sha512 digest"
        )),
    }
}

fn allowed(expected: Expected, allow_md5: bool) -> Result<Expected, String> {
    match expected.algo.as_str() {
        "sha256" | "sha512" => Ok(expected),
        "md5" if allow_md5 => Ok(expected),
        "md5" => Err(
            "the image's checksum is MD5, which this engine refuses: give a sha256 or \
             sha512 one (image_os_hash_algo/image_os_hash_value), or set allow_md5_checksum"
                .into(),
        ),
        other => Err(format!(
            "unsupported image_os_hash_algo {other:?}: use sha256 or sha512"
        )),
    }
}

/// Where the checksum comes from, read from instance_info without any I/O.
#[derive(Debug, PartialEq, Eq)]
pub enum Given {
    Digest(Expected),
    /// A checksum file to fetch, and the image's file name to look up in it.
    File {
        url: String,
        image: String,
    },
}

/// Reads instance_info's checksum fields. `image` is the image's file name, which a
/// checksum file's line names.
pub fn given(info: &JsonMap, image: &str, allow_md5: bool) -> Result<Given, String> {
    let text = |k: &str| {
        info.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    if let (Some(algo), Some(value)) = (text("image_os_hash_algo"), text("image_os_hash_value")) {
        let expected = Expected {
            algo: algo.to_ascii_lowercase(),
            value: value.trim().to_ascii_lowercase(),
        };
        let found = algo_of(&expected.value)?;
        if found != expected.algo && matches!(expected.algo.as_str(), "md5" | "sha256" | "sha512") {
            return Err(format!(
                "image_os_hash_value is not a {} digest (it has {} hex digits)",
                expected.algo,
                expected.value.len()
            ));
        }
        return allowed(expected, allow_md5).map(Given::Digest);
    }
    let sum = text("image_checksum").ok_or(
        "instance_info needs image_os_hash_algo and image_os_hash_value, or image_checksum",
    )?;
    if sum.starts_with("http://") || sum.starts_with("https://") {
        return Ok(Given::File {
            url: sum.to_owned(),
            image: image.to_owned(),
        });
    }
    if sum.contains("://") {
        return Err(format!(
            "image_checksum {sum:?}: a checksum file must be an http(s) url"
        ));
    }
    let value = sum.trim().to_ascii_lowercase();
    let algo = algo_of(&value)?.to_owned();
    allowed(Expected { algo, value }, allow_md5).map(Given::Digest)
}

/// Fetches a checksum file and finds the image's digest in it.
pub async fn fetch(
    http: &reqwest::Client,
    url: &str,
    image: &str,
    allow_md5: bool,
) -> Result<Expected, String> {
    let failed = |e: String| format!("image_checksum {url}: {e}");
    let mut response = http
        .get(url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| failed(e.to_string()))?;
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_CHECKSUM_FILE {
            return Err(failed(format!(
                "larger than {MAX_CHECKSUM_FILE} bytes: not a checksum file"
            )));
        }
    }
    let text = String::from_utf8(body).map_err(|_| failed("not text".into()))?;
    let value = find(&text, image).map_err(failed)?;
    let algo = algo_of(&value).map_err(failed)?.to_owned();
    allowed(Expected { algo, value }, allow_md5)
}

/// The digest for `image` in a checksum file: GNU lines (`<digest>  <name>`, `*<name>` in
/// binary mode), BSD lines (`SHA256 (<name>) = <digest>`), or a file of one bare digest.
pub fn find(text: &str, image: &str) -> Result<String, String> {
    let mut entries = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((head, digest)) = line.rsplit_once(") = ")
            && let Some((_, name)) = head.split_once(" (")
        {
            entries.push((Some(name.trim()), digest.trim()));
        } else if let Some((digest, name)) = line.split_once(char::is_whitespace) {
            entries.push((Some(name.trim().trim_start_matches('*')), digest));
        } else {
            entries.push((None, line));
        }
    }
    let base = |name: &str| name.rsplit('/').next().unwrap_or(name).to_owned();
    let named = entries
        .iter()
        .find(|(name, _)| name.is_some_and(|n| base(n) == image));
    match (named, entries.as_slice()) {
        (Some((_, digest)), _) => Ok(digest.to_ascii_lowercase()),
        (None, [(None, digest)]) => Ok(digest.to_ascii_lowercase()),
        _ => Err(format!("no line for {image:?} in the checksum file")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SHA256: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    fn info(v: Value) -> JsonMap {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn digests_are_told_apart_by_length_and_md5_is_refused_by_default() {
        let d = |sum: &str, md5| given(&info(json!({"image_checksum": sum})), "os.img", md5);
        assert_eq!(
            d(SHA256, false).unwrap(),
            Given::Digest(Expected {
                algo: "sha256".into(),
                value: SHA256.into()
            })
        );
        let md5 = "098f6bcd4621d373cade4e832627b4f6";
        let e = d(md5, false).unwrap_err();
        assert!(e.contains("MD5") && e.contains("allow_md5_checksum"), "{e}");
        assert!(matches!(d(md5, true).unwrap(), Given::Digest(e) if e.algo == "md5"));
        assert!(d("abc", false).unwrap_err().contains("3 hex digits"));
        assert!(d("zz", false).unwrap_err().contains("not a hex digest"));
        assert!(
            d("file:///etc/sums", false)
                .unwrap_err()
                .contains("http(s)")
        );
        assert_eq!(
            d("http://mirror/SHA256SUMS", false).unwrap(),
            Given::File {
                url: "http://mirror/SHA256SUMS".into(),
                image: "os.img".into()
            }
        );
    }

    #[test]
    fn os_hash_fields_win_and_must_agree_with_their_algorithm() {
        let both = info(json!({
            "image_os_hash_algo": "SHA256", "image_os_hash_value": SHA256,
            "image_checksum": "098f6bcd4621d373cade4e832627b4f6"
        }));
        assert!(
            matches!(given(&both, "x", false).unwrap(), Given::Digest(e) if e.algo == "sha256")
        );
        let wrong = info(json!({"image_os_hash_algo": "sha512", "image_os_hash_value": SHA256}));
        assert!(
            given(&wrong, "x", false)
                .unwrap_err()
                .contains("not a sha512 digest")
        );
        let sha1 = info(json!({"image_os_hash_algo": "sha1", "image_os_hash_value": SHA256}));
        assert!(given(&sha1, "x", false).unwrap_err().contains("sha1"));
        let e = given(&JsonMap::new(), "x", false).unwrap_err();
        assert!(e.contains("image_checksum"), "{e}");
    }

    #[test]
    fn checksum_files_are_read_in_the_forms_distributions_publish() {
        let gnu = format!("{}  other.img\n{SHA256} *os.img\n", "a".repeat(64));
        assert_eq!(find(&gnu, "os.img").unwrap(), SHA256);
        let bsd = format!(
            "SHA256 (other.img) = {}\nSHA256 (./os.img) = {SHA256}\n",
            "b".repeat(64)
        );
        assert_eq!(find(&bsd, "os.img").unwrap(), SHA256);
        assert_eq!(find(&format!("{SHA256}\n"), "os.img").unwrap(), SHA256);
        let e = find(&gnu, "missing.img").unwrap_err();
        assert!(e.contains("missing.img"), "{e}");
    }
}
