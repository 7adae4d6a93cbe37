//! `files.follow_symlinks` against a real tree laid out as Debian packages the
//! Python documentation: `_static/jquery.js` is a symlink to a file outside the
//! document root. Each setting's answers, the exact bytes when served, and the
//! reason logged when refused.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use gateway_protocol::MAX_CHUNK;
use http_semantics::RequestHead;
use origin::files::{FilesConfig, FollowSymlinks, Refusal, StaticFiles};
use origin::sync::lock;
use tempfile::TempDir;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const JQUERY: &[u8] = b"/*! jQuery, from /usr/share/javascript */\n";
const CSS: &[u8] = b"body { margin: 0 }\n";
const DOT_SECRET: &[u8] = b"OUTSIDE-DOTFILE-SECRET-17c2";

/// The tree:
/// ```text
/// javascript/jquery/jquery.js          (outside the root)
/// javascript/.hidden/key               (outside the root, under a dotdir)
/// html/_static/basic.css
/// html/_static/jquery.js -> ../../javascript/jquery/jquery.js
/// html/_static/inside.css -> basic.css
/// html/_static/key -> ../../javascript/.hidden/key
/// html/jquery-dir -> ../javascript/jquery
/// ```
struct Site {
    dir: TempDir,
}

impl Site {
    fn new() -> Result<Site, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let base = dir.path();
        fs::create_dir_all(base.join("javascript/jquery"))?;
        fs::write(base.join("javascript/jquery/jquery.js"), JQUERY)?;
        fs::create_dir_all(base.join("javascript/.hidden"))?;
        fs::write(base.join("javascript/.hidden/key"), DOT_SECRET)?;
        let html = base.join("html");
        fs::create_dir_all(html.join("_static"))?;
        fs::write(html.join("_static/basic.css"), CSS)?;
        symlink(
            "../../javascript/jquery/jquery.js",
            html.join("_static/jquery.js"),
        )?;
        symlink("basic.css", html.join("_static/inside.css"))?;
        symlink("../../javascript/.hidden/key", html.join("_static/key"))?;
        symlink("../javascript/jquery", html.join("jquery-dir"))?;
        Ok(Site { dir })
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("html")
    }

    fn files(&self, follow: FollowSymlinks) -> Result<StaticFiles, Box<dyn std::error::Error>> {
        let mut config = FilesConfig::new(self.root());
        config.follow_symlinks = follow;
        Ok(StaticFiles::new(&config)?)
    }
}

/// Status, body and refusal of `GET target`.
async fn get(
    files: &StaticFiles,
    target: &str,
) -> Result<(u16, Vec<u8>, Option<Refusal>), Box<dyn std::error::Error>> {
    let text = format!("GET {target} HTTP/1.1\r\nHost: docs.test\r\n\r\n");
    let head = RequestHead::parse(text.as_bytes())?;
    let (response, refusal) = files.answer(&head).await;
    let mut body = response.body;
    let mut bytes = Vec::new();
    while let Some(chunk) = body.read_chunk(MAX_CHUNK).await? {
        bytes.extend_from_slice(&chunk);
    }
    Ok((response.head.status.as_u16(), bytes, refusal))
}

/// A log sink for a subscriber installed on this thread.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.0)).into_owned()
    }
}

#[tokio::test]
async fn by_default_a_symlink_out_of_the_root_is_refused_and_the_log_says_why() -> TestResult {
    let site = Site::new()?;
    let files = site.files(FollowSymlinks::default())?;
    let sink = Captured::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (status, body, refusal) = get(&files, "/_static/jquery.js").await?;
    assert_eq!(status, 403);
    assert!(!body.windows(JQUERY.len()).any(|w| w == JQUERY));
    let resolved = fs::canonicalize(site.dir.path().join("javascript/jquery/jquery.js"))?;
    assert_eq!(
        refusal,
        Some(Refusal::SymlinkOutOfRoot {
            resolved: resolved.clone()
        })
    );
    // The directory form, through a symlinked directory, too.
    let (status, _, refusal) = get(&files, "/jquery-dir/jquery.js").await?;
    assert_eq!(status, 403);
    assert_eq!(refusal.map(|r| r.code()), Some("symlink-out-of-root"));
    // Inside the root, followed.
    assert_eq!(get(&files, "/_static/inside.css").await?.1, CSS);

    let log = sink.text();
    let line = log
        .lines()
        .find(|l| l.contains("target=/_static/jquery.js"))
        .ok_or_else(|| format!("no refusal line in the log:\n{log}"))?;
    assert!(line.contains(" INFO origin::files: "), "{line}");
    assert!(line.contains("method=GET"), "{line}");
    assert!(line.contains("status=403"), "{line}");
    assert!(line.contains("reason=\"symlink-out-of-root\""), "{line}");
    assert!(
        line.contains(&format!(
            "refused: symlink leads out of the root to {resolved:?}"
        )),
        "{line}"
    );
    // 404s are for debug, not info.
    let (status, _, _) = get(&files, "/missing.css").await?;
    assert_eq!(status, 404);
    assert!(!sink.text().contains("missing.css"), "{}", sink.text());
    Ok(())
}

#[tokio::test]
async fn always_follows_every_symlink_but_not_to_a_hidden_name() -> TestResult {
    let site = Site::new()?;
    let files = site.files(FollowSymlinks::Always)?;
    assert_eq!(
        get(&files, "/_static/jquery.js").await?,
        (200, JQUERY.to_vec(), None)
    );
    assert_eq!(
        get(&files, "/jquery-dir/jquery.js").await?,
        (200, JQUERY.to_vec(), None)
    );
    assert_eq!(get(&files, "/_static/inside.css").await?.1, CSS);
    let (status, body, refusal) = get(&files, "/_static/key").await?;
    assert_eq!(status, 404);
    assert!(!body.windows(DOT_SECRET.len()).any(|w| w == DOT_SECRET));
    assert_eq!(refusal.map(|r| r.code()), Some("hidden-target"));
    Ok(())
}

#[tokio::test]
async fn never_refuses_every_symlink_below_the_root() -> TestResult {
    let site = Site::new()?;
    let files = site.files(FollowSymlinks::Never)?;
    let static_dir = site.root().canonicalize()?.join("_static");
    assert_eq!(get(&files, "/_static/basic.css").await?.1, CSS);
    assert_eq!(
        get(&files, "/_static/inside.css").await?,
        (
            403,
            b"403 Forbidden\n".to_vec(),
            Some(Refusal::SymlinkRefused {
                link: static_dir.join("inside.css")
            })
        )
    );
    let (status, _, refusal) = get(&files, "/_static/jquery.js").await?;
    assert_eq!(status, 403);
    assert_eq!(refusal.map(|r| r.code()), Some("symlink-refused"));
    let (status, _, refusal) = get(&files, "/jquery-dir/jquery.js").await?;
    assert_eq!(status, 403);
    assert_eq!(
        refusal,
        Some(Refusal::SymlinkRefused {
            link: site.root().canonicalize()?.join("jquery-dir")
        })
    );
    // A missing file is still a 404, not a 403.
    assert_eq!(get(&files, "/_static/nope.js").await?.0, 404);
    Ok(())
}

#[tokio::test]
async fn if_owner_matches_follows_a_link_only_to_a_file_of_its_owner() -> TestResult {
    let site = Site::new()?;
    let files = site.files(FollowSymlinks::IfOwnerMatches)?;
    // Everything in the tree has the test's owner: followed, out of the root too.
    assert_eq!(
        get(&files, "/_static/jquery.js").await?,
        (200, JQUERY.to_vec(), None)
    );
    assert_eq!(get(&files, "/_static/inside.css").await?.1, CSS);

    // A link whose owner differs from its target's.
    let link = site.root().join("_static/other.js");
    let me = fs::metadata(site.root())?.uid();
    if me == 0 {
        symlink("../../javascript/jquery/jquery.js", &link)?;
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534))?;
    } else {
        // Not root: a link of ours to a file root owns.
        symlink("/etc/passwd", &link)?;
    }
    let link_owner = fs::symlink_metadata(&link)?.uid();
    let target_owner = fs::metadata(&link)?.uid();
    assert_ne!(
        link_owner, target_owner,
        "the fixture needs differing owners"
    );
    let (status, _, refusal) = get(&files, "/_static/other.js").await?;
    assert_eq!(status, 403);
    assert_eq!(
        refusal,
        Some(Refusal::SymlinkOwnerDiffers {
            link: site.root().canonicalize()?.join("_static/other.js"),
            link_owner,
            target_owner,
        })
    );
    Ok(())
}

#[tokio::test]
async fn never_with_symlinks_from_trusts_the_links_up_to_that_directory() -> TestResult {
    let site = Site::new()?;
    let mut config = FilesConfig::new(site.root());
    config.follow_symlinks = FollowSymlinks::Never;
    config.symlinks_from = Some("jquery-dir".into());
    let files = StaticFiles::new(&config)?;
    // `jquery-dir` itself is a symlink out of the root: trusted, followed.
    assert_eq!(
        get(&files, "/jquery-dir/jquery.js").await?,
        (200, JQUERY.to_vec(), None)
    );
    // Elsewhere, every symlink is still refused.
    let (status, _, refusal) = get(&files, "/_static/inside.css").await?;
    assert_eq!(status, 403);
    assert_eq!(refusal.map(|r| r.code()), Some("symlink-refused"));
    // Below the trusted part, too.
    symlink(
        "jquery.js",
        site.dir.path().join("javascript/jquery/alias.js"),
    )?;
    let (status, _, refusal) = get(&files, "/jquery-dir/alias.js").await?;
    assert_eq!(status, 403);
    assert_eq!(
        refusal,
        Some(Refusal::SymlinkRefused {
            link: site.root().canonicalize()?.join("jquery-dir/alias.js")
        })
    );
    Ok(())
}
