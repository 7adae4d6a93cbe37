//! Any request target through the origin's path resolution: it never panics,
//! and a path it accepts can never leave the document root: no segment is
//! empty, `.`, `..` or hidden (`.well-known` aside), none holds a `/` or a NUL, and the decoded
//! form starts with `/`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use origin::files::path::UrlPath;

fuzz_target!(|data: &[u8]| {
    let Ok(target) = std::str::from_utf8(data) else {
        return;
    };
    let Ok((path, _query)) = UrlPath::from_target(target) else {
        return;
    };
    for segment in path.segments() {
        assert!(!segment.is_empty());
        assert!(segment != "." && segment != "..", "{segment:?}");
        assert!(
            !segment.starts_with('.') || segment == ".well-known",
            "{segment:?}"
        );
        assert!(
            !segment.contains('/') && !segment.contains('\0'),
            "{segment:?}"
        );
    }
    assert!(path.decoded().starts_with('/'));
});
