//! The closure over a document root in a temporary directory.

use std::path::PathBuf;

use tempfile::TempDir;

use super::*;
use crate::files::FilesConfig;

const HOST: &str = "example.test";

/// A document root `site/` inside a temporary directory (so that files
/// outside the root exist, to be refused).
struct Site {
    dir: TempDir,
}

impl Site {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        std::fs::create_dir(dir.path().join("site")).expect("root");
        Self { dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("site")
    }

    /// Writes `contents` at `path` under the root (directories made).
    fn write(&self, path: &str, contents: impl AsRef<[u8]>) {
        let file = self.root().join(path.trim_start_matches('/'));
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).expect("directories");
        }
        std::fs::write(file, contents).expect("write");
    }

    /// Empty files at each path, for a page's images and scripts.
    fn touch(&self, paths: &[&str]) {
        for path in paths {
            self.write(path, b"x");
        }
    }

    /// Closures over this root, with no small-file memory (a file written
    /// is what the next request sees).
    fn closures(&self, config: ClosureConfig) -> Closures {
        let mut files = FilesConfig::new(self.root());
        files.small_file_cache_bytes = 0;
        Closures::new(StaticFiles::new(&files).expect("root opens"), config)
    }
}

fn show(closure: &[ClosureEntry]) -> Vec<String> {
    closure
        .iter()
        .map(|e| {
            let class = if e.render_blocking {
                "blocking"
            } else {
                "later"
            };
            format!("{class} {} {}", e.kind, e.target)
        })
        .collect()
}

fn targets(closure: &[ClosureEntry]) -> Vec<&str> {
    closure.iter().map(|e| e.target.as_str()).collect()
}

#[tokio::test]
async fn render_blocking_first_then_images_in_document_order() {
    let site = Site::new();
    site.write(
        "/index.html",
        r#"<!doctype html><html><head>
        <link rel=icon href=/favicon.ico>
        <link rel=stylesheet href=/css/site.css>
        <script src=/js/analytics.js async></script>
        <script src=/js/app.js></script>
        <script src=/js/late.js defer></script>
        <link rel=modulepreload href=/js/mod.js>
        </head><body>
        <img src=/img/3.png><img src=img/1.png>
        <img src="/img/2.png?v=7#frag">
        <video src=/movie.mp4 autoplay></video>
        <iframe src=/frame.html></iframe>
        <img src=/img/1.png>
        </body></html>"#,
    );
    site.write("/css/site.css", ".hero { background: url(../img/bg.png) }");
    site.touch(&[
        "/favicon.ico",
        "/js/analytics.js",
        "/js/app.js",
        "/js/late.js",
        "/js/mod.js",
        "/img/1.png",
        "/img/2.png",
        "/img/3.png",
        "/img/bg.png",
        "/movie.mp4",
        "/frame.html",
    ]);
    let closures = site.closures(ClosureConfig::default());
    let closure = closures.closure("/", HOST).await;
    assert_eq!(
        show(&closure),
        [
            "blocking style /css/site.css",
            "blocking script /js/app.js",
            "blocking script /js/mod.js",
            "later icon /favicon.ico",
            "later script /js/analytics.js",
            "later script /js/late.js",
            "later image /img/3.png",
            "later image /img/1.png",
            "later image /img/2.png?v=7",
            "later image /img/bg.png",
        ]
    );
    // The same page by its own name and with a query: the same file.
    assert_eq!(closures.closure("/index.html", HOST).await, closure);
    assert_eq!(closures.closure("/?utm=x", HOST).await, closure);
}

#[tokio::test]
async fn stylesheets_are_followed_through_their_imports() {
    let site = Site::new();
    site.write(
        "/page.html",
        "<link rel=stylesheet href=/a.css><style>@import '/inline.css';</style><img src=/photo.jpg>",
    );
    site.write(
        "/a.css",
        "@import url(b.css);\n@font-face { font-family: A; src: url(/fonts/a.woff2) format('woff2') }\nbody { background: url(/a-bg.png) }",
    );
    site.write(
        "/b.css",
        "@import 'c.css';\n@font-face { font-family: B; src: url(/fonts/b.woff2) }\n.x { background: url(/b-bg.png) }",
    );
    site.write(
        "/c.css",
        "@import 'd.css';\n@font-face { font-family: C; src: url(/fonts/c.woff2) }",
    );
    site.write(
        "/d.css",
        "@font-face { font-family: D; src: url(/fonts/d.woff2) }",
    );
    site.write(
        "/inline.css",
        "@font-face { font-family: I; src: url(/fonts/i.woff2) }",
    );
    site.touch(&[
        "/photo.jpg",
        "/a-bg.png",
        "/b-bg.png",
        "/fonts/a.woff2",
        "/fonts/b.woff2",
        "/fonts/c.woff2",
        "/fonts/d.woff2",
        "/fonts/i.woff2",
    ]);
    let closures = site.closures(ClosureConfig::default());
    let closure = closures.closure("/page.html", HOST).await;
    // Depth 2 (the default): a.css, then b.css (level 1) and c.css (level
    // 2) are read; d.css is named by c.css, so it is in, but not read.
    assert_eq!(
        show(&closure),
        [
            "blocking style /a.css",
            "blocking style /inline.css",
            "blocking style /b.css",
            "blocking font /fonts/a.woff2",
            "blocking font /fonts/i.woff2",
            "blocking style /c.css",
            "blocking font /fonts/b.woff2",
            "blocking style /d.css",
            "blocking font /fonts/c.woff2",
            "later image /photo.jpg",
            "later image /a-bg.png",
            "later image /b-bg.png",
        ]
    );

    let shallow = site.closures(ClosureConfig {
        extract: ExtractConfig {
            css_import_depth: 0,
            ..ExtractConfig::default()
        },
        ..ClosureConfig::default()
    });
    let closure = shallow.closure("/page.html", HOST).await;
    assert!(targets(&closure).contains(&"/b.css"));
    assert!(targets(&closure).contains(&"/fonts/a.woff2"));
    assert!(!targets(&closure).contains(&"/fonts/b.woff2"));
}

#[tokio::test]
async fn only_the_pages_own_scheme_and_host() {
    let site = Site::new();
    site.write(
        "/index.html",
        r#"<img src=http://other.test/a.png>
        <img src=//cdn.test/b.png>
        <img src=http://example.test/c.png>
        <img src=HTTP://EXAMPLE.TEST:80/d.png>
        <img src=https://example.test/e.png>
        <img src=http://example.test:8080/f.png>
        <img src=http://user@example.test/g.png>
        <img src=data:image/png;base64,AAAA>
        <link rel=stylesheet href=http://cdn.test/x.css>"#,
    );
    site.touch(&[
        "/a.png", "/b.png", "/c.png", "/d.png", "/e.png", "/f.png", "/g.png", "/x.css",
    ]);
    let closures = site.closures(ClosureConfig::default());
    let closure = closures.closure("/", HOST).await;
    assert_eq!(targets(&closure), ["/c.png", "/d.png"]);
    // Over https, the https reference is the page's own.
    let closure = closures.closure_for(PageScheme::Https, "/", HOST).await;
    assert_eq!(targets(&closure), ["/e.png"]);
    // Another port is another host.
    let closure = closures.closure("/", "example.test:8080").await;
    assert_eq!(targets(&closure), ["/f.png"]);
}

#[tokio::test]
async fn nothing_outside_the_root_nor_what_the_files_handler_refuses() {
    let site = Site::new();
    std::fs::write(site.dir.path().join("secret.png"), b"secret").expect("write");
    std::os::unix::fs::symlink(
        site.dir.path().join("secret.png"),
        site.root().join("leak.png"),
    )
    .expect("symlink");
    site.write("/.hidden.png", b"x");
    site.write("/ok.png", b"x");
    std::fs::create_dir(site.root().join("dir")).expect("directory");
    site.write(
        "/index.html",
        r#"<img src=/../secret.png>
        <img src=../../secret.png>
        <img src=/%2e%2e/secret.png>
        <img src=/..%2fsecret.png>
        <img src=/leak.png>
        <img src=/.hidden.png>
        <img src=/missing.png>
        <img src=/dir>
        <link rel=stylesheet href=/..%2f..%2fsecret.css>
        <img src=/ok.png>"#,
    );
    let closures = site.closures(ClosureConfig::default());
    assert_eq!(targets(&closures.closure("/", HOST).await), ["/ok.png"]);
    // A page the files handler refuses has no closure.
    for target in ["/../site/index.html", "/..%2fsite/index.html", "/leak.png"] {
        assert!(closures.closure(target, HOST).await.is_empty(), "{target}");
    }
}

#[tokio::test]
async fn a_changed_page_or_stylesheet_gives_a_new_closure() {
    let site = Site::new();
    site.write(
        "/index.html",
        "<link rel=stylesheet href=/s.css><img src=/one.png>",
    );
    site.write(
        "/s.css",
        "@font-face { font-family: A; src: url(/a.woff2) }",
    );
    site.touch(&["/one.png", "/two.png", "/a.woff2", "/b.woff2"]);
    let closures = site.closures(ClosureConfig::default());
    let first = closures.closure("/", HOST).await;
    assert_eq!(targets(&first), ["/s.css", "/a.woff2", "/one.png"]);
    // Unchanged: the kept closure itself.
    assert!(Arc::ptr_eq(&first, &closures.closure("/", HOST).await));

    site.write(
        "/index.html",
        "<link rel=stylesheet href=/s.css><img src=/two.png><!-- longer -->",
    );
    let second = closures.closure("/", HOST).await;
    assert_eq!(targets(&second), ["/s.css", "/a.woff2", "/two.png"]);

    site.write(
        "/s.css",
        "@font-face { font-family: B; src: url(/b.woff2) } /* longer */",
    );
    let third = closures.closure("/", HOST).await;
    assert_eq!(targets(&third), ["/s.css", "/b.woff2", "/two.png"]);
    assert_eq!(closures.kept_pages(), 1, "one entry per page, replaced");

    // A page that became something else than HTML has none.
    std::fs::remove_file(site.root().join("index.html")).expect("remove");
    site.write("/index.html/x", b"now a directory");
    assert!(closures.closure("/", HOST).await.is_empty());
}

#[tokio::test]
async fn the_number_of_closures_kept_is_bounded() {
    let site = Site::new();
    for page in ["a", "b", "c", "d"] {
        site.write(&format!("/{page}.html"), format!("<img src=/{page}.png>"));
        site.touch(&[&format!("/{page}.png")]);
    }
    let closures = site.closures(ClosureConfig {
        max_pages: 2,
        ..ClosureConfig::default()
    });
    let a = closures.closure("/a.html", HOST).await;
    closures.closure("/b.html", HOST).await;
    // `a` used again: `b` is now the least recently used.
    assert!(Arc::ptr_eq(&a, &closures.closure("/a.html", HOST).await));
    closures.closure("/c.html", HOST).await;
    assert_eq!(closures.kept_pages(), 2);
    let kept: HashSet<String> = lock(&closures.state)
        .pages
        .keys()
        .map(|k| k.path.clone())
        .collect();
    assert_eq!(
        kept,
        HashSet::from(["/a.html".to_owned(), "/c.html".to_owned()])
    );
    // Hosts are keys too, under the same bound.
    for host in ["one.test", "two.test", "three.test"] {
        closures.closure("/d.html", host).await;
        assert_eq!(closures.kept_pages(), 2);
    }
    // And entries per closure.
    site.write(
        "/many.html",
        (0..50)
            .map(|i| format!("<img src=/{}.png>", ["a", "b", "c", "d"][i % 4]))
            .chain((0..50).map(|i| format!("<img src=/n{i}.png>")))
            .collect::<String>(),
    );
    for i in 0..50 {
        site.touch(&[&format!("/n{i}.png")]);
    }
    let few = site.closures(ClosureConfig {
        max_entries: 10,
        ..ClosureConfig::default()
    });
    assert_eq!(few.closure("/many.html", HOST).await.len(), 10);
}

#[tokio::test]
async fn huge_or_malformed_pages_give_a_partial_closure() {
    let site = Site::new();
    site.touch(&[
        "/first.png",
        "/beyond.png",
        "/in.png",
        "/after.png",
        "/f.woff2",
    ]);
    let config = ClosureConfig {
        extract: ExtractConfig {
            max_html_bytes: 64 << 10,
            max_css_bytes: 16 << 10,
            ..ExtractConfig::default()
        },
        ..ClosureConfig::default()
    };
    let closures = site.closures(config);

    let mut huge = b"<img src=/first.png>".to_vec();
    huge.resize(1 << 20, b' ');
    huge.extend_from_slice(b"<img src=/beyond.png>");
    site.write("/huge.html", &huge);
    assert_eq!(
        targets(&closures.closure("/huge.html", HOST).await),
        ["/first.png"]
    );

    let mut css = b"@font-face { src: url(/f.woff2) } .a { background: url(/in.png) }".to_vec();
    css.resize(1 << 20, b' ');
    css.extend_from_slice(b".b { background: url(/beyond.png) }");
    site.write("/huge.css", &css);
    site.write("/styled.html", "<link rel=stylesheet href=/huge.css>");
    assert_eq!(
        targets(&closures.closure("/styled.html", HOST).await),
        ["/huge.css", "/f.woff2", "/in.png"]
    );

    let malformed = [
        &b"<img src=/in.png><div <img src=\"/after.png"[..],
        b"\xFF\xFE\x00<\x00i\x00m\x00g",
        b"<img src=/in.png><style>@import url(/broken.css",
        b"<link rel=stylesheet href=/broken.css><img src=/after.png>",
    ];
    site.write(
        "/broken.css",
        "@font-face { src: url(/f.woff2) } .a { background: url(",
    );
    for (i, body) in malformed.iter().enumerate() {
        site.write(&format!("/m{i}.html"), body);
        let closure = closures.closure(&format!("/m{i}.html"), HOST).await;
        assert!(closure.len() <= 3, "{i}: {closure:?}");
    }
    assert_eq!(
        targets(&closures.closure("/m0.html", HOST).await),
        ["/in.png"]
    );
    assert_eq!(
        targets(&closures.closure("/m3.html", HOST).await),
        ["/broken.css", "/f.woff2", "/after.png"]
    );

    let mut deep = "<img src=/in.png>".to_owned();
    deep.push_str(&"<div>".repeat(20_000));
    deep.push_str("<img src=/after.png>");
    site.write("/deep.html", deep);
    let _ = closures.closure("/deep.html", HOST).await;
}

#[tokio::test]
async fn no_closure_for_what_is_not_an_html_page_or_a_plain_host() {
    let site = Site::new();
    site.write("/index.html", "<img src=/a.png>");
    site.write("/data.json", "{\"img\": \"<img src=/a.png>\"}");
    site.touch(&["/a.png"]);
    let closures = site.closures(ClosureConfig::default());
    assert!(closures.closure("/data.json", HOST).await.is_empty());
    assert!(closures.closure("/missing.html", HOST).await.is_empty());
    for host in [
        "",
        "user@example.test",
        "example.test/path",
        "example.test#f",
        "example.test?q",
        "exa mple.test",
        &"a".repeat(MAX_HOST_BYTES + 1),
    ] {
        assert!(closures.closure("/", host).await.is_empty(), "{host:?}");
    }
    for target in ["index.html", "//other.test/", "http://example.test/", "*"] {
        assert!(closures.closure(target, HOST).await.is_empty(), "{target}");
    }
    assert_eq!(
        targets(&closures.closure("/", "EXAMPLE.test").await),
        ["/a.png"]
    );
    assert_eq!(
        targets(&closures.closure("/", "[::1]:8000").await),
        ["/a.png"]
    );
}

#[test]
fn the_page_url_is_the_targets_on_the_hosts_origin() {
    let url =
        |host: &str, target: &str| page_url(PageScheme::Http, host, target).map(|u| u.to_string());
    assert_eq!(
        url("example.test", "/a/b.html?q=1").as_deref(),
        Some("http://example.test/a/b.html?q=1")
    );
    assert_eq!(
        url("example.test", "/../x").as_deref(),
        Some("http://example.test/x")
    );
    assert_eq!(url("example.test", "//evil.test/"), None);
}
