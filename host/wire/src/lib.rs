//! What crosses the wire between deployd, its clients and its ramdisk agents, in one
//! place, so the server that encodes a document and every client that decodes it agree:
//!
//! - [`version`]: API microversions, the header that carries them, and the range served;
//! - [`fault`]: Ironic's error envelope, encoded by the engine, decoded by clients;
//! - [`state_machine`]: Ironic's provision states and events, with Ironic's spelling,
//!   and the table that moves between them;
//! - [`targets`]: the provision and power targets an operator asks for;
//! - [`documents`]: Ironic's node and port documents, as clients decode them;
//! - [`agent`]: the agent protocol: heartbeats and the command API's results;
//! - [`checksum`] (feature `checksum`): the image hashes, computed by the agent on what it
//!   downloads and by the engine on what it writes itself.

/// An enum of names with Ironic's spelling: `as_str`, `Display`, `FromStr` and serde all
/// use the same text, and `ALL` lists the variants in order.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ::serde::Serialize, ::serde::Deserialize)]
        pub enum $name {
            $(#[serde(rename = $text)] $variant,)*
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text,)* }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::state_machine::UnknownName;
            fn from_str(s: &str) -> Result<Self, $crate::state_machine::UnknownName> {
                match s {
                    $($text => Ok($name::$variant),)*
                    _ => Err($crate::state_machine::UnknownName { kind: stringify!($name), name: s.to_owned() }),
                }
            }
        }
    };
}

pub mod agent;
#[cfg(feature = "checksum")]
pub mod checksum;
pub mod documents;
pub mod fault;
pub mod root_device;
pub mod state_machine;
pub mod targets;
pub mod version;
