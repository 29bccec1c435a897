//! A new connection's handshake under the deadline: TLS (on a TLS port), then sniffing the
//! HTTP/2 preface and first SETTINGS frame; why a connection failed it.

use std::{io, sync::Arc};

use tokio::{
    io::{AsyncRead, AsyncReadExt},
    net::TcpStream,
    sync::mpsc,
};
use tokio_rustls::TlsAcceptor;

use super::{
    ConnectionLimits, Connections, cap::Slot, connection::Connection, transport::Transport,
};
use crate::{
    metrics::{KindLabels, metrics},
    throttle::{LOG_INTERVAL, Throttle},
};

/// The client's HTTP/2 connection preface (RFC 9113, section 3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length of an HTTP/2 frame header.
const FRAME_HEADER_LEN: usize = 9;
/// Frame type of SETTINGS, which must be the client's first frame.
const SETTINGS_FRAME: u8 = 0x4;
/// A larger first SETTINGS frame than HTTP/2's default maximum frame size is hyper's to refuse.
const MAX_SETTINGS_LEN: usize = 16_384;

static HANDSHAKE_LOG: Throttle = Throttle::new(LOG_INTERVAL);

/// Runs one connection's handshake under the deadline and hands it to tonic if it completes.
pub(super) async fn handshake(
    connections: Arc<Connections>,
    slot: Slot,
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    ready: mpsc::Sender<Connection>,
) {
    let (entry, evicted) = connections.start_handshake();
    let deadline = connections.limits.handshake_timeout;
    let outcome = tokio::select! {
        outcome = tokio::time::timeout(deadline, complete_handshake(stream, tls)) => {
            outcome.unwrap_or(Err(HandshakeFailure::TimedOut))
        }
        Ok(()) = evicted => Err(HandshakeFailure::Evicted),
    };
    drop(entry);
    match outcome {
        Ok((transport, replay)) => {
            let connection = Connection::new(transport, replay, slot);
            // Fails only when the server stopped accepting; the connection closes then.
            let _ = ready.send(connection).await;
        }
        Err(failure) => failure.record(&connections.limits),
    }
}

async fn complete_handshake(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
) -> Result<(Transport, Vec<u8>), HandshakeFailure> {
    let mut transport = match tls {
        None => Transport::Plain(stream),
        Some(tls) => Transport::Tls(Box::new(
            tls.accept(stream).await.map_err(HandshakeFailure::Tls)?,
        )),
    };
    let received = read_preface(&mut transport).await?;
    Ok((transport, received))
}

/// Reads until the client's preface and first SETTINGS frame are in, or until the bytes show
/// that this is not an HTTP/2 client (hyper answers those itself). Returns everything read.
async fn read_preface(io: &mut (impl AsyncRead + Unpin)) -> Result<Vec<u8>, HandshakeFailure> {
    let mut received = Vec::with_capacity(512);
    while !handshake_read(&received) {
        if received.capacity() == received.len() {
            received.reserve(512);
        }
        if io
            .read_buf(&mut received)
            .await
            .map_err(HandshakeFailure::Io)?
            == 0
        {
            return Err(HandshakeFailure::Closed);
        }
    }
    Ok(received)
}

/// Whether `received` holds a whole client handshake (the preface, then a SETTINGS frame), or
/// bytes that cannot become one: then hyper must see them now and refuse them.
fn handshake_read(received: &[u8]) -> bool {
    let compared = received.len().min(PREFACE.len());
    if received[..compared] != PREFACE[..compared] {
        return true;
    }
    let Some(header) = received.get(PREFACE.len()..PREFACE.len() + FRAME_HEADER_LEN) else {
        return false;
    };
    let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    if header[3] != SETTINGS_FRAME || length > MAX_SETTINGS_LEN {
        return true;
    }
    received.len() >= PREFACE.len() + FRAME_HEADER_LEN + length
}

/// Why a connection was closed before tonic saw it.
#[derive(Debug, thiserror::Error)]
enum HandshakeFailure {
    #[error("no TLS and HTTP/2 handshake within --handshake-timeout")]
    TimedOut,
    #[error("a new connection took its place at --max-connections")]
    Evicted,
    /// Port scanners and TCP health checks do this.
    #[error("the client closed it")]
    Closed,
    #[error("TLS handshake failed: {0}")]
    Tls(io::Error),
    #[error("{0}")]
    Io(io::Error),
}

impl HandshakeFailure {
    fn kind(&self) -> &'static str {
        match self {
            HandshakeFailure::TimedOut => "timeout",
            HandshakeFailure::Evicted => "evicted",
            HandshakeFailure::Closed => "closed",
            HandshakeFailure::Tls(_) => "tls",
            HandshakeFailure::Io(_) => "io",
        }
    }

    /// Counts it, and logs the kinds that mean a client misbehaves or the cap is too low.
    fn record(&self, limits: &ConnectionLimits) {
        metrics()
            .handshake_failures
            .get_or_create(&KindLabels { kind: self.kind() })
            .inc();
        match self {
            HandshakeFailure::TimedOut | HandshakeFailure::Evicted | HandshakeFailure::Tls(_) => {
                if let Some(suppressed) = HANDSHAKE_LOG.admit() {
                    tracing::warn!(
                        reason = self.kind(),
                        error = %self,
                        handshake_timeout = ?limits.handshake_timeout,
                        max_connections = limits.max_connections,
                        suppressed,
                        "closed a connection that did not complete its handshake"
                    );
                }
            }
            HandshakeFailure::Closed | HandshakeFailure::Io(_) => {
                tracing::debug!(reason = self.kind(), error = %self, "connection closed in its handshake");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings_frame(payload_len: usize) -> Vec<u8> {
        let len = (payload_len as u32).to_be_bytes();
        let mut frame = vec![len[1], len[2], len[3], SETTINGS_FRAME, 0, 0, 0, 0, 0];
        frame.resize(FRAME_HEADER_LEN + payload_len, 0);
        frame
    }

    /// The handshake is complete only with the preface and a whole SETTINGS frame; a partial
    /// preface or frame needs more bytes.
    #[test]
    fn a_handshake_is_the_preface_and_a_whole_settings_frame() {
        let mut handshake = PREFACE.to_vec();
        handshake.extend(settings_frame(12));
        for end in 0..handshake.len() {
            assert!(!handshake_read(&handshake[..end]), "{end} bytes");
        }
        assert!(handshake_read(&handshake));
        // The client's next frames may arrive in the same read.
        handshake.extend([0, 0, 4, 8, 0, 0, 0, 0, 0]);
        assert!(handshake_read(&handshake));
        // An empty SETTINGS frame is a whole handshake too.
        let mut empty = PREFACE.to_vec();
        empty.extend(settings_frame(0));
        assert!(handshake_read(&empty));
    }

    /// Bytes that cannot become an HTTP/2 handshake go to hyper at once, which refuses them:
    /// an HTTP/1.1 request, TLS to a plaintext port, a first frame other than SETTINGS, a
    /// SETTINGS frame over the default frame size.
    #[test]
    fn bytes_that_are_not_a_handshake_go_to_hyper_at_once() {
        assert!(handshake_read(b"GET / HTTP/1.1\r\n"));
        assert!(handshake_read(&[0x16, 0x03, 0x01]));
        assert!(handshake_read(b"PRI * HTTP/1.1"));
        let mut headers_first = PREFACE.to_vec();
        headers_first.extend([0, 0, 4, 0x1, 0, 0, 0, 0, 1]);
        assert!(handshake_read(&headers_first));
        let mut oversize = PREFACE.to_vec();
        oversize.extend(&settings_frame(MAX_SETTINGS_LEN + 1)[..FRAME_HEADER_LEN]);
        assert!(handshake_read(&oversize));
    }
}
