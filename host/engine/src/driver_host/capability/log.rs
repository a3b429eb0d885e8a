//! `deployd:driver/log`: driver logs, tagged with the driver and the node.

use super::HostState;
use super::bindings::deployd::driver::log::{Host, Level};

/// Longer messages are cut: a driver must not flood the engine's log.
const MAX_MESSAGE: usize = 4096;

impl Host for HostState {
    async fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        let mut message = message;
        if message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let (driver, node) = (&self.driver, self.node);
        match level {
            Level::Debug => tracing::debug!(%driver, %node, "{message}"),
            Level::Info => tracing::info!(%driver, %node, "{message}"),
            Level::Warn => tracing::warn!(%driver, %node, "{message}"),
            Level::Error => tracing::error!(%driver, %node, "{message}"),
        }
        Ok(())
    }
}
