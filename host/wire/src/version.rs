//! API microversions (`1.x`).
//!
//! deployd serves 1.1 to [`MAX`], Ironic 39's maximum, each version gated as Ironic gates
//! it. For the agents: from 1.62 lookup issues agent tokens (which deployd requires), and
//! from 1.68 agents serve HTTPS with a self-signed certificate per boot, which the engine
//! pins from `agent_verify_ca` (shown with the real IPA in `tests/real_ipa.rs`).

use std::fmt;

/// The request header that names a microversion (and the answer header that says which
/// one was served).
pub const HEADER: &str = "X-OpenStack-Ironic-API-Version";

pub const MIN: Version = Version(1);
pub const MAX: Version = Version(115);

/// A 1.x microversion; only the minor part varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.0)
    }
}

impl Version {
    pub fn at_least(self, minor: u32) -> bool {
        self.0 >= minor
    }

    /// `1.x` as written in a header or a discovery document.
    pub fn parse(text: &str) -> Option<Version> {
        let (major, minor) = text.trim().split_once('.')?;
        (major == "1").then_some(())?;
        minor.parse().ok().map(Version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_print_and_parse_as_ironic_writes_them() {
        assert_eq!(MAX.to_string(), "1.115");
        assert_eq!(Version::parse(" 1.62 "), Some(Version(62)));
        assert_eq!(Version::parse("2.1"), None);
        assert_eq!(Version::parse("1.x"), None);
        assert!(Version(62).at_least(22) && !Version(21).at_least(22));
    }
}
