//! Stopping on Ctrl-C or SIGTERM, for every long-running subcommand.

/// Resolves at the first Ctrl-C (SIGINT) or SIGTERM.
pub async fn shutdown() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
