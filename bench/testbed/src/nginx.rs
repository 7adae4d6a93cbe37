//! nginx inside a namespace, with a generated configuration: serves a directory
//! on given addresses and writes an access log that tests read back.
//!
//! The site's addresses on the origin host run one (the original destination and
//! the fail-open target), the unmapped web server another. [`Nginx::start_tls`]
//! is the page-load benchmark's "HTTPS with HTTP/2" alternative: the same site
//! over TLS with a fresh self-signed certificate for the listen addresses, and
//! the [`TlsSite`] a client needs to trust exactly that certificate.
//!
//! Both variants use the settings a production nginx has (sendfile, keep-alive;
//! for TLS a session cache and TLS 1.3), so that a comparison with them is fair.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;

use crate::error::{Result, TestbedError, io};
use crate::netns::run;
use crate::process::NsProcess;

/// The nginx binary (Debian's nginx-light or nginx).
pub const NGINX: &str = "/usr/sbin/nginx";

/// The `openssl` command-line tool, which makes the TLS variant's certificate.
pub const OPENSSL: &str = "openssl";

/// How long nginx gets to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Validity of the generated certificate, in days: longer than any run, short
/// enough that a leaked one is worthless soon.
const CERT_DAYS: u32 = 7;

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
        Self::spawn(ns, listen, &config(listen, root, dir, None), dir)
    }

    /// Starts nginx in `ns` serving `root` over TLS with HTTP/2 (and HTTP/1.1 for
    /// clients that do not offer h2 in ALPN) on every address of `listen`. A fresh
    /// self-signed certificate whose subjectAltName holds the listen IP addresses
    /// is generated into `dir` first (the site is dialled by address). Everything
    /// else is as in [`Nginx::start`]. Returns once nginx accepts TCP on the first
    /// address, with what a client needs to trust the certificate.
    pub fn start_tls(
        ns: &str,
        listen: &[SocketAddr],
        root: &Path,
        dir: &Path,
    ) -> Result<(Self, TlsSite)> {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        let mut ips: Vec<IpAddr> = Vec::new();
        for addr in listen {
            if !ips.contains(&addr.ip()) {
                ips.push(addr.ip());
            }
        }
        let site = TlsSite::generate(&ips, dir)?;
        let nginx = Self::spawn(ns, listen, &config(listen, root, dir, Some(&site)), dir)?;
        Ok((nginx, site))
    }

    /// Starts nginx in `ns` with the caller's own configuration `text` (written
    /// to `dir/nginx.conf`; `dir` is created and is nginx's prefix), for a
    /// benchmark whose figures depend on settings of its own. Returns once nginx
    /// accepts TCP on the first address of `listen`.
    pub fn start_with_config(
        ns: &str,
        listen: &[SocketAddr],
        text: &str,
        dir: &Path,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        Self::spawn(ns, listen, text, dir)
    }

    fn spawn(ns: &str, listen: &[SocketAddr], text: &str, dir: &Path) -> Result<Self> {
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, text).map_err(io(format!("writing {}", conf.display())))?;
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
        read_log(&self.dir.join("access.log"), parse_access_line)
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

/// A self-signed certificate made for one TLS nginx, and how to trust it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSite {
    /// The certificate, PEM: what `curl --cacert` takes.
    pub cert: PathBuf,
    /// Its private key (ECDSA P-256), PEM, unencrypted.
    pub key: PathBuf,
    /// SHA-256 of the certificate's DER SubjectPublicKeyInfo, base64: the pin
    /// Chromium's `--ignore-certificate-errors-spki-list` takes.
    pub spki_sha256_base64: String,
}

impl TlsSite {
    /// Generates a key and a self-signed certificate valid for `ips` (as
    /// subjectAltName IP entries; the first is also the subject's CN) into
    /// `cert.pem` and `key.pem` in `dir`, with the `openssl` tool: it is on
    /// every machine that has nginx, and it keeps a crypto library out of the
    /// workspace's build.
    pub fn generate(ips: &[IpAddr], dir: &Path) -> Result<Self> {
        let first = ips.first().ok_or_else(|| TestbedError::Config {
            path: dir.to_owned(),
            what: "a TLS certificate needs at least one address".into(),
        })?;
        let san: Vec<String> = ips.iter().map(|ip| format!("IP:{ip}")).collect();
        Self::generate_with(&first.to_string(), &san.join(","), dir)
    }

    /// [`TlsSite::generate`] for a server name instead of addresses: the
    /// certificate an HTTPS origin holds for a site (`name` as its CN and its
    /// one subjectAltName DNS entry), into `cert.pem` and `key.pem` in `dir`
    /// (created).
    pub fn generate_for_name(name: &str, dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        Self::generate_with(name, &format!("DNS:{name}"), dir)
    }

    /// The certificate with subject CN `common_name` and the subjectAltName
    /// list `san` (openssl's syntax), and its SPKI pin.
    fn generate_with(common_name: &str, san: &str, dir: &Path) -> Result<Self> {
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        // A leaf, not a CA (what `req -x509` makes by default), so that a
        // browser sees what a real site would send.
        run(Command::new(OPENSSL)
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .arg("ec_paramgen_curve:prime256v1")
            .args(["-nodes", "-days", &CERT_DAYS.to_string(), "-subj"])
            .arg(format!("/CN={common_name}"))
            .arg("-addext")
            .arg(format!("subjectAltName={san}"))
            .args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .args(["-addext", "keyUsage=critical,digitalSignature"])
            .args(["-addext", "extendedKeyUsage=serverAuth"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert))?;
        let spki_sha256_base64 = spki_pin(&key, &dir.join("spki.der"))?;
        Ok(TlsSite {
            cert,
            key,
            spki_sha256_base64,
        })
    }

    /// Chromium flags that make it trust this certificate and no other
    /// untrusted one: the SPKI pin. (Chromium honours the flag only with its
    /// own `--user-data-dir`, which [`Browser`](crate::Browser) always gives.)
    pub fn chromium_args(&self) -> Vec<String> {
        vec![format!(
            "--ignore-certificate-errors-spki-list={}",
            self.spki_sha256_base64
        )]
    }
}

/// SHA-256 of the DER SubjectPublicKeyInfo of the PEM private key `key`,
/// base64 (Chromium's pin); the DER is written to `spki`.
fn spki_pin(key: &Path, spki: &Path) -> Result<String> {
    run(Command::new(OPENSSL)
        .args(["pkey", "-pubout", "-outform", "DER", "-in"])
        .arg(key)
        .arg("-out")
        .arg(spki))?;
    // `-r` prints `HEX *FILE`: text, where `-binary` would not survive the
    // UTF-8 conversion of the output.
    let digest = run(Command::new(OPENSSL)
        .args(["dgst", "-sha256", "-r"])
        .arg(spki))?;
    let hex = digest.split_whitespace().next().unwrap_or_default();
    let bytes = decode_hex(hex).ok_or_else(|| TestbedError::Config {
        path: spki.to_owned(),
        what: format!("`openssl dgst -sha256 -r` printed no SHA-256: {digest:?}"),
    })?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// `hex` as 32 bytes, if it is 64 hex digits.
fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
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

/// The TLS settings: what Mozilla's "intermediate" profile and Debian's
/// defaults have. A shared session cache lets a returning browser resume
/// without a full handshake, as it would against a real server.
const TLS_SETTINGS: &str = "    ssl_protocols TLSv1.2 TLSv1.3;\n\
    ssl_prefer_server_ciphers off;\n\
    ssl_session_cache shared:testbed_tls:10m;\n\
    ssl_session_timeout 1d;\n\
    ssl_session_tickets off;\n";

fn config(listen: &[SocketAddr], root: &Path, dir: &Path, tls: Option<&TlsSite>) -> String {
    let d = dir.display();
    let mut server = String::new();
    for addr in listen {
        // nginx 1.22 (Debian bookworm) knows only the `listen ... http2`
        // parameter; the `http2 on;` directive came with 1.25.1.
        let params = if tls.is_some() { " ssl http2" } else { "" };
        let _ = writeln!(server, "    listen {addr}{params};");
    }
    if let Some(site) = tls {
        let _ = write!(
            server,
            "    ssl_certificate {};\n    ssl_certificate_key {};\n{TLS_SETTINGS}",
            site.cert.display(),
            site.key.display()
        );
    }
    // One process, in the foreground, everything under `dir`: no state outside
    // it. sendfile, tcp_nopush and keep-alive are Debian's shipped defaults.
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n\
         \x20 types {{ text/html html; text/css css; application/javascript js; \
         image/svg+xml svg; image/png png; image/jpeg jpg jpeg; image/gif gif; \
         font/woff2 woff2; application/octet-stream bin; }}\n\
         \x20 default_type application/octet-stream;\n\
         \x20 sendfile on; tcp_nopush on; keepalive_timeout 65;\n\
         \x20 log_format testbed \"{LOG_FORMAT}\";\n\
         \x20 access_log {d}/access.log testbed;\n\
         \x20 client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
         \x20 fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         \x20 server {{\n{server}    root {root};\n  }}\n}}\n",
        root = root.display(),
    )
}

/// The lines of the log at `path` that `parse` understands; none if it is
/// missing (the server has not written it yet).
pub(crate) fn read_log<T>(path: &Path, parse: fn(&str) -> Option<T>) -> Vec<T> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(parse)
        .collect()
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
            None,
        );
        assert!(text.contains("listen 203.0.113.10:80;"), "{text}");
        assert!(text.contains("listen [2001:db8:203::10]:80;"), "{text}");
        assert!(text.contains("root /srv/site;"), "{text}");
        assert!(!text.contains("ssl"), "{text}");
        // The page corpus's types, as the origin sends them.
        for mapping in ["image/png png;", "font/woff2 woff2;", "text/css css;"] {
            assert!(text.contains(mapping), "{mapping} in {text}");
        }
    }

    #[test]
    fn tls_config_has_http2_and_the_certificate() {
        let site = TlsSite {
            cert: "/tmp/x/cert.pem".into(),
            key: "/tmp/x/key.pem".into(),
            spki_sha256_base64: String::new(),
        };
        let text = config(
            &["[2001:db8:203::10]:443".parse().expect("addr")],
            Path::new("/srv/site"),
            Path::new("/tmp/x"),
            Some(&site),
        );
        assert!(
            text.contains("listen [2001:db8:203::10]:443 ssl http2;"),
            "{text}"
        );
        assert!(text.contains("ssl_certificate /tmp/x/cert.pem;"), "{text}");
        assert!(
            text.contains("ssl_certificate_key /tmp/x/key.pem;"),
            "{text}"
        );
        assert!(text.contains("TLSv1.3"), "{text}");
    }

    #[test]
    fn hex_digests_decode() {
        let hex = "59d1bbb57f4fd49b8bbaaec5b68490136c98f3bc20abdc38dcaf8e2c7231dcb5";
        let bytes = decode_hex(hex).expect("decodes");
        assert_eq!(bytes.len(), 32);
        assert_eq!(bytes[0], 0x59);
        assert_eq!(bytes[31], 0xb5);
        assert!(decode_hex("59d1").is_none());
        assert!(decode_hex(&"zz".repeat(32)).is_none());
    }
}
