//! A one-member etcd (Debian's `etcd-server`, 3.4) on loopback, for the benchmarks' etcd peer.

use std::{
    fs::File,
    io::{self, Read, Write},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use super::{Owned, free_port, poll_until_async, spawn};

/// etcd with a scratch data directory and default settings otherwise (so every write is fsynced,
/// as in production); killed on drop, and its data directory removed.
pub struct EtcdServer {
    pub client_address: SocketAddr,
    data_dir: PathBuf,
    process: Owned,
}

impl EtcdServer {
    /// Starts etcd with its data and its log (`etcd.log`) in `dir`, and waits (up to 20 s) until
    /// its `/health` endpoint reports a healthy member: one that has a leader and serves writes.
    pub async fn try_start(dir: &Path) -> io::Result<Self> {
        let data_dir = dir.join(format!("etcd-data-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        let client_address = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let client_url = format!("http://{client_address}");
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        let child = spawn(
            Command::new("etcd")
                .args(["--name", "harness", "--data-dir"])
                .arg(&data_dir)
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("harness={peer_url}")])
                .stdout(Stdio::null())
                .stderr(File::create(dir.join("etcd.log"))?),
        )?;
        let server = EtcdServer {
            client_address,
            data_dir,
            process: Owned(Some(child)),
        };
        poll_until_async("etcd to report healthy", Duration::from_secs(20), || {
            std::future::ready(server.healthy())
        })
        .await?;
        Ok(server)
    }

    /// The process id, for CPU metering.
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("etcd not running")
    }

    /// `GET /health` answers `"health":"true"`.
    fn healthy(&self) -> bool {
        let get = || -> io::Result<String> {
            let mut stream =
                TcpStream::connect_timeout(&self.client_address, Duration::from_secs(1))?;
            stream.set_read_timeout(Some(Duration::from_secs(2)))?;
            stream.write_all(
                b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            )?;
            let mut response = String::new();
            stream.read_to_string(&mut response)?;
            Ok(response)
        };
        get().is_ok_and(|response| response.contains(r#""health":"true""#))
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        // Stop it before removing its data directory (`Owned` would only do so after this body).
        self.process.kill();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}
