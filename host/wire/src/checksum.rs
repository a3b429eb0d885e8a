//! Streaming image checksums (the algorithms Ironic's `os_hash_algo` may name and that
//! deployd accepts: sha256 and sha512, and md5 where the engine allows it).

use sha2::Digest;

/// Hash algorithms an image may be verified with.
pub enum Hasher {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
    Md5(md5::Md5),
}

impl Hasher {
    pub fn new(algo: &str) -> Result<Hasher, String> {
        match algo {
            "sha256" => Ok(Hasher::Sha256(sha2::Sha256::new())),
            "sha512" => Ok(Hasher::Sha512(sha2::Sha512::new())),
            "md5" => Ok(Hasher::Md5(md5::Md5::new())),
            other => Err(format!(
                "unsupported hash algorithm {other:?}: use sha256 or sha512"
            )),
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Sha512(h) => h.update(bytes),
            Hasher::Md5(h) => h.update(bytes),
        }
    }

    pub fn hex(self) -> String {
        match self {
            Hasher::Sha256(h) => hex::encode(h.finalize()),
            Hasher::Sha512(h) => hex::encode(h.finalize()),
            Hasher::Md5(h) => hex::encode(h.finalize()),
        }
    }
}
