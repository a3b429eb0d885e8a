//! What crosses the wire between deployd, its clients and its ramdisk agents, in one
//! place, so the server that encodes a document and every client that decodes it agree:
//!
//! - [`version`]: API microversions, the header that carries them, and the range served;
//! - [`fault`]: Ironic's error envelope, encoded by the engine, decoded by clients;
//! - [`agent`]: the agent protocol: heartbeats and the command API's results.

pub mod agent;
pub mod fault;
pub mod version;
