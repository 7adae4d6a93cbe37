//! Any bytes as an HTML page and as a stylesheet: the extraction both
//! daemons use (`page-resources`) never panics, and every URL it yields is
//! absolute, has no fragment and keeps the document's scheme (what the
//! prefetch queue and the origin's closure rely on).
//!
//! The first byte splits the input: HTML before the split point, CSS after.
#![no_main]

use libfuzzer_sys::fuzz_target;
use page_resources::{ExtractConfig, extract_css, extract_html};
use url::Url;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let split = (usize::from(first) * rest.len()) / 255;
    let (html, css) = rest.split_at(split.min(rest.len()));
    let config = ExtractConfig::default();
    let page = Url::parse("http://demo.example/dir/page.html").expect("valid URL");
    let sheet = Url::parse("http://demo.example/css/site.css").expect("valid URL");
    let content_type = if first & 1 == 0 {
        Some("text/html; charset=windows-1252")
    } else {
        None
    };
    for resource in extract_html(&page, content_type, html, &config) {
        assert_eq!(resource.url.scheme(), "http", "{}", resource.url);
        assert!(resource.url.fragment().is_none(), "{}", resource.url);
    }
    for resource in extract_css(&sheet, Some("text/css"), None, css, &config).into_vec() {
        assert_eq!(resource.url.scheme(), "http", "{}", resource.url);
        assert!(resource.url.fragment().is_none(), "{}", resource.url);
    }
});
