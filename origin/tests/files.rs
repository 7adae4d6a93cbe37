//! Static files against a real directory tree: exact bytes, HEAD, preconditions,
//! ranges, directories, methods, Cache-Control, and a path-traversal corpus that
//! must never reveal a file outside the root.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use gateway_protocol::MAX_CHUNK;
use http_semantics::{RequestHead, ResponseHead};
use origin::files::{FileBody, FileResponse, FilesConfig, StaticFiles};
use tempfile::TempDir;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const SECRET: &[u8] = b"TOP-SECRET-OUTSIDE-THE-ROOT-5c1f";
const DOT_SECRET: &[u8] = b"DOTFILE-SECRET-a94e";
const HELLO: &[u8] = b"hello, world\n";
const BIG_LEN: usize = 5 * 1024 * 1024;

/// A byte pattern that differs between chunks, so a misplaced chunk shows.
fn big_pattern() -> Vec<u8> {
    (0..BIG_LEN)
        .map(|i| ((i % 251) ^ (i >> 16)) as u8)
        .collect()
}

struct Fixture {
    dir: TempDir,
    files: StaticFiles,
}

impl Fixture {
    fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("root")
    }
}

/// The tree:
/// ```text
/// secret.txt                       (outside the root)
/// outside/also-secret.txt          (outside the root)
/// root/hello.txt, big.bin, empty.txt, page.html, "sp ace.txt"
/// root/assets/app.js
/// root/dir/index.html
/// root/noindex/file.txt
/// root/.env                        (dotfile)
/// root/.well-known/thing.txt
/// root/link-inside -> hello.txt
/// root/link-out -> ../secret.txt
/// root/link-out-dir -> ../outside
/// root/link-dotfile -> .env
/// root/index-out/index.html -> ../../secret.txt
/// root/fifo                        (named pipe)
/// ```
fn fixture() -> Result<Fixture, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let base = dir.path();
    fs::write(base.join("secret.txt"), SECRET)?;
    fs::create_dir(base.join("outside"))?;
    fs::write(base.join("outside/also-secret.txt"), SECRET)?;
    let root = base.join("root");
    fs::create_dir(&root)?;
    fs::write(root.join("hello.txt"), HELLO)?;
    fs::write(root.join("big.bin"), big_pattern())?;
    fs::write(root.join("empty.txt"), b"")?;
    fs::write(root.join("page.html"), b"<p>page</p>\n")?;
    fs::write(root.join("sp ace.txt"), b"space\n")?;
    fs::create_dir(root.join("assets"))?;
    fs::write(root.join("assets/app.js"), b"console.log(1);\n")?;
    fs::create_dir(root.join("dir"))?;
    fs::write(root.join("dir/index.html"), b"<h1>dir</h1>\n")?;
    fs::create_dir(root.join("noindex"))?;
    fs::write(root.join("noindex/file.txt"), b"file\n")?;
    fs::write(root.join(".env"), DOT_SECRET)?;
    fs::create_dir(root.join(".well-known"))?;
    fs::write(root.join(".well-known/thing.txt"), b"well known\n")?;
    symlink("hello.txt", root.join("link-inside"))?;
    symlink("../secret.txt", root.join("link-out"))?;
    symlink("../outside", root.join("link-out-dir"))?;
    symlink(".env", root.join("link-dotfile"))?;
    fs::create_dir(root.join("index-out"))?;
    symlink("../../secret.txt", root.join("index-out/index.html"))?;
    let status = std::process::Command::new("mkfifo")
        .arg(root.join("fifo"))
        .status()?;
    assert!(status.success(), "mkfifo failed");

    let mut config = FilesConfig::new(&root);
    config.cache_control = vec![
        ("*.html".into(), "no-cache".into()),
        ("/assets/**".into(), "max-age=31536000, immutable".into()),
    ];
    let files = StaticFiles::new(&config)?;
    Ok(Fixture { dir, files })
}

/// A response as the driver would see it: head, and every body chunk joined.
struct Answer {
    head: ResponseHead,
    body: Vec<u8>,
    chunks: usize,
}

impl Answer {
    fn status(&self) -> u16 {
        self.head.status.as_u16()
    }

    fn field(&self, name: &str) -> Option<&str> {
        self.head.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn drain(response: FileResponse) -> std::io::Result<Answer> {
    let FileResponse { head, mut body } = response;
    let mut out = Vec::new();
    let mut chunks = 0;
    while let Some(chunk) = body.read_chunk(MAX_CHUNK).await? {
        assert!(chunk.len() <= MAX_CHUNK, "chunk of {} bytes", chunk.len());
        assert!(!chunk.is_empty(), "empty chunk");
        out.extend_from_slice(&chunk);
        chunks += 1;
    }
    Ok(Answer {
        head,
        body: out,
        chunks,
    })
}

/// Sends `method target` with `fields` through the parser and the file server
/// (a parse error is answered as the driver would, with its error response).
async fn request(
    files: &StaticFiles,
    method: &str,
    target: &str,
    fields: &[(&str, &str)],
) -> std::io::Result<Answer> {
    let mut text = format!("{method} {target} HTTP/1.1\r\nHost: origin.test\r\n");
    for (name, value) in fields {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    let response = match RequestHead::parse(text.as_bytes()) {
        Ok(head) => {
            // A guard against a hang (a FIFO opened for reading blocks), not a
            // timing assumption: a correct answer takes milliseconds.
            tokio::time::timeout(Duration::from_secs(20), files.respond(&head))
                .await
                .map_err(|_| std::io::Error::other(format!("{target}: no answer")))?
        }
        Err(e) => {
            let (head, body) = e.response();
            FileResponse {
                head,
                body: FileBody::Bytes(body),
            }
        }
    };
    let answer = drain(response).await?;
    if method == "GET" && answer.status() != 304 {
        assert_eq!(
            answer.field("content-length"),
            Some(answer.body.len().to_string().as_str()),
            "{target}: Content-Length must match the body"
        );
    }
    Ok(answer)
}

async fn get(
    files: &StaticFiles,
    target: &str,
    fields: &[(&str, &str)],
) -> std::io::Result<Answer> {
    request(files, "GET", target, fields).await
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn serves_exact_bytes_with_validators() -> TestResult {
    let fx = fixture()?;
    let answer = get(&fx.files, "/hello.txt", &[]).await?;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.body, HELLO);
    assert_eq!(
        answer.field("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(answer.field("content-length"), Some("13"));
    assert_eq!(answer.field("accept-ranges"), Some("bytes"));
    assert_eq!(answer.field("cache-control"), None);
    let etag = answer.field("etag").ok_or("no ETag")?;
    let inner = etag
        .strip_prefix('"')
        .and_then(|e| e.strip_suffix('"'))
        .ok_or("ETag not quoted")?;
    let parts: Vec<&str> = inner.split('-').collect();
    assert_eq!(parts.len(), 3, "{etag}");
    assert!(
        parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit()))
    );
    assert_eq!(parts[1], "d", "size in hex");
    let modified = fs::metadata(fx.root().join("hello.txt"))?.modified()?;
    assert_eq!(
        answer.field("last-modified"),
        Some(httpdate::fmt_http_date(modified).as_str())
    );
    // Field order, byte for byte apart from the validators.
    let rendered = String::from_utf8(answer.head.render().to_vec())?;
    let expected = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 13\r\n\
         Last-Modified: {}\r\nEtag: {etag}\r\nAccept-Ranges: bytes\r\n\r\n",
        httpdate::fmt_http_date(modified)
    );
    assert_eq!(rendered, expected);

    let answer = get(&fx.files, "/big.bin", &[]).await?;
    assert_eq!(answer.status(), 200);
    assert_eq!(
        answer.field("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(answer.body.len(), BIG_LEN);
    assert!(answer.body == big_pattern(), "5 MiB body differs");
    assert_eq!(answer.chunks, BIG_LEN / MAX_CHUNK);

    let answer = get(&fx.files, "/empty.txt", &[]).await?;
    assert_eq!((answer.status(), answer.body.len()), (200, 0));
    let answer = get(&fx.files, "/sp%20ace.txt", &[]).await?;
    assert_eq!((answer.status(), &answer.body[..]), (200, &b"space\n"[..]));
    let answer = get(&fx.files, "/link-inside", &[]).await?;
    assert_eq!((answer.status(), &answer.body[..]), (200, HELLO));
    let answer = get(&fx.files, "/.well-known/thing.txt", &[]).await?;
    assert_eq!(answer.status(), 200);
    let answer = get(&fx.files, "/hello.txt?v=1&x=../../secret.txt", &[]).await?;
    assert_eq!((answer.status(), &answer.body[..]), (200, HELLO));
    let answer = get(&fx.files, "http://origin.test/hello.txt", &[]).await?;
    assert_eq!((answer.status(), &answer.body[..]), (200, HELLO));
    let answer = get(&fx.files, "/missing.txt", &[]).await?;
    assert_eq!(
        (answer.status(), &answer.body[..]),
        (404, &b"404 Not Found\n"[..])
    );
    Ok(())
}

#[tokio::test]
async fn head_has_the_get_head_and_no_body() -> TestResult {
    let fx = fixture()?;
    for target in ["/big.bin", "/hello.txt", "/dir/", "/missing", "/dir"] {
        let got = get(&fx.files, target, &[]).await?;
        let head = request(&fx.files, "HEAD", target, &[]).await?;
        assert_eq!(head.head, got.head, "{target}");
        assert!(head.body.is_empty(), "{target}");
        assert_eq!(head.chunks, 0);
    }
    // Range is for GET only: HEAD with Range gets the 200 head.
    let head = request(&fx.files, "HEAD", "/hello.txt", &[("Range", "bytes=0-1")]).await?;
    assert_eq!(
        (head.status(), head.field("content-length")),
        (200, Some("13"))
    );
    Ok(())
}

#[tokio::test]
async fn conditional_requests() -> TestResult {
    let fx = fixture()?;
    let first = get(&fx.files, "/page.html", &[]).await?;
    let etag = first.field("etag").ok_or("no ETag")?.to_owned();
    let date = first
        .field("last-modified")
        .ok_or("no Last-Modified")?
        .to_owned();
    assert_eq!(first.field("cache-control"), Some("no-cache"));

    for fields in [
        vec![("If-None-Match", etag.clone())],
        vec![("If-None-Match", format!("\"x\", W/{etag}"))],
        vec![("If-None-Match", "*".to_owned())],
        vec![("If-Modified-Since", date.clone())],
        vec![("If-Match", etag.clone()), ("If-None-Match", etag.clone())],
    ] {
        let fields: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
        for method in ["GET", "HEAD"] {
            let answer = request(&fx.files, method, "/page.html", &fields).await?;
            assert_eq!(answer.status(), 304, "{method} {fields:?}");
            assert!(answer.body.is_empty());
            assert_eq!(answer.field("etag"), Some(etag.as_str()));
            assert_eq!(answer.field("last-modified"), Some(date.as_str()));
            assert_eq!(answer.field("cache-control"), Some("no-cache"));
            assert_eq!(answer.field("content-length"), None);
            assert_eq!(answer.field("content-type"), None);
        }
    }

    let old = "Sat, 01 Jan 2000 00:00:00 GMT";
    for fields in [
        vec![("If-None-Match", "\"other\"")],
        vec![("If-Modified-Since", old)],
        // If-None-Match present: the matching date is not consulted.
        vec![
            ("If-None-Match", "\"other\""),
            ("If-Modified-Since", date.as_str()),
        ],
        vec![("If-Modified-Since", "not a date")],
        vec![("If-Match", etag.as_str())],
        vec![("If-Unmodified-Since", date.as_str())],
    ] {
        let answer = get(&fx.files, "/page.html", &fields).await?;
        assert_eq!(answer.status(), 200, "{fields:?}");
        assert_eq!(answer.body, b"<p>page</p>\n");
    }

    for fields in [
        vec![("If-Match", "\"other\"")],
        vec![("If-Match", "W/\"x\"")],
        vec![("If-Unmodified-Since", old)],
        vec![("If-Match", "\"other\""), ("If-None-Match", etag.as_str())],
    ] {
        let answer = get(&fx.files, "/page.html", &fields).await?;
        assert_eq!(answer.status(), 412, "{fields:?}");
        assert_eq!(answer.body, b"412 Precondition Failed\n");
    }
    // A weak If-Match can never match our strong tag.
    let weak = format!("W/{etag}");
    let answer = get(&fx.files, "/page.html", &[("If-Match", weak.as_str())]).await?;
    assert_eq!(answer.status(), 412);
    Ok(())
}

#[tokio::test]
async fn ranges() -> TestResult {
    let fx = fixture()?;
    let big = big_pattern();
    let expect_206 = |answer: &Answer, body: &[u8], range: &str| {
        assert_eq!(answer.status(), 206, "{range}");
        assert_eq!(answer.field("content-range"), Some(range));
        assert!(answer.body == body, "{range}: body differs");
    };

    let a = get(&fx.files, "/hello.txt", &[("Range", "bytes=0-4")]).await?;
    expect_206(&a, b"hello", "bytes 0-4/13");
    assert_eq!(a.field("content-type"), Some("text/plain; charset=utf-8"));
    assert!(a.field("etag").is_some());
    let a = get(&fx.files, "/hello.txt", &[("Range", "bytes=7-")]).await?;
    expect_206(&a, b"world\n", "bytes 7-12/13");
    let a = get(&fx.files, "/hello.txt", &[("Range", "bytes=-6")]).await?;
    expect_206(&a, b"world\n", "bytes 7-12/13");
    let a = get(&fx.files, "/hello.txt", &[("Range", "bytes=-100")]).await?;
    expect_206(&a, HELLO, "bytes 0-12/13");
    let a = get(&fx.files, "/hello.txt", &[("Range", "bytes=12-99")]).await?;
    expect_206(&a, b"\n", "bytes 12-12/13");
    let a = get(&fx.files, "/big.bin", &[("Range", "bytes=1000000-2999999")]).await?;
    expect_206(
        &a,
        &big[1_000_000..3_000_000],
        "bytes 1000000-2999999/5242880",
    );
    let a = get(&fx.files, "/big.bin", &[("Range", "bytes=-70000")]).await?;
    expect_206(
        &a,
        &big[BIG_LEN - 70_000..],
        "bytes 5172880-5242879/5242880",
    );
    assert_eq!(a.chunks, 2);
    let a = get(&fx.files, "/big.bin", &[("Range", "bytes=5242879-")]).await?;
    expect_206(&a, &big[BIG_LEN - 1..], "bytes 5242879-5242879/5242880");

    for range in [
        "bytes=13-",
        "bytes=13-20",
        "bytes=-0",
        "bytes=99999999999999999999999-",
    ] {
        let a = get(&fx.files, "/hello.txt", &[("Range", range)]).await?;
        assert_eq!(a.status(), 416, "{range}");
        assert_eq!(a.field("content-range"), Some("bytes */13"));
        assert_eq!(a.body, b"416 Range Not Satisfiable\n");
    }
    let a = get(&fx.files, "/empty.txt", &[("Range", "bytes=0-")]).await?;
    assert_eq!(
        (a.status(), a.field("content-range")),
        (416, Some("bytes */0"))
    );

    // Invalid, multiple, or repeated: ignored, the whole file is served.
    for fields in [
        vec![("Range", "bytes=5-1")],
        vec![("Range", "bytes=abc")],
        vec![("Range", "lines=0-1")],
        vec![("Range", "bytes 0-1")],
        vec![("Range", "bytes=0-1,3-4")],
        vec![("Range", "bytes=0-1"), ("Range", "bytes=3-4")],
    ] {
        let a = get(&fx.files, "/hello.txt", &fields).await?;
        assert_eq!((a.status(), &a.body[..]), (200, HELLO), "{fields:?}");
        assert_eq!(a.field("content-range"), None);
    }

    // If-Range: the current ETag or date allows the range; anything else gets 200.
    let full = get(&fx.files, "/hello.txt", &[]).await?;
    let etag = full.field("etag").ok_or("no ETag")?.to_owned();
    let date = full
        .field("last-modified")
        .ok_or("no Last-Modified")?
        .to_owned();
    for if_range in [etag.as_str(), date.as_str()] {
        let a = get(
            &fx.files,
            "/hello.txt",
            &[("Range", "bytes=0-4"), ("If-Range", if_range)],
        )
        .await?;
        expect_206(&a, b"hello", "bytes 0-4/13");
    }
    let weak = format!("W/{etag}");
    for if_range in [
        "\"stale\"",
        weak.as_str(),
        "Sat, 01 Jan 2000 00:00:00 GMT",
        "junk",
    ] {
        let a = get(
            &fx.files,
            "/hello.txt",
            &[("Range", "bytes=0-4"), ("If-Range", if_range)],
        )
        .await?;
        assert_eq!((a.status(), &a.body[..]), (200, HELLO), "{if_range}");
    }
    // A failed precondition wins over a range.
    let a = get(
        &fx.files,
        "/hello.txt",
        &[("Range", "bytes=0-4"), ("If-None-Match", etag.as_str())],
    )
    .await?;
    assert_eq!(a.status(), 304);
    Ok(())
}

#[tokio::test]
async fn directories() -> TestResult {
    let fx = fixture()?;
    let a = get(&fx.files, "/dir/", &[]).await?;
    assert_eq!((a.status(), &a.body[..]), (200, &b"<h1>dir</h1>\n"[..]));
    assert_eq!(a.field("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(
        a.field("cache-control"),
        Some("no-cache"),
        "matched as /dir/index.html"
    );

    for (target, location) in [
        ("/dir", "/dir/"),
        ("/dir?q=1&r=%2F", "/dir/?q=1&r=%2F"),
        ("//dir", "/dir/"),
        ("///dir", "/dir/"),
        ("/noindex", "/noindex/"),
        ("/link-out-dir", "/link-out-dir/"),
    ] {
        let a = get(&fx.files, target, &[]).await?;
        if target == "/link-out-dir" {
            // The symlink points outside: refused before any redirect.
            assert_eq!(a.status(), 403, "{target}");
            continue;
        }
        assert_eq!(a.status(), 301, "{target}");
        assert_eq!(a.field("location"), Some(location), "{target}");
    }
    for target in [
        "/noindex/",
        "/hello.txt/",
        "/dir/index.html/",
        "/noindex/file.txt/x",
    ] {
        assert_eq!(get(&fx.files, target, &[]).await?.status(), 404, "{target}");
    }
    // The root is a directory with an optional index: none here.
    assert_eq!(get(&fx.files, "/", &[]).await?.status(), 404);
    fs::write(fx.root().join("index.html"), b"root index\n")?;
    let a = get(&fx.files, "/", &[]).await?;
    assert_eq!((a.status(), &a.body[..]), (200, &b"root index\n"[..]));
    Ok(())
}

#[tokio::test]
async fn methods_and_cache_control() -> TestResult {
    let fx = fixture()?;
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
        let a = request(&fx.files, method, "/hello.txt", &[]).await?;
        assert_eq!(a.status(), 405, "{method}");
        assert_eq!(a.field("allow"), Some("GET, HEAD"));
        assert!(!contains(&a.body, HELLO));
    }
    let a = request(&fx.files, "BREW", "/hello.txt", &[]).await?;
    assert_eq!(a.status(), 501);

    for (target, cache) in [
        ("/page.html", Some("no-cache")),
        ("/assets/app.js", Some("max-age=31536000, immutable")),
        ("/hello.txt", None),
    ] {
        let a = get(&fx.files, target, &[]).await?;
        assert_eq!(a.status(), 200);
        assert_eq!(a.field("cache-control"), cache, "{target}");
    }
    let a = get(&fx.files, "/assets/app.js", &[]).await?;
    assert_eq!(
        a.field("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    // Errors carry no Cache-Control.
    let a = get(&fx.files, "/assets/missing.js", &[]).await?;
    assert_eq!((a.status(), a.field("cache-control")), (404, None));
    Ok(())
}

#[tokio::test]
async fn path_traversal_corpus_never_leaks() -> TestResult {
    let fx = fixture()?;
    let corpus = [
        "/../etc/passwd",
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/%2E%2E/etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/..%2fsecret.txt",
        "/%2e%2e%2fsecret.txt",
        "/..%2Fsecret.txt",
        "/%2e%2e%5c..",
        "/%2e%2e%5csecret.txt",
        "/..%5csecret.txt",
        "/a/../../secret.txt",
        "/dir/../../secret.txt",
        "/dir/%2e%2e/%2e%2e/secret.txt",
        "/./../secret.txt",
        "/.%2e/secret.txt",
        "/%2e./secret.txt",
        "//etc/passwd",
        "//../secret.txt",
        "/%00",
        "/foo%00.html",
        "/hello.txt%00.html",
        "/..%00/secret.txt",
        "/%c0%ae%c0%ae/secret.txt",
        "/%c0%ae%c0%ae/",
        "/%e0%80%ae%e0%80%ae/secret.txt",
        "/%c0%af..%c0%afsecret.txt",
        "/%252e%252e/secret.txt",
        "/..\\secret.txt",
        "/\\..\\secret.txt",
        "/..;/secret.txt",
        "/link-out",
        "/link-out/",
        "/link-out-dir/also-secret.txt",
        "/link-out-dir/",
        "/index-out/",
        "/link-dotfile",
        "/.env",
        "/%2eenv",
        "/dir/../.env",
        "/fifo",
        "http://origin.test/../secret.txt",
        "http://origin.test/%2e%2e/secret.txt",
        "/%",
        "/%zz/secret.txt",
        "/hello.txt%0d%0aSet-Cookie:%20x=1",
    ];
    assert!(corpus.len() >= 20);
    for target in corpus {
        for method in ["GET", "HEAD"] {
            let a = request(&fx.files, method, target, &[("Range", "bytes=0-")]).await?;
            assert!(
                matches!(a.status(), 400 | 403 | 404),
                "{method} {target}: status {}",
                a.status()
            );
            let head = a.head.render();
            for secret in [SECRET, DOT_SECRET] {
                assert!(!contains(&a.body, secret), "{target}: body leaks");
                assert!(!contains(&head, secret), "{target}: head leaks");
            }
            assert!(!contains(&head, b"Set-Cookie"), "{target}: injected field");
        }
    }
    // The specific answers for the symlinks and the dotfile.
    assert_eq!(get(&fx.files, "/link-out", &[]).await?.status(), 403);
    assert_eq!(get(&fx.files, "/index-out/", &[]).await?.status(), 403);
    assert_eq!(get(&fx.files, "/link-dotfile", &[]).await?.status(), 404);
    assert_eq!(get(&fx.files, "/.env", &[]).await?.status(), 404);
    assert_eq!(get(&fx.files, "/fifo", &[]).await?.status(), 404);
    assert_eq!(
        get(&fx.files, "/%2e%2e/secret.txt", &[]).await?.status(),
        404
    );
    assert_eq!(get(&fx.files, "/..%2fsecret.txt", &[]).await?.status(), 400);
    assert_eq!(get(&fx.files, "/%00", &[]).await?.status(), 400);
    Ok(())
}

#[tokio::test]
async fn a_file_that_shrinks_is_an_error_not_a_short_body() -> TestResult {
    let fx = fixture()?;
    let head = RequestHead::parse(b"GET /big.bin HTTP/1.1\r\nHost: h\r\n\r\n")?;
    let response = fx.files.respond(&head).await;
    assert_eq!(response.head.status.as_u16(), 200);
    let mut body = response.body;
    assert_eq!(body.remaining(), BIG_LEN as u64);
    let first = body.read_chunk(MAX_CHUNK).await?.ok_or("no first chunk")?;
    assert_eq!(first.len(), MAX_CHUNK);
    fs::OpenOptions::new()
        .write(true)
        .open(fx.root().join("big.bin"))?
        .set_len(100_000)?;
    let mut result = Ok(None);
    for _ in 0..BIG_LEN / MAX_CHUNK {
        result = body.read_chunk(MAX_CHUNK).await;
        if result.is_err() {
            break;
        }
    }
    let error = result.err().ok_or("a truncated file read to the end")?;
    assert_eq!(error.kind(), std::io::ErrorKind::UnexpectedEof);
    Ok(())
}

#[test]
fn a_missing_root_is_a_config_error() {
    let error = StaticFiles::new(&FilesConfig::new(Path::new("/nonexistent/origin-root")));
    assert!(matches!(error, Err(e) if e.to_string().starts_with("files.root")));
}

/// The small-file cache (`files.small_file_recheck`): a small file once read
/// is answered from memory, ranges and conditionals included, until the
/// recheck time; a refusal is never kept; with the cache off a change shows at
/// once.
#[tokio::test]
async fn small_files_are_kept_until_their_recheck_time() -> TestResult {
    let fx = fixture()?;
    let root = fx.root();
    let with_recheck = |recheck: Duration| {
        let mut config = FilesConfig::new(&root);
        config.small_file_recheck = recheck;
        StaticFiles::new(&config)
    };
    // An hour: nothing below can outlast it, however slow the machine.
    let kept = with_recheck(Duration::from_secs(3600))?;
    let first = get(&kept, "/hello.txt", &[]).await?;
    assert_eq!(first.body, HELLO);
    let etag = first.field("etag").ok_or("no ETag")?.to_owned();
    fs::write(root.join("hello.txt"), b"changed on disk\n")?;
    let again = get(&kept, "/hello.txt", &[]).await?;
    assert_eq!((again.status(), &again.body[..]), (200, HELLO));
    assert_eq!(again.field("etag"), Some(etag.as_str()));
    assert_eq!(again.field("last-modified"), first.field("last-modified"));
    let range = get(&kept, "/hello.txt", &[("Range", "bytes=7-11")]).await?;
    assert_eq!((range.status(), &range.body[..]), (206, &b"world"[..]));
    assert_eq!(range.field("content-range"), Some("bytes 7-11/13"));
    let conditional = get(&kept, "/hello.txt", &[("If-None-Match", &etag)]).await?;
    assert_eq!(conditional.status(), 304);
    let head = request(&kept, "HEAD", "/hello.txt", &[]).await?;
    assert_eq!(
        (head.status(), head.field("content-length")),
        (200, Some("13"))
    );
    assert!(head.body.is_empty());
    // A 404 is looked up again: the file appears at once.
    assert_eq!(get(&kept, "/later.txt", &[]).await?.status(), 404);
    fs::write(root.join("later.txt"), b"later\n")?;
    let later = get(&kept, "/later.txt", &[]).await?;
    assert_eq!((later.status(), &later.body[..]), (200, &b"later\n"[..]));
    // A large file is not kept: each request reads the disk.
    let big = get(&kept, "/big.bin", &[("Range", "bytes=0-3")]).await?;
    assert_eq!(big.body, big_pattern()[..4]);
    fs::write(root.join("big.bin"), vec![b'n'; BIG_LEN])?;
    let big = get(&kept, "/big.bin", &[("Range", "bytes=0-3")]).await?;
    assert_eq!(big.body, b"nnnn");

    // Off: the change shows on the next request.
    let off = with_recheck(Duration::ZERO)?;
    assert_eq!(
        get(&off, "/hello.txt", &[]).await?.body,
        b"changed on disk\n"
    );
    fs::write(root.join("hello.txt"), b"and again\n")?;
    assert_eq!(get(&off, "/hello.txt", &[]).await?.body, b"and again\n");

    // A short recheck: the change shows once it has passed (waited for with a
    // deadline, never a fixed sleep).
    let short = with_recheck(Duration::from_millis(50))?;
    assert_eq!(get(&short, "/hello.txt", &[]).await?.body, b"and again\n");
    fs::write(root.join("hello.txt"), b"third\n")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let body = get(&short, "/hello.txt", &[]).await?.body;
        if body == b"third\n" {
            break;
        }
        assert_eq!(body, b"and again\n");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the change never showed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
