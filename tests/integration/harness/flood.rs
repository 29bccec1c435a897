//! Connections that never become clients, as a careless or hostile peer opens them: silent TCP
//! connections, and connections that stop after the HTTP/2 preface. Their source addresses
//! rotate over 127.0.0.2 to 127.0.0.11, so that tens of thousands fit in the ephemeral port range.

use std::{io, net::SocketAddr, time::Duration};

use futures::StreamExt;
use tokio::{
    io::AsyncWriteExt,
    net::{TcpSocket, TcpStream},
};

/// The client's HTTP/2 connection preface, alone: what a preface-only connection sends.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Loopback source addresses the connections rotate over.
const SOURCES: u8 = 10;
/// Connections being set up at once.
const CONCURRENCY: usize = 256;
/// A connection not set up within this is given up (the server's accept queue overflowed).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Opens `count` connections to `address`, each sending `first_bytes` (empty: nothing) and
/// then nothing more. Returns those that connected; the rest (refused, timed out) are dropped.
pub async fn open(address: SocketAddr, count: usize, first_bytes: &'static [u8]) -> Vec<TcpStream> {
    futures::stream::iter(0..count)
        .map(|index| async move {
            tokio::time::timeout(CONNECT_TIMEOUT, open_one(address, index, first_bytes))
                .await
                .ok()?
                .ok()
        })
        .buffer_unordered(CONCURRENCY)
        .filter_map(std::future::ready)
        .collect()
        .await
}

async fn open_one(address: SocketAddr, index: usize, first_bytes: &[u8]) -> io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    let source = [127, 0, 0, 2 + (index % SOURCES as usize) as u8];
    socket.bind((source, 0).into())?;
    let mut stream = socket.connect(address).await?;
    if !first_bytes.is_empty() {
        stream.write_all(first_bytes).await?;
    }
    Ok(stream)
}

/// Whether the server has closed `stream` (end of file or reset), without waiting.
pub fn closed_by_peer(stream: &TcpStream) -> bool {
    let mut buffer = [0u8; 64];
    match stream.try_read(&mut buffer) {
        Ok(0) => true,
        Ok(_) => false,
        Err(error) => error.kind() != io::ErrorKind::WouldBlock,
    }
}

/// How many of `streams` the server has closed.
pub fn count_closed(streams: &[TcpStream]) -> usize {
    streams
        .iter()
        .filter(|stream| closed_by_peer(stream))
        .count()
}

/// Idle connections held by a child process (`tests/integration/harness/idle_connections.py`), for
/// floods larger than this process's open-file limit allows. They close when it is dropped.
pub struct IdleConnections {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    /// How many connected.
    pub opened: usize,
}

impl IdleConnections {
    /// Opens `count` silent connections to `address` from a child process, with source
    /// addresses from 127.0.0.`first_source` (ten of them); returns once they are open.
    pub fn open(address: SocketAddr, count: usize, first_source: u8) -> io::Result<Self> {
        use std::{
            io::BufRead,
            process::{Command, Stdio},
        };
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/integration/harness/idle_connections.py"
        );
        let mut child = super::spawn(
            Command::new("python3")
                .arg(script)
                .arg(address.ip().to_string())
                .arg(address.port().to_string())
                .arg(count.to_string())
                .arg(first_source.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped()),
        )?;
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = io::BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let opened = line
            .strip_prefix("opened ")
            .and_then(|count| count.trim().parse().ok())
            .ok_or_else(|| io::Error::other(format!("idle_connections.py said {line:?}")))?;
        Ok(IdleConnections {
            child,
            stdin,
            stdout,
            opened,
        })
    }

    /// How many of them the server has closed.
    pub fn closed(&mut self) -> io::Result<usize> {
        use std::io::{BufRead, Write};
        self.stdin.write_all(b"closed\n")?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        line.trim()
            .parse()
            .map_err(|_| io::Error::other(format!("idle_connections.py said {line:?}")))
    }
}

impl Drop for IdleConnections {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
