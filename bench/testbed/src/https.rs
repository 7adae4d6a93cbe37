//! HTTPS in the demo (issue 19, docs/gateway.md "HTTPS"): the site also under
//! a name, [`SITE_NAME`], that the origin holds a certificate for, made at
//! start. The gateway intercepts port 443 for the site's addresses, reads the
//! ClientHello's server name, checks it against the address dialled (it
//! resolves the name through its namespace's hosts file, [`NamespaceHosts`])
//! and tunnels the TLS bytes on a data stream to the origin, which terminates
//! TLS. The gateway holds no certificate: a browser trusts the origin's.
//!
//! [`DemoHttps`] is what a [`Demo`](crate::Demo) started with
//! [`DemoOptions::https`](crate::DemoOptions::https) keeps: the certificate,
//! its SPKI pin, the curl and Chromium arguments that trust exactly it, and
//! an nginx serving the site over TLS on the site's addresses (its own
//! certificate, for those addresses): what a browser reaches without the
//! gateway, and where every HTTPS fallback lands.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::error::{Result, TestbedError, io};
use crate::netns::NamespaceHosts;
use crate::nginx::{Nginx, TlsSite};

/// The site's name over HTTPS; the origin's certificate carries it, and the
/// gateway's namespace resolves it to the site's addresses.
pub const SITE_NAME: &str = "site.test";

/// The TLS port the demo's gateway intercepts for the site's addresses.
pub const TLS_PORT: u16 = 443;

/// The demo's HTTPS: the origin's certificate for [`SITE_NAME`], the
/// site's TLS nginx and the gateway namespace's hosts file (removed on drop).
#[derive(Debug)]
pub struct DemoHttps {
    /// The certificate the origin terminates TLS with, and its pin.
    pub tls: TlsSite,
    /// The origin's configuration with `[[tls.certificates]]` for the name.
    pub origin_config: PathBuf,
    /// nginx with TLS (HTTP/2) on the site's addresses, port [`TLS_PORT`],
    /// started by [`DemoHttps::start_direct`]: the original destination.
    pub direct: Option<Nginx>,
    /// That nginx's own certificate (for the site's addresses, not its name)
    /// and how to trust it.
    pub direct_tls: Option<TlsSite>,
    _hosts: NamespaceHosts,
}

impl DemoHttps {
    /// Makes the certificate in `dir/site-tls/`, writes `dir/origin.toml`
    /// (`base` with an absolute `files.root` of `root` and a
    /// `[[tls.certificates]]` entry for [`SITE_NAME`]) and gives namespace
    /// `gateway_ns` a hosts file with [`SITE_NAME`] at `site_ips` and
    /// `more_hosts`. With `h2`, the origin offers HTTP/2 on its tunnels
    /// (`tls.h2`).
    pub(crate) fn prepare(
        base: &Path,
        root: &Path,
        dir: &Path,
        gateway_ns: &str,
        site_ips: &[IpAddr],
        more_hosts: &[(IpAddr, String)],
        h2: bool,
    ) -> Result<Self> {
        let tls = TlsSite::generate_for_name(SITE_NAME, &dir.join("site-tls"))?;
        let origin_config = dir.join("origin.toml");
        write_origin_config(base, root, &tls, h2, &origin_config)?;
        let mut entries: Vec<(IpAddr, String)> = site_ips
            .iter()
            .map(|ip| (*ip, SITE_NAME.to_owned()))
            .collect();
        entries.extend_from_slice(more_hosts);
        let hosts = NamespaceHosts::write(gateway_ns, &entries)?;
        Ok(DemoHttps {
            tls,
            origin_config,
            direct: None,
            direct_tls: None,
            _hosts: hosts,
        })
    }

    /// Starts [`DemoHttps::direct`] in namespace `ns` on `ips`, serving
    /// `root`, its files in `dir`.
    pub(crate) fn start_direct(
        &mut self,
        ns: &str,
        ips: &[IpAddr],
        root: &Path,
        dir: &Path,
    ) -> Result<()> {
        let (nginx, tls) = Nginx::start_tls(ns, &tls_addresses(ips), root, dir)?;
        self.direct = Some(nginx);
        self.direct_tls = Some(tls);
        Ok(())
    }

    /// `https://site.test{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{SITE_NAME}{path}")
    }

    /// curl's arguments that send [`SITE_NAME`] to `ip` and trust the
    /// origin's certificate only.
    pub fn curl_args(&self, ip: IpAddr) -> Vec<String> {
        vec![
            "--resolve".into(),
            format!("{SITE_NAME}:{TLS_PORT}:{}", bracketed(ip)),
            "--cacert".into(),
            self.tls.cert.display().to_string(),
        ]
    }

    /// Chromium's flags that resolve [`SITE_NAME`] to `ip` (the client
    /// namespace has no DNS) and trust the origin's certificate by its key,
    /// as the page-load benchmark trusts its TLS nginx.
    pub fn chromium_args(&self, ip: IpAddr) -> Vec<String> {
        let mut args = self.tls.chromium_args();
        args.push(format!(
            "--host-resolver-rules=MAP {SITE_NAME} {}",
            bracketed(ip)
        ));
        args
    }
}

/// `ip` as a URL or `--resolve` host: IPv6 in brackets.
fn bracketed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// The site's HTTPS addresses: `ips` on [`TLS_PORT`].
pub fn tls_addresses(ips: &[IpAddr]) -> Vec<SocketAddr> {
    ips.iter()
        .map(|ip| SocketAddr::new(*ip, TLS_PORT))
        .collect()
}

/// Writes `base` (an origin.toml) to `out` with `files.root` set to `root`
/// (absolute: `out` is elsewhere than `base`) and `[[tls.certificates]]`
/// holding `tls` for [`SITE_NAME`]; the base's other `[tls]` keys are kept,
/// and `h2 = true` set when `h2`.
fn write_origin_config(
    base: &Path,
    root: &Path,
    tls: &TlsSite,
    h2: bool,
    out: &Path,
) -> Result<()> {
    let text = std::fs::read_to_string(base).map_err(io(format!("reading {}", base.display())))?;
    let bad = |what: String| TestbedError::Config {
        path: base.to_owned(),
        what,
    };
    let mut table: toml::Table = text.parse().map_err(|e| bad(format!("{e}")))?;
    let files = table
        .get_mut("files")
        .and_then(toml::Value::as_table_mut)
        .ok_or_else(|| bad("no [files] table (an HTTPS demo serves files)".into()))?;
    files.insert("root".into(), root.display().to_string().into());
    let mut entry = toml::Table::new();
    entry.insert("names".into(), vec![SITE_NAME.to_owned()].into());
    entry.insert("cert".into(), tls.cert.display().to_string().into());
    entry.insert("key".into(), tls.key.display().to_string().into());
    // Other `[tls]` keys of the base (`h2`) stay; its certificates are replaced.
    let section = table
        .entry("tls")
        .or_insert_with(|| toml::Table::new().into())
        .as_table_mut()
        .ok_or_else(|| bad("tls is not a table".into()))?;
    section.insert(
        "certificates".into(),
        toml::Value::Array(vec![entry.into()]),
    );
    if h2 {
        section.insert("h2".into(), true.into());
    }
    let body = toml::to_string(&table).map_err(|e| bad(format!("{e}")))?;
    let text = format!(
        "# Generated by the testbed from {} with a [tls] certificate for {SITE_NAME}.\n\n{body}",
        base.display()
    );
    std::fs::write(out, text).map_err(io(format!("writing {}", out.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_config_gets_an_absolute_root_and_the_certificate() -> Result<()> {
        let dir = tempfile::tempdir().map_err(io("tempdir"))?;
        let base = dir.path().join("base.toml");
        std::fs::write(
            &base,
            "[files]\nroot = \"demo-site\"\n[log]\nlevel = \"info\"\n",
        )
        .map_err(io("writing"))?;
        let tls = TlsSite {
            cert: "/c/cert.pem".into(),
            key: "/c/key.pem".into(),
            spki_sha256_base64: "pin".into(),
        };
        let out = dir.path().join("out.toml");
        write_origin_config(&base, Path::new("/srv/site"), &tls, true, &out)?;
        let text = std::fs::read_to_string(&out).map_err(io("reading"))?;
        let table: toml::Table = text.parse().map_err(|e| TestbedError::Config {
            path: out.clone(),
            what: format!("{e}"),
        })?;
        assert_eq!(table["files"]["root"].as_str(), Some("/srv/site"));
        assert_eq!(table["log"]["level"].as_str(), Some("info"));
        let entry = &table["tls"]["certificates"][0];
        assert_eq!(entry["names"][0].as_str(), Some(SITE_NAME));
        assert_eq!(entry["cert"].as_str(), Some("/c/cert.pem"));
        assert_eq!(table["tls"]["h2"].as_bool(), Some(true));
        assert_eq!(entry["key"].as_str(), Some("/c/key.pem"));

        std::fs::write(&base, "[upstream]\naddress = \"x\"\n").map_err(io("writing"))?;
        let error = write_origin_config(&base, Path::new("/srv"), &tls, false, &out)
            .expect_err("no [files]")
            .to_string();
        assert!(error.contains("no [files] table"), "{error}");
        Ok(())
    }

    #[test]
    fn curl_and_chromium_reach_the_name_at_either_family() {
        let ip6: IpAddr = "2001:db8:203::10".parse().expect("an address");
        assert_eq!(bracketed(ip6), "[2001:db8:203::10]");
        assert_eq!(bracketed([203, 0, 113, 10].into()), "203.0.113.10");
    }
}
