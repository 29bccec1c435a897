//! A connection past its handshake as tonic serves it: the handshake's bytes replayed, then the
//! socket; what a handler may know about it (tonic's `Connected`).

use std::{
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::certificate_subject::PeerCertificate;
use super::{cap::Slot, transport::Transport};

/// A client connection past its handshake, as tonic serves it: it replays the bytes read during
/// the handshake, then reads from the socket; it holds its place under the cap until dropped.
pub struct Connection {
    transport: Transport,
    replay: Vec<u8>,
    replayed: usize,
    _slot: Slot,
}

impl Connection {
    pub(super) fn new(transport: Transport, replay: Vec<u8>, slot: Slot) -> Self {
        Connection {
            transport,
            replay,
            replayed: 0,
            _slot: slot,
        }
    }
}

/// What a handler may know about the connection a call came on (a request extension).
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    pub tcp: TcpConnectInfo,
    /// The client certificate, on an mTLS connection: its name for the audit log (escaped) and
    /// its fingerprint.
    pub peer_certificate: Option<Arc<PeerCertificate>>,
}

impl Connected for Connection {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        let peer_certificate = match &self.transport {
            Transport::Plain(_) => None,
            Transport::Tls(stream) => stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|certificate| Arc::new(PeerCertificate::of(certificate.as_ref()))),
        };
        ConnectionInfo {
            tcp: self.transport.tcp().connect_info(),
            peer_certificate,
        }
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.replayed < this.replay.len() {
            let count = (this.replay.len() - this.replayed).min(buf.remaining());
            buf.put_slice(&this.replay[this.replayed..this.replayed + count]);
            this.replayed += count;
            if this.replayed == this.replay.len() {
                // Replayed in full: free the buffer for the connection's whole life.
                this.replay = Vec::new();
                this.replayed = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.transport).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().transport).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().transport).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.transport.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().transport).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().transport).poll_shutdown(cx)
    }
}
