//! Static files: a request head in, a response head and a body reader out.
//!
//! [`StaticFiles::respond`] answers GET and HEAD from a directory tree the way
//! nginx's static module does, minus listings: Content-Type from the extension,
//! strong ETag and Last-Modified, the preconditions of RFC 9110 §13 (304, 412),
//! single byte ranges (206, 416), `/dir` → 301 `/dir/`, `/dir/` → its index file.
//! Several ranges in one request are answered with the whole file (200), which
//! RFC 9110 §14.2 permits. It never writes anything, never lists a directory,
//! never serves a dotfile (except under `.well-known`), and never follows a symlink
//! out of the root.
//!
//! The body is a [`FileBody`]: nothing, a small generated text, or a region of an
//! open file read in chunks of the caller's size ([`FileBody::read_chunk`]), so a
//! large file is never held in memory. The caller (the server driver) turns the
//! head into RESPONSE_HEAD, each chunk into RESPONSE_BODY and the byte count into
//! RESPONSE_END.
//!
//! The decisions are pure and tested alone: [`path`] (target to safe segments),
//! [`conditional`] (validators, preconditions, ranges). File system access is in
//! one blocking function run on tokio's blocking pool.

pub mod conditional;
pub mod path;

use std::fs::Metadata;
use std::io::{self, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use globset::{Glob, GlobMatcher};
use http::header::{
    ACCEPT_RANGES, ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG,
    LAST_MODIFIED, LOCATION,
};
use http::{HeaderValue, Method, StatusCode};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use self::conditional::{
    Precondition, RangeRequest, Validators, evaluate_preconditions, if_range_allows, parse_range,
};
use self::path::UrlPath;
use crate::http::{RequestHead, ResponseHead, http_date};

/// The `[files]` section of the origin's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesConfig {
    /// The directory served as `/`. It must exist when the server starts.
    pub root: PathBuf,
    /// The file served for a directory URL (`/dir/`). A plain file name.
    #[serde(default = "default_index")]
    pub index: String,
    /// Cache-Control values by URL path glob (`globset` syntax; `*` also matches
    /// `/`), first match wins: `[["*.html", "no-cache"], ["/assets/**",
    /// "max-age=31536000, immutable"]]`. A directory URL is matched as the path of
    /// its index file (`/dir/index.html`).
    #[serde(default)]
    pub cache_control: Vec<(String, String)>,
}

fn default_index() -> String {
    "index.html".to_owned()
}

impl FilesConfig {
    /// A configuration serving `root` with the defaults.
    pub fn new(root: impl Into<PathBuf>) -> FilesConfig {
        FilesConfig {
            root: root.into(),
            index: default_index(),
            cache_control: Vec::new(),
        }
    }

    /// Rejects an index that is not a plain, visible file name, a pattern that is
    /// not a glob, and a Cache-Control value that is not a valid field value.
    /// (The root is checked by [`StaticFiles::new`], which opens it.)
    pub fn validate(&self) -> Result<(), FilesError> {
        self.compile().map(|_| ())
    }

    fn compile(&self) -> Result<Vec<(GlobMatcher, HeaderValue)>, FilesError> {
        let index = &self.index;
        if index.is_empty()
            || index.contains(['/', '\\', '\0'])
            || index.starts_with('.')
            || index.chars().any(char::is_control)
        {
            return Err(FilesError::Index(index.clone()));
        }
        self.cache_control
            .iter()
            .enumerate()
            .map(|(i, (pattern, value))| {
                let glob = Glob::new(pattern).map_err(|source| FilesError::Pattern {
                    position: i,
                    source,
                })?;
                let value = HeaderValue::from_str(value).map_err(|_| FilesError::CacheValue {
                    position: i,
                    value: value.clone(),
                })?;
                Ok((glob.compile_matcher(), value))
            })
            .collect()
    }
}

/// Why a [`FilesConfig`] cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// `files.root` could not be resolved (missing, unreadable).
    #[error("files.root {path:?}: {source}")]
    Root {
        /// The configured root.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// `files.root` is not a directory.
    #[error("files.root {0:?} is not a directory")]
    RootNotDirectory(PathBuf),
    /// `files.index` is empty, has a separator or control character, or is hidden.
    #[error("files.index {0:?} must be a plain file name")]
    Index(String),
    /// `files.cache_control[position]` has an invalid glob.
    #[error("files.cache_control[{position}]: {source}")]
    Pattern {
        /// Index of the entry in the list.
        position: usize,
        /// What globset said.
        source: globset::Error,
    },
    /// `files.cache_control[position]` has a value with control characters.
    #[error("files.cache_control[{position}]: invalid header value {value:?}")]
    CacheValue {
        /// Index of the entry in the list.
        position: usize,
        /// The refused value.
        value: String,
    },
}

/// A response: the head, and the body to send after it.
#[derive(Debug)]
pub struct FileResponse {
    /// Status line and fields, ready for [`ResponseHead::render`].
    pub head: ResponseHead,
    /// What follows the head.
    pub body: FileBody,
}

impl FileResponse {
    /// A short text/plain error response.
    pub fn error(status: StatusCode) -> FileResponse {
        let (head, body) = ResponseHead::error(status);
        FileResponse {
            head,
            body: FileBody::Bytes(body),
        }
    }
}

/// A response body, read in chunks by [`FileBody::read_chunk`].
#[derive(Debug)]
pub enum FileBody {
    /// No body (HEAD, 304, an empty file).
    Empty,
    /// A small generated body (error texts); what is left of it.
    Bytes(Bytes),
    /// A region of an open file.
    File(FileRegion),
}

impl FileBody {
    /// Bytes still to be read.
    pub fn remaining(&self) -> u64 {
        match self {
            FileBody::Empty => 0,
            FileBody::Bytes(bytes) => bytes.len() as u64,
            FileBody::File(region) => region.remaining,
        }
    }

    /// The next chunk of at most `max` bytes (`max` of 0 counts as 1), or `None`
    /// once the body is complete. An error (the file shrank or failed under us)
    /// means the body cannot be completed: the caller must abort the response
    /// (RESET), since the head already promised a length. After an error the body
    /// is not to be read again.
    pub async fn read_chunk(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        let max = max.max(1);
        match self {
            FileBody::Empty => Ok(None),
            FileBody::Bytes(bytes) if bytes.is_empty() => Ok(None),
            FileBody::Bytes(bytes) => Ok(Some(bytes.split_to(max.min(bytes.len())))),
            FileBody::File(region) => region.read_chunk(max).await,
        }
    }
}

/// `length` bytes of an open file from a position it has already been moved to.
#[derive(Debug)]
pub struct FileRegion {
    file: tokio::fs::File,
    remaining: u64,
}

impl FileRegion {
    async fn read_chunk(&mut self, max: usize) -> io::Result<Option<Bytes>> {
        if self.remaining == 0 {
            return Ok(None);
        }
        let want = usize::try_from(self.remaining).map_or(max, |r| r.min(max));
        let mut buf = vec![0u8; want];
        // read_exact fails with UnexpectedEof if the file was truncated after it
        // was opened: the head's length cannot be honoured, which the caller must
        // see as an error rather than a short body.
        self.file.read_exact(&mut buf).await?;
        self.remaining -= want as u64;
        Ok(Some(Bytes::from(buf)))
    }
}

/// Serves files under one root. Cheap to clone; share one per server.
#[derive(Debug, Clone)]
pub struct StaticFiles {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The canonical root: symlink-free, so a canonical path under it is inside.
    root: PathBuf,
    index: String,
    cache_control: Vec<(GlobMatcher, HeaderValue)>,
}

impl StaticFiles {
    /// Validates `config` and resolves its root (blocking file system calls, once).
    pub fn new(config: &FilesConfig) -> Result<StaticFiles, FilesError> {
        let cache_control = config.compile()?;
        let root = std::fs::canonicalize(&config.root).map_err(|source| FilesError::Root {
            path: config.root.clone(),
            source,
        })?;
        if !root.is_dir() {
            return Err(FilesError::RootNotDirectory(config.root.clone()));
        }
        Ok(StaticFiles {
            inner: Arc::new(Inner {
                root,
                index: config.index.clone(),
                cache_control,
            }),
        })
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Answers one request. Never fails: every refusal is a response (4xx, or 500
    /// for an I/O error, which is also logged). A HEAD gets the GET head and an
    /// empty body.
    pub async fn respond(&self, request: &RequestHead) -> FileResponse {
        let mut response = self.respond_get(request).await;
        if request.method == Method::HEAD {
            response.body = FileBody::Empty;
        }
        response
    }

    async fn respond_get(&self, request: &RequestHead) -> FileResponse {
        if request.method != Method::GET && request.method != Method::HEAD {
            return method_refusal(&request.method);
        }
        let (url_path, query) = match UrlPath::from_target(&request.target) {
            Ok(parsed) => parsed,
            Err(e) => return FileResponse::error(e.status()),
        };
        let inner = Arc::clone(&self.inner);
        let lookup_path = url_path.clone();
        let resolved = tokio::task::spawn_blocking(move || inner.resolve(&lookup_path)).await;
        match resolved {
            Ok(Ok(Resolved::File { file, meta, url })) => {
                self.file_response(request, file, &meta, &url).await
            }
            Ok(Ok(Resolved::Directory)) => redirect(&url_path, query),
            Ok(Err(LookupError::Io(e))) => {
                tracing::warn!(path = %url_path.decoded(), error = %e, "static file I/O error");
                FileResponse::error(StatusCode::INTERNAL_SERVER_ERROR)
            }
            Ok(Err(e)) => FileResponse::error(e.status()),
            Err(e) => {
                tracing::error!(error = %e, "static file lookup task failed");
                FileResponse::error(StatusCode::INTERNAL_SERVER_ERROR)
            }
        }
    }

    async fn file_response(
        &self,
        request: &RequestHead,
        file: std::fs::File,
        meta: &Metadata,
        url: &str,
    ) -> FileResponse {
        let len = meta.len();
        let validators = Validators::new(meta.mtime(), meta.mtime_nsec(), len, meta.ino());
        let etag = HeaderValue::from_str(&validators.etag);
        let Ok(etag) = etag else {
            return FileResponse::error(StatusCode::INTERNAL_SERVER_ERROR);
        };
        let last_modified = http_date(UNIX_EPOCH + Duration::from_secs(validators.last_modified));
        let cache_control = self.cache_control_for(url);
        let validator_fields = |head: &mut ResponseHead| {
            head.push(LAST_MODIFIED, last_modified.clone());
            head.push(ETAG, etag.clone());
            if let Some(value) = &cache_control {
                head.push(CACHE_CONTROL, value.clone());
            }
        };

        match evaluate_preconditions(request, &validators) {
            Precondition::Proceed => {}
            Precondition::NotModified => {
                let mut head = ResponseHead::new(StatusCode::NOT_MODIFIED);
                validator_fields(&mut head);
                return FileResponse {
                    head,
                    body: FileBody::Empty,
                };
            }
            Precondition::Failed => return FileResponse::error(StatusCode::PRECONDITION_FAILED),
        }

        let range = range_request(request, &validators);
        let (status, start, count) = match range {
            Some(RangeRequest::Single(spec)) => match spec.resolve(len) {
                Some((first, last)) => (StatusCode::PARTIAL_CONTENT, first, last - first + 1),
                None => {
                    let mut response = FileResponse::error(StatusCode::RANGE_NOT_SATISFIABLE);
                    response
                        .head
                        .push(CONTENT_RANGE, header_value(format!("bytes */{len}")));
                    return response;
                }
            },
            Some(RangeRequest::Multiple(_)) | None => (StatusCode::OK, 0, len),
        };

        let mut head = ResponseHead::new(status);
        head.push(CONTENT_TYPE, content_type(url));
        head.push(CONTENT_LENGTH, HeaderValue::from(count));
        if status == StatusCode::PARTIAL_CONTENT {
            let last = start + count - 1;
            head.push(
                CONTENT_RANGE,
                header_value(format!("bytes {start}-{last}/{len}")),
            );
        }
        validator_fields(&mut head);
        head.push(ACCEPT_RANGES, HeaderValue::from_static("bytes"));

        if request.method != Method::GET || count == 0 {
            return FileResponse {
                head,
                body: FileBody::Empty,
            };
        }
        let mut file = tokio::fs::File::from_std(file);
        if start > 0
            && let Err(e) = file.seek(SeekFrom::Start(start)).await
        {
            tracing::warn!(url, error = %e, "static file seek failed");
            return FileResponse::error(StatusCode::INTERNAL_SERVER_ERROR);
        }
        FileResponse {
            head,
            body: FileBody::File(FileRegion {
                file,
                remaining: count,
            }),
        }
    }

    /// The Cache-Control value of the first pattern matching `url`.
    fn cache_control_for(&self, url: &str) -> Option<HeaderValue> {
        self.inner
            .cache_control
            .iter()
            .find(|(glob, _)| glob.is_match(url))
            .map(|(_, value)| value.clone())
    }
}

/// The Range to honour: only for GET (RFC 9110 §14.2), only one Range field, only
/// when If-Range allows it, and only when it parses.
fn range_request(request: &RequestHead, validators: &Validators) -> Option<RangeRequest> {
    if request.method != Method::GET || request.header_count("range") != 1 {
        return None;
    }
    let value = request.header("range")?;
    if !if_range_allows(request, validators) {
        return None;
    }
    parse_range(value.as_bytes())
}

/// 405 for the methods RFC 9110 defines (with Allow), 501 for the others.
fn method_refusal(method: &Method) -> FileResponse {
    let known = [
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::OPTIONS,
        Method::PATCH,
        Method::TRACE,
        Method::CONNECT,
    ];
    if !known.contains(method) {
        return FileResponse::error(StatusCode::NOT_IMPLEMENTED);
    }
    let mut response = FileResponse::error(StatusCode::METHOD_NOT_ALLOWED);
    response
        .head
        .push(ALLOW, HeaderValue::from_static("GET, HEAD"));
    response
}

/// 301 from `/dir` to `/dir/`, query kept.
fn redirect(url_path: &UrlPath, query: Option<&str>) -> FileResponse {
    let location = url_path.directory_location(query);
    let Ok(location) = HeaderValue::from_str(&location) else {
        return FileResponse::error(StatusCode::BAD_REQUEST);
    };
    let mut response = FileResponse::error(StatusCode::MOVED_PERMANENTLY);
    response.head.push(LOCATION, location);
    response
}

/// Content-Type by extension; UTF-8 declared for text and JavaScript.
fn content_type(url: &str) -> HeaderValue {
    let mime = mime_guess::from_path(url).first_or_octet_stream();
    let essence = mime.essence_str();
    if mime.type_() == mime_guess::mime::TEXT || essence == "application/javascript" {
        header_value(format!("{essence}; charset=utf-8"))
    } else {
        header_value(essence.to_owned())
    }
}

/// A field value built from text this module generated (digits, a MIME type);
/// the fallback is never taken.
fn header_value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// What a lookup found.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "returned once per request and consumed at once"
)]
enum Resolved {
    /// A regular file, opened, with its metadata (from the open handle) and its URL
    /// path (the index file's for a directory URL).
    File {
        file: std::fs::File,
        meta: Metadata,
        url: String,
    },
    /// A directory named without the trailing slash.
    Directory,
}

/// Why a lookup found nothing to serve.
#[derive(Debug, thiserror::Error)]
enum LookupError {
    /// Nothing there, not a regular file, or not shown (hidden, no index).
    #[error("not found")]
    NotFound,
    /// A symlink resolving outside the root, or the file system denied access.
    #[error("forbidden")]
    Forbidden,
    /// Any other file system error.
    #[error("{0}")]
    Io(io::Error),
}

impl LookupError {
    fn status(&self) -> StatusCode {
        match self {
            LookupError::NotFound => StatusCode::NOT_FOUND,
            LookupError::Forbidden => StatusCode::FORBIDDEN,
            LookupError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<io::Error> for LookupError {
    fn from(e: io::Error) -> LookupError {
        match e.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG) => {
                LookupError::NotFound
            }
            Some(libc::EACCES | libc::EPERM) => LookupError::Forbidden,
            _ if e.kind() == io::ErrorKind::NotFound => LookupError::NotFound,
            _ => LookupError::Io(e),
        }
    }
}

impl Inner {
    /// Blocking: finds and opens the file `path` names.
    ///
    /// The joined path is canonicalized and must stay under the canonical root
    /// (a symlink out is 403) with no hidden component (a symlink to a dotfile is
    /// 404). The canonical path is then opened with `O_NOFOLLOW | O_NONBLOCK`, so a
    /// final component swapped for a symlink since is refused, a FIFO cannot block
    /// the open, and the type is checked again on the open handle.
    fn resolve(&self, path: &UrlPath) -> Result<Resolved, LookupError> {
        let mut joined = self.root.clone();
        joined.extend(path.segments());
        let canonical = self.canonical_inside(&joined)?;
        let meta = std::fs::metadata(&canonical)?;
        let (target, url) = if meta.is_dir() {
            if !path.is_directory_form() {
                return Ok(Resolved::Directory);
            }
            let index = self.canonical_inside(&canonical.join(&self.index))?;
            (index, format!("{}{}", path.decoded(), self.index))
        } else if path.is_directory_form() {
            return Err(LookupError::NotFound);
        } else {
            (canonical, path.decoded())
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&target)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(LookupError::NotFound);
        }
        Ok(Resolved::File { file, meta, url })
    }

    fn canonical_inside(&self, path: &Path) -> Result<PathBuf, LookupError> {
        let canonical = std::fs::canonicalize(path)?;
        let Ok(relative) = canonical.strip_prefix(&self.root) else {
            return Err(LookupError::Forbidden);
        };
        let hidden = relative
            .components()
            .any(|c| c.as_os_str().to_str().is_none_or(path::is_hidden));
        if hidden {
            return Err(LookupError::NotFound);
        }
        Ok(canonical)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_unknown_keys() -> Result<(), toml::de::Error> {
        let config: FilesConfig = toml::from_str(
            r#"
            root = "/srv/www"
            cache_control = [["*.html", "no-cache"], ["/assets/**", "max-age=31536000, immutable"]]
            "#,
        )?;
        assert_eq!(config.index, "index.html");
        assert_eq!(config.cache_control.len(), 2);
        assert!(config.validate().is_ok());
        assert!(toml::from_str::<FilesConfig>("root = \"/\"\nlisting = true").is_err());
        assert!(toml::from_str::<FilesConfig>("index = \"a.html\"").is_err());
        Ok(())
    }

    #[test]
    fn config_validation_names_the_key() {
        let mut config = FilesConfig::new("/srv");
        for bad in ["", "a/b", ".hidden", "..", "a\nb"] {
            config.index = bad.into();
            let error = config.validate().map_err(|e| e.to_string());
            assert!(
                matches!(&error, Err(m) if m.starts_with("files.index")),
                "{bad:?}: {error:?}"
            );
        }
        config.index = "index.htm".into();
        config.cache_control = vec![
            ("*.css".into(), "max-age=60".into()),
            ("a[".into(), "x".into()),
        ];
        let error = config.validate().map_err(|e| e.to_string());
        assert!(
            matches!(&error, Err(m) if m.starts_with("files.cache_control[1]")),
            "{error:?}"
        );
        config.cache_control = vec![("*".into(), "a\r\nSet-Cookie: x".into())];
        assert!(matches!(
            config.validate(),
            Err(FilesError::CacheValue { position: 0, .. })
        ));
    }

    #[test]
    fn content_types() {
        let text = |url: &str| {
            content_type(url)
                .to_str()
                .map(str::to_owned)
                .unwrap_or_default()
        };
        assert_eq!(text("/a.html"), "text/html; charset=utf-8");
        assert_eq!(text("/a.css"), "text/css; charset=utf-8");
        assert_eq!(text("/a.js"), "text/javascript; charset=utf-8");
        assert_eq!(text("/a.png"), "image/png");
        // The page corpus's fonts (bench/testbed's corpus) and other images.
        assert_eq!(text("/a.woff2"), "font/woff2");
        assert_eq!(text("/a.jpg"), "image/jpeg");
        assert_eq!(text("/a.gif"), "image/gif");
        assert_eq!(text("/a.json"), "application/json");
        assert_eq!(text("/noext"), "application/octet-stream");
    }

    #[test]
    fn method_refusals() {
        let response = method_refusal(&Method::POST);
        assert_eq!(response.head.status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(
            response.head.get("allow"),
            Some(&HeaderValue::from_static("GET, HEAD"))
        );
        let brew = Method::from_bytes(b"BREW").map(|m| method_refusal(&m).head.status);
        assert_eq!(brew.ok(), Some(StatusCode::NOT_IMPLEMENTED));
    }

    #[tokio::test]
    async fn bytes_body_in_chunks() -> io::Result<()> {
        let mut body = FileBody::Bytes(Bytes::from_static(b"hello"));
        assert_eq!(body.remaining(), 5);
        assert_eq!(body.read_chunk(2).await?.as_deref(), Some(&b"he"[..]));
        assert_eq!(body.read_chunk(0).await?.as_deref(), Some(&b"l"[..]));
        assert_eq!(body.read_chunk(64).await?.as_deref(), Some(&b"lo"[..]));
        assert_eq!(body.read_chunk(64).await?, None);
        assert_eq!(FileBody::Empty.read_chunk(1).await?, None);
        Ok(())
    }
}
