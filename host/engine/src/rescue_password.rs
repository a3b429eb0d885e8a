//! A rescue password as Ironic keeps it: hashed with SHA-crypt (`$5$` SHA-256 by default,
//! `$6$` SHA-512 with `rescue_password_hash_algorithm = "sha512"`), the format `crypt(3)`,
//! `/etc/shadow` and both agents' `rescue.finalize_rescue` take. The plain text is never
//! stored: only the hash goes to the node (`instance_info.hashed_rescue_password`, shown
//! masked) and to its agent, and it is dropped when the rescue ends.

use rand::Rng;
use serde::Deserialize;

/// Where a node keeps its rescue password's hash while it is rescued (Ironic's key).
pub const HASHED: &str = "hashed_rescue_password";

/// `rescue_password_hash_algorithm` (Ironic's `[conductor]` option).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    #[default]
    Sha256,
    Sha512,
}

/// The characters of a crypt salt.
const SALT_ALPHABET: &[u8] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// `password` hashed with a fresh 16-character salt: `$5$<salt>$<hash>` (or `$6$`).
pub fn hash(password: &str, algorithm: Algorithm) -> String {
    let mut rng = rand::rng();
    let salt: String = (0..16)
        .map(|_| SALT_ALPHABET[rng.random_range(0..SALT_ALPHABET.len())] as char)
        .collect();
    with_salt(password, &salt, algorithm)
}

fn with_salt(password: &str, salt: &str, algorithm: Algorithm) -> String {
    let (id, digest) = match algorithm {
        Algorithm::Sha256 => (
            5,
            sha_crypt::sha256_crypt_b64(
                password.as_bytes(),
                salt.as_bytes(),
                &sha_crypt::Sha256Params::default(),
            ),
        ),
        Algorithm::Sha512 => (
            6,
            sha_crypt::sha512_crypt_b64(
                password.as_bytes(),
                salt.as_bytes(),
                &sha_crypt::Sha512Params::default(),
            ),
        ),
    };
    // Only rounds out of bounds fail, and the default rounds are within them.
    let digest = digest.expect("SHA-crypt with its default rounds");
    format!("${id}${salt}${digest}")
}

/// Whether `hashed` (`$5$…` or `$6$…`, default rounds) is `password`'s hash.
pub fn verify(password: &str, hashed: &str) -> bool {
    let mut parts = hashed.split('$');
    let (Some(""), Some(id), Some(salt), Some(_), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    let algorithm = match id {
        "5" => Algorithm::Sha256,
        "6" => Algorithm::Sha512,
        _ => return false,
    };
    with_salt(password, salt, algorithm) == hashed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_as_crypt_does() {
        // `busybox mkpasswd -m sha256 secret salt1234` (and glibc's crypt) give these.
        assert_eq!(
            with_salt("secret", "salt1234", Algorithm::Sha256),
            "$5$salt1234$JR6dBKbsnBZUberntG.C1thHq3lbqZS1ZQECPMdkD3/"
        );
        assert_eq!(
            with_salt("secret", "salt1234", Algorithm::Sha512),
            "$6$salt1234$XlM3TAPQpzPux1K5SXljYTSlmwnoAbsunXwwWMLH2USuV84oQBkDPWUDYWZltiv6PdqNfuqoMB4aXKHtDfWeo/"
        );
    }

    #[test]
    fn a_fresh_salt_each_time_and_the_password_verifies() {
        let a = hash("pass word", Algorithm::Sha256);
        let b = hash("pass word", Algorithm::Sha256);
        assert_ne!(a, b);
        assert!(a.starts_with("$5$") && b.starts_with("$5$"));
        assert!(verify("pass word", &a) && verify("pass word", &b));
        assert!(!verify("pass words", &a));
        let c = hash("x", Algorithm::Sha512);
        assert!(c.starts_with("$6$") && verify("x", &c) && !verify("y", &c));
        assert!(!verify("x", "not a hash"));
    }
}
