//! Stopping on Ctrl-C or SIGTERM, for every long-running subcommand.

/// Resolves at the first Ctrl-C (SIGINT) or SIGTERM.
///
/// It listens from the moment it is called, not from its first poll: a signal that comes
/// while the caller is still starting (a test stopping a process it just saw answer) ends
/// the wait as soon as it is awaited, instead of killing the process unhandled.
pub fn shutdown() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("a SIGINT handler");
    async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}
