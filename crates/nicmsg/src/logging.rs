//! Logging through `tracing`, filtered by `NICMSG_LOG` (e.g. `NICMSG_LOG=info` or
//! `NICMSG_LOG=nicmsg_engine=debug`), written to stderr. Off unless the variable is set, and
//! never installed over a subscriber the application set up itself.

pub fn init() {
    let Ok(filter) = std::env::var("NICMSG_LOG") else {
        return;
    };
    let filter = tracing_subscriber::EnvFilter::new(filter);
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours)
        .with_writer(std::io::stderr)
        .try_init();
}
