//! The `leased` binary: parses flags, starts logging, and hands over to the library (`app` for
//! `leased serve`, `cli` for the client subcommands).

use std::{ffi::OsStr, io::IsTerminal, process::ExitCode};

use clap::Parser;
use leased::{
    cli::{Cli, Command},
    config::LogFormat,
    telemetry::{SPAN_TARGET, export::TraceExport},
};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::{
    EnvFilter, Layer, filter::Targets, layer::SubscriberExt, util::SubscriberInitExt,
};

// mimalloc: gRPC and Redis traffic allocate many small short-lived buffers, which glibc malloc
// serves slower (docs/src/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Libraries kept at `error` unless RUST_LOG names them: h2 warns once per frame of some kinds a
/// client can send at will (an unsolicited PING ACK: one line per 17-byte frame), and rustls
/// once per malformed handshake; leased's own throttled lines and metrics report those
/// (src/server/connections/).
const NOISY_LIBRARIES: [&str; 2] = ["h2", "rustls"];

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve(config) => {
            // The trace export is a layer of the logging's subscriber, so it starts first; a bad
            // endpoint is reported once logging is up.
            let traces = config
                .otlp_endpoint
                .as_deref()
                .map(|endpoint| TraceExport::start(endpoint, config.otlp_sample_ratio));
            init_logging(
                config.log_format,
                "info",
                traces.as_ref().and_then(|traces| traces.as_ref().ok()),
            );
            let served = match traces.transpose() {
                Ok(traces) => {
                    let served = leased::app::serve_until_signalled(*config).await;
                    if let Some(traces) = traces {
                        traces.flush().await;
                    }
                    served
                }
                Err(error) => Err(error),
            };
            match served {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!(%error, "leased failed");
                    ExitCode::FAILURE
                }
            }
        }
        client_command => {
            // Client subcommands print their results; only warnings go to the log.
            init_logging(LogFormat::Text, "warn", None);
            leased::cli::run_client(client_command).await
        }
    }
}

fn init_logging(format: LogFormat, default_level: &str, traces: Option<&TraceExport>) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let exporting = traces.is_some();
    let filter = EnvFilter::try_new(log_filter(rust_log.as_deref(), default_level, exporting))
        .unwrap_or_else(|_| EnvFilter::new(log_filter(None, default_level, exporting)));
    // The RPCs' trace spans are for the OTLP layer alone: never formatted into log lines,
    // whatever RUST_LOG enables. Without that layer the global filter turns them off
    // (`log_filter`), so they are disabled at their callsites: a per-layer filter alone would
    // leave them checked, and built, on every call.
    // Its default is RUST_LOG's most verbose level, not TRACE: the subscriber's level hint is
    // the largest of its filters', and it sets the `log` crate's static maximum, so a TRACE here
    // would send every `log::trace!` of a library (fred logs through `log`) to the filter at run
    // time, on every Redis call.
    let not_traces = Targets::new()
        .with_default(filter.max_level_hint().unwrap_or(LevelFilter::TRACE))
        .with_target(SPAN_TARGET, LevelFilter::OFF);
    let colour = log_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let log_lines = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let log_lines = match format {
        LogFormat::Text => log_lines.boxed(),
        LogFormat::Json => log_lines.json().boxed(),
    };
    // RUST_LOG's filter is global, not a filter of the log layer alone: when a per-layer filter
    // rejects something checked at run time with no event to follow (`tracing::enabled!`, a
    // library's `log_enabled!` through the `log` bridge), its "disabled" mark stays in
    // tracing-subscriber's thread-local filter state, and the next event whose call site is
    // cached as always-enabled reads that stale mark and is dropped (tokio-rs/tracing#2519).
    // A global filter that rejects clears the state instead. The one per-layer filter left,
    // the log layer's `not_traces`, rejects only trace spans; nothing asks about those at run
    // time (telemetry::store_span explains).
    let subscriber = tracing_subscriber::registry()
        .with(filter)
        .with(log_lines.with_filter(not_traces));
    // Not `.with(Option<layer>)`: a `None` layer answers "always" for every call site, and
    // above a per-layer filter that turns each call site RUST_LOG disables into one checked at
    // run time, so every `trace!` of h2 went through the filter, on every frame (about 5 % of
    // the server's CPU on `grpc_cycle@64`), and the trace spans were built to be dropped.
    match traces {
        Some(traces) => subscriber.with(traces.layer()).init(),
        None => subscriber.init(),
    }
}

/// RUST_LOG (or `default_level` when it is unset or empty), with [`NOISY_LIBRARIES`] at `error`
/// unless it names them, and the trace spans on when `exporting` and off otherwise, unless it
/// names them: the filter is global, and whether spans are made is `--otlp-endpoint`'s to say,
/// not the log level's.
fn log_filter(rust_log: Option<&str>, default_level: &str, exporting: bool) -> String {
    let mut filter = rust_log
        .filter(|directives| !directives.trim().is_empty())
        .unwrap_or(default_level)
        .to_owned();
    for library in NOISY_LIBRARIES {
        if !filter.contains(library) {
            filter.push_str(&format!(",{library}=error"));
        }
    }
    if !filter.contains(SPAN_TARGET) {
        let level = if exporting { "info" } else { "off" };
        filter.push_str(&format!(",{SPAN_TARGET}={level}"));
    }
    filter
}

/// Colour codes only help a person at a terminal; in a file or a pipe they are noise. Following
/// https://no-color.org, a non-empty `NO_COLOR` turns colour off.
fn log_colour(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The noisy libraries stay at error, and the trace spans on while exporting (for the OTLP
    /// layer) and off otherwise, whatever level RUST_LOG sets, unless it names them.
    #[test]
    fn h2_and_rustls_stay_quiet_and_trace_spans_follow_the_export_unless_named() {
        const TRACES: &str = ",leased::traces=info";
        assert_eq!(
            log_filter(None, "info", false),
            "info,h2=error,rustls=error,leased::traces=off"
        );
        assert_eq!(
            log_filter(Some("debug"), "info", false),
            "debug,h2=error,rustls=error,leased::traces=off"
        );
        assert_eq!(
            log_filter(None, "info", true),
            format!("info,h2=error,rustls=error{TRACES}")
        );
        assert_eq!(
            log_filter(Some(""), "warn", true),
            format!("warn,h2=error,rustls=error{TRACES}")
        );
        assert_eq!(
            log_filter(Some("debug"), "info", true),
            format!("debug,h2=error,rustls=error{TRACES}")
        );
        assert_eq!(
            log_filter(Some("info,h2=debug"), "info", true),
            format!("info,h2=debug,rustls=error{TRACES}")
        );
        assert_eq!(
            log_filter(Some("warn,leased::traces=off"), "info", true),
            "warn,leased::traces=off,h2=error,rustls=error"
        );
    }

    /// Colour only on a terminal, and never when NO_COLOR is set to something.
    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(log_colour(true, None));
        assert!(log_colour(true, Some(OsStr::new(""))));
        assert!(!log_colour(true, Some(OsStr::new("1"))));
        assert!(!log_colour(false, None));
    }
}
