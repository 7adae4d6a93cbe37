//! nginx inside a namespace, with a generated configuration: serves a directory
//! on given addresses and writes an access log that tests read back.
//!
//! The site's addresses on the origin host run one (the original destination and
//! the fail-open target), the unmapped web server another.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::error::{Result, io};
use crate::process::NsProcess;

/// The nginx binary (Debian's nginx-light or nginx).
pub const NGINX: &str = "/usr/sbin/nginx";

/// How long nginx gets to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The unmapped web server's page: small and distinct from the demo site.
pub const WEB_PAGE: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>Unmapped web server</title></head>\n<body><h1>Unmapped web server</h1>\
<p>Plain TCP, no SCTP origin: the gateway proxies this directly.</p></body></html>\n";

/// One line of the access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessEntry {
    /// The local address the request arrived on.
    pub server_addr: IpAddr,
    /// The peer's address.
    pub remote_addr: IpAddr,
    /// The request line, `GET /path HTTP/1.1`.
    pub request: String,
    /// The response status.
    pub status: u16,
    /// Body bytes sent.
    pub body_bytes: u64,
}

/// A running nginx; killed on drop. Its configuration and logs stay in the
/// directory it was given.
#[derive(Debug)]
pub struct Nginx {
    process: NsProcess,
    dir: PathBuf,
}

impl Nginx {
    /// Starts nginx in `ns`, serving `root` on every address of `listen`, with its
    /// configuration, pid file, temporary files and logs in `dir` (created).
    /// Returns once it accepts TCP on the first address.
    pub fn start(ns: &str, listen: &[SocketAddr], root: &Path, dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(listen, root, dir))
            .map_err(io(format!("writing {}", conf.display())))?;
        let mut command = Command::new(NGINX);
        command
            .arg("-p")
            .arg(dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(&conf);
        let mut process = NsProcess::spawn(ns, "nginx", &command, &dir.join("nginx.out"))?;
        if let Some(first) = listen.first() {
            process.wait_for_tcp(ns, *first, START_TIMEOUT)?;
        }
        Ok(Nginx {
            process,
            dir: dir.to_owned(),
        })
    }

    /// The access log, parsed; lines that do not parse are skipped.
    pub fn access_log(&self) -> Vec<AccessEntry> {
        std::fs::read_to_string(self.dir.join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(parse_access_line)
            .collect()
    }

    /// The directory holding the configuration and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process, for its pid, log and stop.
    pub fn process(&mut self) -> &mut NsProcess {
        &mut self.process
    }
}

/// Writes [`WEB_PAGE`] as `index.html` in `dir` (created) and returns `dir`.
pub fn write_web_page(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let page = dir.join("index.html");
    std::fs::write(&page, WEB_PAGE).map_err(io(format!("writing {}", page.display())))?;
    Ok(dir.to_owned())
}

/// Tab-separated so that the request line's spaces need no quoting.
const LOG_FORMAT: &str = "$server_addr\\t$remote_addr\\t$request\\t$status\\t$body_bytes_sent";

fn config(listen: &[SocketAddr], root: &Path, dir: &Path) -> String {
    let d = dir.display();
    let mut listen_lines = String::new();
    for addr in listen {
        let _ = writeln!(listen_lines, "    listen {addr};");
    }
    // One process, in the foreground, everything under `dir`: no state outside it.
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n\
         \x20 types {{ text/html html; text/css css; application/javascript js; \
         image/svg+xml svg; image/png png; image/jpeg jpg jpeg; image/gif gif; \
         font/woff2 woff2; application/octet-stream bin; }}\n\
         \x20 default_type application/octet-stream;\n\
         \x20 log_format testbed \"{LOG_FORMAT}\";\n\
         \x20 access_log {d}/access.log testbed;\n\
         \x20 client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
         \x20 fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         \x20 server {{\n{listen_lines}    root {root};\n  }}\n}}\n",
        root = root.display(),
    )
}

fn parse_access_line(line: &str) -> Option<AccessEntry> {
    let mut fields = line.split('\t');
    Some(AccessEntry {
        server_addr: fields.next()?.parse().ok()?,
        remote_addr: fields.next()?.parse().ok()?,
        request: fields.next()?.to_owned(),
        status: fields.next()?.parse().ok()?,
        body_bytes: fields.next()?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_lines_parse() {
        let entry = parse_access_line("2001:db8:203::10\t192.0.2.2\tGET /a b HTTP/1.1\t200\t17")
            .expect("parses");
        assert_eq!(entry.request, "GET /a b HTTP/1.1");
        assert_eq!(entry.status, 200);
        assert_eq!(entry.body_bytes, 17);
        assert!(parse_access_line("garbage").is_none());
    }

    #[test]
    fn config_listens_on_every_address() {
        let text = config(
            &[
                "203.0.113.10:80".parse().expect("addr"),
                "[2001:db8:203::10]:80".parse().expect("addr"),
            ],
            Path::new("/srv/site"),
            Path::new("/tmp/x"),
        );
        assert!(text.contains("listen 203.0.113.10:80;"), "{text}");
        assert!(text.contains("listen [2001:db8:203::10]:80;"), "{text}");
        assert!(text.contains("root /srv/site;"), "{text}");
        // The page corpus's types, as the origin sends them.
        for mapping in ["image/png png;", "font/woff2 woff2;", "text/css css;"] {
            assert!(text.contains(mapping), "{mapping} in {text}");
        }
    }
}
