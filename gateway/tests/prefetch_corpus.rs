//! The extraction corpus: for every `prefetch-corpus/NAME.html` (or `.css`)
//! beside this file, `NAME.expected` lists what a browser would fetch, one
//! `KIND URL` per line in order, and the extractor must produce exactly that.
//!
//! `.expected` lines starting with `#` are comments; lines starting with `@`
//! set the case up:
//!
//! - `@document URL`: the page's (or stylesheet's) URL; default
//!   `http://example.test/corpus/NAME.html` (`.css`).
//! - `@content-type VALUE`: the response's `Content-Type`; default none.
//! - `@viewport-width N`: [`ExtractConfig::viewport_width`].
//!
//! HTML pages are also fed in small chunks, with the first parse as early as
//! the scanner allows, and must give the same list as in one piece.
//!
//! The generated page corpus of the page-load benchmark (testbed's `corpus`)
//! is checked too: the extractor must find every object of each page, the
//! HTML's from the HTML and the stylesheets' from the stylesheets, so that the
//! benchmark exercises the prefetch queue as a real page would.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gateway::prefetch::extract::PRESCAN_BYTES;
use gateway::prefetch::{ExtractConfig, HtmlScanner, extract_css};
use testbed::corpus::{self, ObjectKind};
use url::Url;

/// Fewer cases than this means the corpus went missing, not that it passed.
const MIN_CASES: usize = 30;

#[derive(Debug)]
struct Case {
    name: String,
    css: bool,
    body: Vec<u8>,
    document: Url,
    content_type: Option<String>,
    config: ExtractConfig,
    expected: Vec<String>,
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/prefetch-corpus")
}

fn cases() -> Vec<Case> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("the corpus directory exists")
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("html" | "css")))
        .collect();
    paths.sort();
    paths.iter().map(|p| load(p)).collect()
}

fn load(path: &Path) -> Case {
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a UTF-8 file name")
        .to_owned();
    let css = path.extension().is_some_and(|e| e == "css");
    let body = std::fs::read(path).expect("a readable corpus page");
    let expected_path = path.with_extension("expected");
    let listing = std::fs::read_to_string(&expected_path)
        .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
    let mut document = Url::parse(&format!(
        "http://example.test/corpus/{name}.{}",
        if css { "css" } else { "html" }
    ))
    .expect("the default document URL");
    let mut content_type = None;
    let mut config = ExtractConfig::default();
    let mut expected = Vec::new();
    for line in listing.lines().map(str::trim_end) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(directive) = line.strip_prefix('@') {
            let (key, value) = directive
                .split_once(' ')
                .unwrap_or_else(|| panic!("{name}: directive without a value: {line}"));
            match key {
                "document" => document = Url::parse(value).expect("@document is a URL"),
                "content-type" => content_type = Some(value.to_owned()),
                "viewport-width" => {
                    config.viewport_width = value.parse().expect("@viewport-width is a number");
                }
                _ => panic!("{name}: unknown directive {key}"),
            }
            continue;
        }
        expected.push(line.to_owned());
    }
    Case {
        name,
        css,
        body,
        document,
        content_type,
        config,
        expected,
    }
}

/// The scanner's findings, `chunk` bytes at a time (`None`: in one piece).
fn scan_html(case: &Case, chunk: Option<usize>, first_scan: Option<usize>) -> (Vec<String>, u32) {
    let mut scanner = HtmlScanner::new(
        case.document.clone(),
        case.content_type.as_deref(),
        &case.config,
    );
    if let Some(first) = first_scan {
        scanner = scanner.first_scan_at(first);
    }
    let mut found = Vec::new();
    let mut drain = |scanner: &mut HtmlScanner| {
        while let Some(resource) = scanner.poll_resource() {
            found.push(resource.to_string());
        }
    };
    match chunk {
        None => scanner.handle_chunk(&case.body),
        Some(size) => {
            for piece in case.body.chunks(size) {
                scanner.handle_chunk(piece);
                drain(&mut scanner);
            }
        }
    }
    scanner.handle_end();
    drain(&mut scanner);
    (found, scanner.passes())
}

fn scan_css(case: &Case) -> Vec<String> {
    extract_css(
        &case.document,
        case.content_type.as_deref(),
        None,
        &case.body,
        &case.config,
    )
    .into_vec()
    .iter()
    .map(ToString::to_string)
    .collect()
}

fn diff(expected: &[String], actual: &[String]) -> String {
    let expected = expected.join("\n") + "\n";
    let actual = actual.join("\n") + "\n";
    similar::TextDiff::from_lines(&expected, &actual)
        .unified_diff()
        .header("expected", "actual")
        .to_string()
}

#[test]
fn every_corpus_page_gives_exactly_its_expected_list() {
    let cases = cases();
    assert!(
        cases.len() >= MIN_CASES,
        "only {} corpus cases found",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        assert!(
            !case.expected.is_empty() || case.name.starts_with("empty"),
            "{}: an empty expected list cannot tell a broken extractor apart",
            case.name
        );
        let actual = if case.css {
            scan_css(case)
        } else {
            scan_html(case, None, None).0
        };
        if actual != case.expected {
            failures.push(format!("{}:\n{}", case.name, diff(&case.expected, &actual)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus cases differ:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn chunked_feeding_finds_the_same_list_in_the_same_order() {
    let chunk_sizes = [
        1, 2, 3, 5, 7, 8, 11, 13, 17, 31, 64, 100, 127, 257, 509, 997, 1000, 2048, 4096,
    ];
    let mut cut_passes = 0;
    let mut failures = Vec::new();
    for case in cases().iter().filter(|c| !c.css) {
        let (whole, _) = scan_html(case, None, None);
        for size in chunk_sizes {
            // The earliest first parse there is: pages are cut (and parsed
            // cut) at every doubling from PRESCAN_BYTES on, at a place that
            // moves with the chunk size.
            let (chunked, passes) = scan_html(case, Some(size), Some(PRESCAN_BYTES));
            if passes > 1 {
                cut_passes += 1;
            }
            if chunked != whole {
                failures.push(format!(
                    "{} in chunks of {size}:\n{}",
                    case.name,
                    diff(&whole, &chunked)
                ));
            }
            let (default, _) = scan_html(case, Some(size), None);
            if default != whole {
                failures.push(format!(
                    "{} in chunks of {size}, default first parse:\n{}",
                    case.name,
                    diff(&whole, &default)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        cut_passes >= 50,
        "only {cut_passes} chunked runs parsed a cut page: the test would not notice a cut going wrong"
    );
}

#[test]
fn the_scanner_parses_a_growing_page_a_logarithmic_number_of_times() {
    let news = load(&corpus_dir().join("news-front.html"));
    let (_, passes) = scan_html(&news, Some(1), Some(PRESCAN_BYTES));
    // 40 KiB from 1 KiB on: 1, 2, 4, 8, 16, 32 KiB, then the end.
    assert!(news.body.len() > 32 << 10);
    assert_eq!(passes, 7);
}

/// The gateway's name for what the corpus generated.
fn prefetch_kind(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::Html => "document",
        ObjectKind::Css => "style",
        ObjectKind::Js => "script",
        ObjectKind::Image => "image",
        ObjectKind::Font => "font",
    }
}

#[test]
fn the_generated_page_corpus_is_found_in_full() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pages = corpus::generate(dir.path(), 11).expect("the corpus generates");
    let origin = Url::parse("http://corpus.test/").expect("the origin URL");
    let config = ExtractConfig::default();
    let listed = |objects: &mut dyn Iterator<Item = &corpus::ObjectSpec>| -> BTreeSet<String> {
        objects
            .map(|o| {
                format!(
                    "{} {}",
                    prefetch_kind(o.kind),
                    origin.join(&o.path).expect("a URL")
                )
            })
            .collect()
    };
    for page in &pages {
        let document = origin.join(&page.url_path).expect("the page URL");
        let html = std::fs::read(dir.path().join(&page.name).join("index.html")).expect("the HTML");
        // In network-sized pieces, as the gateway sees a response.
        let mut scanner = HtmlScanner::new(document, Some("text/html; charset=utf-8"), &config);
        let mut from_html = Vec::new();
        for piece in html.chunks(1460) {
            scanner.handle_chunk(piece);
            while let Some(resource) = scanner.poll_resource() {
                from_html.push(resource.to_string());
            }
        }
        scanner.handle_end();
        while let Some(resource) = scanner.poll_resource() {
            from_html.push(resource.to_string());
        }
        let from_html_set: BTreeSet<String> = from_html.iter().cloned().collect();
        assert_eq!(
            from_html.len(),
            from_html_set.len(),
            "{}: duplicates",
            page.name
        );
        assert_eq!(
            from_html_set,
            listed(&mut page.at_depth(1)),
            "{}: the HTML's references",
            page.name
        );

        let mut from_css = BTreeSet::new();
        for stylesheet in page.of_kind(ObjectKind::Css) {
            let url = origin.join(&stylesheet.path).expect("the stylesheet URL");
            let body = std::fs::read(dir.path().join(stylesheet.path.trim_start_matches('/')))
                .expect("the stylesheet");
            from_css.extend(
                extract_css(&url, Some("text/css"), None, &body, &config)
                    .into_vec()
                    .iter()
                    .map(ToString::to_string),
            );
        }
        assert!(
            !from_css.is_empty(),
            "{}: the stylesheets reference something",
            page.name
        );
        assert_eq!(
            from_css,
            listed(&mut page.at_depth(2)),
            "{}: the stylesheets' references",
            page.name
        );
    }
}
