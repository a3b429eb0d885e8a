//! Debian's haproxy in front of several engines on loopback, as an operator runs engines
//! that share one store: round robin, each engine checked every 500 ms (`GET /`, given a
//! second), a call that meets a dead engine's refused connection sent to another, and a
//! call to an engine that stopped answering (a paused process) cut after 10 s of silence,
//! as a client's retry then goes elsewhere. Stopped by its pid when dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::emulators::free_tcp_port;

pub struct Balancer {
    child: Child,
    /// `http://127.0.0.1:<port>`: where clients and agents call the engines.
    pub url: String,
}

impl Balancer {
    /// haproxy on a free port of loopback, balancing over the engines at `engines`
    /// (`http://host:port` each), its configuration and log in `dir`.
    pub fn start(dir: &Path, engines: &[&str]) -> Balancer {
        std::fs::create_dir_all(dir).unwrap();
        let port = free_tcp_port();
        let servers: String = engines
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let addr = url.trim_start_matches("http://");
                format!("  server engine{i} {addr} check\n")
            })
            .collect();
        let config = format!(
            "global
  maxconn 1024
defaults
  mode http
  timeout connect 1s
  timeout client 120s
  timeout server 10s
  timeout check 1s
  retries 3
  option redispatch
frontend api
  bind 127.0.0.1:{port}
  default_backend engines
backend engines
  balance roundrobin
  option httpchk GET /
  default-server inter 500ms fall 2 rise 1
{servers}"
        );
        let file = dir.join("haproxy.cfg");
        std::fs::write(&file, config).unwrap();
        let log = std::fs::File::create(dir.join("haproxy.log")).unwrap();
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting haproxy (Debian's haproxy package)");
        let balancer = Balancer {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return balancer;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "haproxy did not listen on {port}: {}",
            std::fs::read_to_string(dir.join("haproxy.log")).unwrap_or_default()
        );
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
