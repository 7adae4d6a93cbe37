//! `103 Early Hints` inside a terminated TLS tunnel (`tls.early_hints`,
//! docs/origin.md "Early Hints"), over a real association: an h2 client at
//! the browser's end of a tunnel asks for a page and sees a 103 with the
//! `Link` values of what the handler names for it, before the 200; an
//! image, a page whose hints come too late, `early_hints` off and HTTP/1.1
//! get none; a body error resets only its own stream.

use std::future::poll_fn;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use gateway_transport::BackendKind;
use origin::closure::ClosureConfig;
use origin::files::{FilesConfig, StaticFiles};
use origin::server::{BodySource, Handler, IncomingRequest, PushTarget, Reply};
use origin::service::Service;
use origin::synthetic::pattern_byte;
use origin::tls::{TlsConfig, Tunnels};
use page_resources::Kind;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

mod support;
use support::tunnel::{SITE, carry, site_certificate, start, tls_client};

const TIMEOUT: Duration = Duration::from_secs(30);
/// Larger than an h2 client's initial stream window (64 KiB), so the page
/// goes out as the window opens.
const PAGE_LEN: usize = 200_000;
const NAVIGATION_ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,\
    image/avif,image/webp,*/*;q=0.8";

/// What the 103 for `/page.html` carries: the usable targets the handler
/// names, in its order, `as` by kind.
const PAGE_LINKS: [&str; 5] = [
    "</style.css>; rel=preload; as=style",
    "</app.js>; rel=preload; as=script",
    "</font.woff2>; rel=preload; as=font; crossorigin",
    "</hero.jpg>; rel=preload; as=image",
    "</data.json>; rel=preload; as=fetch; crossorigin",
];

/// How the test site answers `Handler::pushes`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Naming {
    /// At once; the page's reply waits until its targets are named, so the
    /// 103 cannot lose the race with the 200.
    BeforeTheReply,
    /// At once; the reply does not wait (pushes must not be asked).
    Unasked,
    /// Never: the reply must not wait for it beyond the origin's bound.
    Never,
}

/// A site of `/page.html` (HTML), `/img.png`, and `/broken` (a body that
/// fails after its first chunk).
struct Site {
    naming: Naming,
    asked: AtomicUsize,
    named: Semaphore,
}

impl Site {
    fn new(naming: Naming) -> Arc<Self> {
        Arc::new(Self {
            naming,
            asked: AtomicUsize::new(0),
            named: Semaphore::new(0),
        })
    }
}

enum SiteBody {
    Bytes(Bytes),
    Broken { sent: bool },
}

impl BodySource for SiteBody {
    async fn next_chunk(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        match self {
            SiteBody::Bytes(bytes) => bytes.next_chunk(max).await,
            SiteBody::Broken { sent: false } => {
                *self = SiteBody::Broken { sent: true };
                Ok(Some(Bytes::from(vec![b'x'; 1000])))
            }
            SiteBody::Broken { sent: true } => Err(io::Error::other("the disk went away")),
        }
    }
}

fn target_of(request: &IncomingRequest) -> String {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Request::new(&mut fields);
    let _ = parsed.parse(&request.request.head);
    parsed.path.unwrap_or_default().to_owned()
}

fn page_body() -> Bytes {
    (0..PAGE_LEN as u64).map(pattern_byte).collect()
}

impl Handler for Site {
    type Body = SiteBody;

    async fn handle(&self, request: IncomingRequest) -> Reply<SiteBody> {
        let reply = |head: &str, body: SiteBody, len: Option<u64>| Reply {
            head: Bytes::from(head.to_owned()),
            body_len: len,
            body,
        };
        match target_of(&request).as_str() {
            "/page.html" => {
                if self.naming == Naming::BeforeTheReply
                    && let Ok(permit) = self.named.acquire().await
                {
                    permit.forget();
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {PAGE_LEN}\r\n\r\n"
                );
                reply(&head, SiteBody::Bytes(page_body()), Some(PAGE_LEN as u64))
            }
            "/img.png" => reply(
                "HTTP/1.1 200 OK\r\ncontent-type: image/png\r\ncontent-length: 100\r\n\r\n",
                SiteBody::Bytes(Bytes::from(vec![7; 100])),
                Some(100),
            ),
            "/broken" => reply(
                "HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n",
                SiteBody::Broken { sent: false },
                Some(100_000),
            ),
            _ => reply(
                "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
                SiteBody::Bytes(Bytes::new()),
                Some(0),
            ),
        }
    }

    async fn pushes(&self, page: &IncomingRequest) -> Vec<PushTarget> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if self.naming == Naming::Never {
            std::future::pending::<()>().await;
        }
        let targets = if target_of(page) == "/page.html" {
            let named = |target: &str, kind: Option<Kind>| PushTarget {
                target: target.to_owned(),
                render_blocking: matches!(kind, Some(Kind::Style | Kind::Font)),
                public: true,
                kind,
            };
            vec![
                named("/style.css", Some(Kind::Style)),
                named("/app.js", Some(Kind::Script)),
                named("/font.woff2", Some(Kind::Font)),
                // No kind, no `as`: left out.
                named("/unknown", None),
                named("/hero.jpg", Some(Kind::Image)),
                named("/movie.mp4", Some(Kind::Media)),
                named("/data.json", Some(Kind::Other)),
            ]
        } else {
            Vec::new()
        };
        self.named.add_permits(1);
        targets
    }
}

fn tunnels(
    dir: &std::path::Path,
    h2: bool,
    early_hints: bool,
) -> Result<(Tunnels, CertificateDer<'static>)> {
    let (entry, der) = site_certificate(dir)?;
    let tls = TlsConfig {
        certificates: vec![entry],
        passthrough: Vec::new(),
        h2,
        early_hints,
    };
    tls.validate()
        .map_err(|(k, r)| anyhow::anyhow!("{k}: {r}"))?;
    Ok((Tunnels::load(&tls)?, der))
}

/// One request as the h2 browser sends it.
struct Ask {
    path: &'static str,
    fields: &'static [(&'static str, &'static str)],
}

const PAGE: Ask = Ask {
    path: "/page.html",
    fields: &[
        ("sec-fetch-dest", "document"),
        ("accept", NAVIGATION_ACCEPT),
    ],
};

/// What the browser saw for one request.
#[derive(Debug)]
struct Got {
    /// The `Link` values of each informational response, with its status.
    informational: Vec<(u16, Vec<String>)>,
    status: u16,
    body: Vec<u8>,
    /// The stream's reset, if its body ended in one.
    reset: Option<h2::Reason>,
}

/// Sends every request of `batch` at once on one HTTP/2 connection, then
/// reads each; batches follow each other on the same connection.
async fn h2_browser(
    der: CertificateDer<'static>,
    io: tokio::io::DuplexStream,
    batches: Vec<Vec<Ask>>,
) -> Result<Vec<Got>> {
    let tls = tls_client(der, &[b"h2"], io).await?;
    ensure!(tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice()));
    let (mut client, connection) = h2::client::handshake(tls).await?;
    let connection = tokio::spawn(connection);
    let mut got = Vec::new();
    for batch in batches {
        let mut pending = Vec::new();
        for ask in batch {
            let mut request = http::Request::get(format!("https://{SITE}{}", ask.path));
            for (name, value) in ask.fields {
                request = request.header(*name, *value);
            }
            client = client.ready().await?;
            let (response, _) = client.send_request(request.body(())?, true)?;
            pending.push(response);
        }
        for response in pending {
            got.push(read_response(response).await?);
        }
    }
    drop(client);
    connection.await??;
    Ok(got)
}

/// One response, its informational ones first. A stream reset (wherever
/// it comes: h2 drops what it had of a stream once it is reset) is noted;
/// any other error fails.
async fn read_response(mut response: h2::client::ResponseFuture) -> Result<Got> {
    let mut got = Got {
        informational: Vec::new(),
        status: 0,
        body: Vec::new(),
        reset: None,
    };
    let read = async {
        while let Some(hint) = poll_fn(|cx| response.poll_informational(cx)).await {
            let hint = hint?;
            let links = hint
                .headers()
                .get_all(http::header::LINK)
                .iter()
                .map(|v| v.to_str().unwrap_or("(not visible ASCII)").to_owned())
                .collect();
            got.informational.push((hint.status().as_u16(), links));
        }
        let response = response.await?;
        got.status = response.status().as_u16();
        let mut body = response.into_body();
        while let Some(data) = body.data().await {
            let data = data?;
            let _ = body.flow_control().release_capacity(data.len());
            got.body.extend_from_slice(&data);
        }
        Ok::<_, h2::Error>(())
    };
    if let Err(e) = read.await {
        got.reset = Some(
            e.reason()
                .with_context(|| format!("not a stream reset: {e}"))?,
        );
        ensure!(e.is_reset(), "not a stream reset: {e}");
    }
    Ok(got)
}

/// Runs `browser` at the far end of one tunnel to an origin serving `site`.
async fn through_a_tunnel<H: Handler, F, T>(
    tunnels: Tunnels,
    site: Arc<H>,
    browser: impl FnOnce(tokio::io::DuplexStream) -> F,
) -> Result<T>
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let (assoc, mut session) = start(BackendKind::FramedTcp, tunnels, site).await?;
    let (client_io, tunnel_io) = tokio::io::duplex(64 * 1024);
    let browser = tokio::spawn(browser(client_io));
    let reset = tokio::time::timeout(
        TIMEOUT,
        carry(&assoc, &mut session, (1, 2, SITE), tunnel_io),
    )
    .await
    .context("the tunnel ends within the time-out")??;
    ensure!(reset.is_none(), "tunnel reset: {reset:?}");
    tokio::time::timeout(TIMEOUT, browser)
        .await
        .context("the browser ends within the time-out")??
}

fn check_page(got: &Got) -> Result<()> {
    ensure!(got.status == 200, "status {}", got.status);
    ensure!(got.reset.is_none(), "reset {:?}", got.reset);
    ensure!(
        got.body == page_body(),
        "page body of {} bytes",
        got.body.len()
    );
    Ok(())
}

/// A page over HTTP/2 gets one 103 with the named targets' Link values
/// before its 200; so does a page asked for by `Accept` alone.
#[tokio::test]
async fn a_page_gets_early_hints_before_its_response() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (tunnels, der) = tunnels(dir.path(), true, true)?;
    let site = Site::new(Naming::BeforeTheReply);
    let by_accept = Ask {
        path: "/page.html",
        fields: &[("accept", NAVIGATION_ACCEPT)],
    };
    let got = through_a_tunnel(tunnels, Arc::clone(&site), move |io| {
        h2_browser(der, io, vec![vec![PAGE], vec![by_accept]])
    })
    .await?;
    ensure!(got.len() == 2);
    for page in &got {
        ensure!(
            page.informational == [(103, PAGE_LINKS.map(str::to_owned).to_vec())],
            "{:?}",
            page.informational
        );
        check_page(page)?;
    }
    ensure!(site.asked.load(Ordering::SeqCst) == 2);
    Ok(())
}

/// An image is not a page: no 103, and its targets are not asked for.
#[tokio::test]
async fn an_image_gets_no_early_hints() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (tunnels, der) = tunnels(dir.path(), true, true)?;
    let site = Site::new(Naming::Unasked);
    let image = Ask {
        path: "/img.png",
        fields: &[
            ("sec-fetch-dest", "image"),
            ("accept", "image/avif,image/*,*/*;q=0.8"),
        ],
    };
    let got = through_a_tunnel(tunnels, Arc::clone(&site), move |io| {
        h2_browser(der, io, vec![vec![image]])
    })
    .await?;
    ensure!(got.len() == 1);
    ensure!(
        got[0].informational.is_empty(),
        "{:?}",
        got[0].informational
    );
    ensure!(
        got[0].status == 200 && got[0].body == [7; 100],
        "{:?}",
        got[0]
    );
    ensure!(site.asked.load(Ordering::SeqCst) == 0);
    Ok(())
}

/// Hints that do not come are not waited for: the page is answered
/// without a 103 (within the test's deadline, not one of its own).
#[tokio::test]
async fn a_page_whose_hints_never_come_is_answered_without_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (tunnels, der) = tunnels(dir.path(), true, true)?;
    let site = Site::new(Naming::Never);
    let got = through_a_tunnel(tunnels, Arc::clone(&site), move |io| {
        h2_browser(der, io, vec![vec![PAGE]])
    })
    .await?;
    ensure!(got.len() == 1);
    ensure!(
        got[0].informational.is_empty(),
        "{:?}",
        got[0].informational
    );
    check_page(&got[0])?;
    ensure!(site.asked.load(Ordering::SeqCst) == 1);
    Ok(())
}

/// `tls.early_hints` off: HTTP/2 pages get no 103.
#[tokio::test]
async fn early_hints_off_sends_none() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (tunnels, der) = tunnels(dir.path(), true, false)?;
    let site = Site::new(Naming::Unasked);
    let got = through_a_tunnel(tunnels, Arc::clone(&site), move |io| {
        h2_browser(der, io, vec![vec![PAGE]])
    })
    .await?;
    ensure!(got.len() == 1);
    ensure!(
        got[0].informational.is_empty(),
        "{:?}",
        got[0].informational
    );
    check_page(&got[0])?;
    ensure!(site.asked.load(Ordering::SeqCst) == 0);
    Ok(())
}

/// Over HTTP/1.1 (the browser did not take h2) a page gets no 103:
/// Chromium ignores one there.
#[tokio::test]
async fn http1_sends_no_early_hints() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (tunnels, der) = tunnels(dir.path(), true, true)?;
    let site = Site::new(Naming::Unasked);
    let answer = through_a_tunnel(tunnels, Arc::clone(&site), move |io| async move {
        let mut tls = tls_client(der, &[b"http/1.1"], io).await?;
        ensure!(tls.get_ref().1.alpn_protocol() == Some(b"http/1.1".as_slice()));
        let request = format!(
            "GET /page.html HTTP/1.1\r\nhost: {SITE}\r\nsec-fetch-dest: document\r\n\
             accept: {NAVIGATION_ACCEPT}\r\nconnection: close\r\n\r\n"
        );
        tls.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        tls.read_to_end(&mut answer).await?;
        Ok(answer)
    })
    .await?;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("a response head")?;
    let head = String::from_utf8_lossy(&answer[..split]).to_lowercase();
    ensure!(head.starts_with("http/1.1 200"), "{head}");
    ensure!(answer[split + 4..] == page_body()[..], "the page's bytes");
    ensure!(site.asked.load(Ordering::SeqCst) == 0);
    Ok(())
}

/// A body that fails resets its own stream (INTERNAL_ERROR) while the page
/// beside it completes, and the connection serves the next request.
#[tokio::test]
async fn a_body_error_resets_only_its_stream() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (tunnels, der) = tunnels(dir.path(), true, true)?;
    let site = Site::new(Naming::BeforeTheReply);
    let broken = Ask {
        path: "/broken",
        fields: &[],
    };
    let image = Ask {
        path: "/img.png",
        fields: &[],
    };
    let got = through_a_tunnel(tunnels, site, move |io| {
        h2_browser(der, io, vec![vec![broken, PAGE], vec![image]])
    })
    .await?;
    ensure!(got.len() == 3);
    let broken = &got[0];
    ensure!(
        broken.reset == Some(h2::Reason::INTERNAL_ERROR),
        "{:?}",
        broken.reset
    );
    ensure!(broken.body.len() < 100_000, "a short body");
    check_page(&got[1])?;
    ensure!(
        got[2].status == 200 && got[2].body == [7; 100],
        "{:?}",
        got[2]
    );
    Ok(())
}

/// The request body limit holds over HTTP/2 as it did under hyper: a body
/// longer than `max_request_body` (1 MiB here) gets a 413, one of that
/// length reaches the handler.
#[tokio::test]
async fn a_request_body_over_the_limit_gets_413() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (tunnels, der) = tunnels(dir.path(), true, true)?;
    let site = Site::new(Naming::Unasked);
    let statuses = through_a_tunnel(tunnels, site, move |io| async move {
        let tls = tls_client(der, &[b"h2"], io).await?;
        let (mut client, connection) = h2::client::handshake(tls).await?;
        let connection = tokio::spawn(connection);
        let mut statuses = Vec::new();
        for len in [(1 << 20) + 1, 1 << 20] {
            client = client.ready().await?;
            let request = http::Request::post(format!("https://{SITE}/upload")).body(())?;
            let (response, mut body) = client.send_request(request, false)?;
            // h2 queues what the window does not let out yet.
            body.send_data(Bytes::from(vec![1; len]), true)?;
            let response = response.await?;
            statuses.push(response.status().as_u16());
        }
        drop(client);
        connection.await??;
        Ok(statuses)
    })
    .await?;
    // /upload is not the site's: 404 once the whole body is read.
    ensure!(statuses == [413, 404], "{statuses:?}");
    Ok(())
}

/// `early_hints` without `h2` would do nothing: refused, naming the key.
#[test]
fn early_hints_needs_h2() -> Result<()> {
    let config = TlsConfig {
        h2: false,
        early_hints: true,
        ..TlsConfig::default()
    };
    match config.validate() {
        Err((key, _)) if key == "tls.early_hints" => Ok(()),
        other => bail!("{other:?}"),
    }
}

/// The origin's own files service: a page's closure is what its 103 names,
/// once the closure has been worked out (the first request may be answered
/// before it is: `HINTS_WAIT`), so the page is asked for twice and the
/// second answer must carry the hints.
#[tokio::test]
async fn the_files_service_hints_a_pages_closure() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (tunnels, der) = tunnels(dir.path(), true, true)?;
    let root = tempfile::tempdir()?;
    std::fs::write(
        root.path().join("page.html"),
        b"<!doctype html><link rel=stylesheet href=/style.css><img src=/photo.png>",
    )?;
    std::fs::write(root.path().join("style.css"), b"body { color: red }")?;
    std::fs::write(root.path().join("photo.png"), b"not really")?;
    let files = StaticFiles::new(&FilesConfig::new(root.path()))?;
    let service = Arc::new(Service::files(files, Some(ClosureConfig::default()), None));
    let got = through_a_tunnel(tunnels, service, move |io| {
        h2_browser(der, io, vec![vec![PAGE], vec![PAGE]])
    })
    .await?;
    ensure!(
        got.len() == 2 && got.iter().all(|g| g.status == 200),
        "{got:?}"
    );
    ensure!(
        got[1].informational
            == [(
                103,
                vec![
                    "</style.css>; rel=preload; as=style".to_owned(),
                    "</photo.png>; rel=preload; as=image".to_owned(),
                ]
            )],
        "{:?}",
        got[1].informational
    );
    Ok(())
}
