//! How long the accept loop pauses after an `accept` error, so that running out of file
//! descriptors does not spin a core.

use std::{io, time::Duration};

use tokio::net::{TcpListener, TcpStream};

use crate::{metrics::metrics, throttle::Throttle};

/// First and longest pause of accepting after a resource error.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How long to pause accepting after an error: not at all for an error of the one connection
/// being accepted (it is gone; take the next), else 10 ms, doubling up to 1 s while errors last.
#[derive(Debug)]
pub(in crate::server) struct AcceptBackoff {
    next: Duration,
}

impl Default for AcceptBackoff {
    fn default() -> Self {
        AcceptBackoff {
            next: ACCEPT_BACKOFF_MIN,
        }
    }
}

impl AcceptBackoff {
    pub(in crate::server) fn after(&mut self, error: &io::Error) -> Option<Duration> {
        use io::ErrorKind::*;
        if matches!(
            error.kind(),
            ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock
        ) {
            return None;
        }
        let pause = self.next;
        self.next = (self.next * 2).min(ACCEPT_BACKOFF_MAX);
        Some(pause)
    }

    pub(in crate::server) fn reset(&mut self) {
        self.next = ACCEPT_BACKOFF_MIN;
    }

    /// The next connection of `listener`, or `None` once `stop()` completes. Errors of the one
    /// connection are skipped; any other pauses accepting as [`AcceptBackoff::after`] says,
    /// counted in `leased_accept_errors_total` and logged through `log` (at most once per its
    /// interval) with the `port` it happened on.
    pub(in crate::server) async fn accept<F: Future<Output = ()>>(
        &mut self,
        listener: &TcpListener,
        log: &Throttle,
        port: &'static str,
        stop: impl Fn() -> F,
    ) -> Option<TcpStream> {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop() => return None,
            };
            let error = match accepted {
                Ok((stream, _)) => {
                    self.reset();
                    return Some(stream);
                }
                Err(error) => error,
            };
            if let Some(pause) = self.after(&error) {
                metrics().accept_errors.inc();
                if let Some(suppressed) = log.admit() {
                    tracing::warn!(%error, ?pause, suppressed, port, "cannot accept connections; pausing");
                }
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop() => return None,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors of the connection being accepted are skipped at once; resource errors pause
    /// accepting, doubling up to a second, until an accept succeeds.
    #[test]
    fn accept_pauses_only_on_resource_errors_and_backs_off() {
        let mut backoff = AcceptBackoff::default();
        let aborted = io::Error::from(io::ErrorKind::ConnectionAborted);
        assert_eq!(backoff.after(&aborted), None);
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        let pauses: Vec<_> = (0..9).map(|_| backoff.after(&emfile).unwrap()).collect();
        assert_eq!(pauses[0], Duration::from_millis(10));
        assert_eq!(pauses[1], Duration::from_millis(20));
        assert_eq!(pauses[6], Duration::from_millis(640));
        assert_eq!(pauses[7], Duration::from_secs(1));
        assert_eq!(pauses[8], Duration::from_secs(1));
        backoff.reset();
        let enfile = io::Error::from_raw_os_error(libc::ENFILE);
        assert_eq!(backoff.after(&enfile), Some(Duration::from_millis(10)));
    }
}
