//! Static files: a request head in, a response head and a body reader out.
//!
//! [`StaticFiles::respond`] answers GET and HEAD from a directory tree the way
//! nginx's static module does, minus listings: Content-Type from the extension,
//! strong ETag and Last-Modified, the preconditions of RFC 9110 §13 (304, 412),
//! single byte ranges (206, 416), `/dir` → 301 `/dir/`, `/dir/` → its index file.
//! Several ranges in one request are answered with the whole file (200), which
//! RFC 9110 §14.2 permits. It never writes anything, never lists a directory,
//! never serves a dotfile (except under `.well-known`), and follows symlinks as
//! `files.follow_symlinks` says ([`FollowSymlinks`]; by default never out of the
//! root).
//!
//! Every refusal has a [`Refusal`]: the status it is answered with, a short code
//! for the access log and a sentence for the operator, logged with the request
//! (target `origin::files`; 403 at info, 5xx at warn, the rest at debug).
//!
//! The body is a [`FileBody`]: nothing, a small generated text or file, or a
//! region of an open file read in chunks of the caller's size
//! ([`FileBody::read_chunk`]), so a large file is never held in memory. A file
//! of at most [`WHOLE_FILE_MAX_BYTES`] is read whole by the blocking call that
//! finds it, so that a small file costs one trip to the blocking pool, not one
//! for the lookup and another per read. The caller (the server driver) turns the
//! head into RESPONSE_HEAD, each chunk into RESPONSE_BODY and the byte count into
//! RESPONSE_END.
//!
//! The decisions are pure and tested alone: [`path`] (target to safe segments),
//! and, in the `http-semantics` crate the gateway shares, preconditions and
//! ranges. File system access is in one blocking function run on tokio's
//! blocking pool.

pub mod path;
mod small_cache;

use std::fs::Metadata;
use std::io::{self, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use bytes::Bytes;
use globset::{Glob, GlobMatcher};
use http::header::{
    ACCEPT_RANGES, ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG,
    LAST_MODIFIED, LOCATION,
};
use http::{HeaderValue, Method, StatusCode};
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use http_semantics::conditional::{self, EntityTag, Precondition, Validators};
use http_semantics::range::{self, RangeRequest};
use http_semantics::{RequestHead, ResponseHead, http_date};

use self::path::{PathError, UrlPath};
use self::small_cache::{SmallFile, SmallFileCache};

/// A GET of a file of at most this many bytes reads it whole in the lookup's
/// blocking call (the file is open there already); a larger one is read in
/// chunks as the scheduler sends them.
pub const WHOLE_FILE_MAX_BYTES: u64 = 64 * 1024;

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
    /// Which symlinks below the root are followed, as nginx's
    /// `disable_symlinks`: `never`, `inside-root` (the default), `if-owner-matches`
    /// or `always`. See [`FollowSymlinks`].
    #[serde(default)]
    pub follow_symlinks: FollowSymlinks,
    /// With `never` or `if-owner-matches`: a directory below the root (a
    /// relative path of plain names) up to which symlinks are not checked, as
    /// nginx's `from=` part. Below it, they are.
    #[serde(default)]
    pub symlinks_from: Option<PathBuf>,
    /// Memory for small files (at most [`WHOLE_FILE_MAX_BYTES`] each) kept
    /// between lookups, bytes; 0 turns it off. See `small_file_recheck`.
    #[serde(default = "default_small_file_cache_bytes")]
    pub small_file_cache_bytes: u64,
    /// How long a small file kept in memory is served without being looked up
    /// again, milliseconds (nginx's `open_file_cache_valid`): a file changed,
    /// removed or made unreadable on disk is served as it was for at most this
    /// long. 0 turns the cache off.
    #[serde(
        default = "default_small_file_recheck",
        with = "gateway_transport::duration_ms"
    )]
    pub small_file_recheck: Duration,
}

/// `files.follow_symlinks`: which symlinks on the way from the root to a file are
/// followed. A refused one is answered 403. The root's own path is resolved once
/// at start, so symlinks in it are always allowed (nginx's
/// `disable_symlinks ... from=$document_root`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FollowSymlinks {
    /// No symlink below the root is followed, wherever it leads (nginx
    /// `disable_symlinks on`).
    Never,
    /// Symlinks are followed while the path they resolve to stays inside the
    /// root; one leading out is refused.
    #[default]
    InsideRoot,
    /// A symlink is followed only when it and the file or directory it resolves
    /// to have the same owner, wherever that is (nginx
    /// `disable_symlinks if_not_owner`).
    IfOwnerMatches,
    /// Every symlink is followed, wherever it leads (nginx
    /// `disable_symlinks off`, nginx's default).
    Always,
}

fn default_index() -> String {
    "index.html".to_owned()
}

fn default_small_file_cache_bytes() -> u64 {
    8 * 1024 * 1024
}

fn default_small_file_recheck() -> Duration {
    Duration::from_secs(1)
}

impl FilesConfig {
    /// A configuration serving `root` with the defaults.
    pub fn new(root: impl Into<PathBuf>) -> FilesConfig {
        FilesConfig {
            root: root.into(),
            index: default_index(),
            cache_control: Vec::new(),
            follow_symlinks: FollowSymlinks::default(),
            symlinks_from: None,
            small_file_cache_bytes: default_small_file_cache_bytes(),
            small_file_recheck: default_small_file_recheck(),
        }
    }

    /// Rejects an index that is not a plain, visible file name, a pattern that is
    /// not a glob, a Cache-Control value that is not a valid field value, and a
    /// `symlinks_from` that is not a relative path of plain, visible names or is
    /// given with a `follow_symlinks` that checks no symlinks.
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
        if let Some(from) = &self.symlinks_from {
            let invalid = |reason| FilesError::SymlinksFrom {
                value: from.clone(),
                reason,
            };
            if !matches!(
                self.follow_symlinks,
                FollowSymlinks::Never | FollowSymlinks::IfOwnerMatches
            ) {
                return Err(invalid(
                    "applies only with follow_symlinks = \"never\" or \"if-owner-matches\"",
                ));
            }
            let plain = |c: Component<'_>| match c {
                Component::Normal(name) => name.to_str().is_some_and(|n| !path::is_hidden(n)),
                _ => false,
            };
            if from.as_os_str().is_empty() || !from.components().all(plain) {
                return Err(invalid(
                    "must be a directory below the root: plain, visible names, no `..`, not absolute",
                ));
            }
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
    /// `files.symlinks_from` is not a plain relative path, or has no effect.
    #[error("files.symlinks_from {value:?}: {reason}")]
    SymlinksFrom {
        /// The configured value.
        value: PathBuf,
        /// What is wrong.
        reason: &'static str,
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

/// Why a request was not answered with the file: the status it gets
/// ([`Refusal::status`]), a short code for the access log ([`Refusal::code`]) and,
/// as its `Display`, a sentence for the operator (file system paths included:
/// it is logged, never sent to the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A method RFC 9110 defines, other than GET and HEAD (405).
    #[error("method not allowed")]
    MethodNotAllowed,
    /// A method RFC 9110 does not define (501).
    #[error("method not implemented")]
    MethodNotImplemented,
    /// The target's path is malformed (400) or has a dot segment or a hidden
    /// segment (404); [`PathError::status`] decides.
    #[error("bad path: {0}")]
    Path(PathError),
    /// The query cannot be carried into the Location of the `/dir` → `/dir/`
    /// redirect (not visible ASCII) (400).
    #[error("query cannot be carried into a Location field")]
    BadQuery,
    /// Nothing at that path (404).
    #[error("no such file")]
    NotFound,
    /// `/file/`: a file named as a directory (404).
    #[error("a file named as a directory")]
    FileAsDirectory,
    /// `/dir/` whose directory has no index file (404; no listings).
    #[error("directory has no index file")]
    NoIndex,
    /// A FIFO, socket or device (404).
    #[error("not a regular file")]
    NotRegularFile,
    /// The path resolves (through a symlink) to a hidden name (404).
    #[error("resolves to a hidden name: {resolved:?}")]
    HiddenTarget {
        /// The resolved path.
        resolved: PathBuf,
    },
    /// Too many levels of symlinks, or the last component became a symlink
    /// between the check and the open (404).
    #[error("too many levels of symlinks, or a symlink swapped in")]
    SymlinkLoop,
    /// A file name longer than the file system allows (404).
    #[error("file name too long")]
    NameTooLong,
    /// A symlink resolving outside the root, with `files.follow_symlinks =
    /// "inside-root"` (or `never`, when one appeared since the check) (403).
    #[error("symlink leads out of the root to {resolved:?}")]
    SymlinkOutOfRoot {
        /// Where the path resolves to.
        resolved: PathBuf,
    },
    /// A symlink below the root, with `files.follow_symlinks = "never"` (403).
    #[error("symlink {link:?} (files.follow_symlinks = \"never\")")]
    SymlinkRefused {
        /// The symlink.
        link: PathBuf,
    },
    /// A symlink whose owner is not the owner of what it resolves to, with
    /// `files.follow_symlinks = "if-owner-matches"` (403).
    #[error(
        "symlink {link:?} is owned by uid {link_owner}, what it resolves to by uid {target_owner} \
         (files.follow_symlinks = \"if-owner-matches\")"
    )]
    SymlinkOwnerDiffers {
        /// The symlink.
        link: PathBuf,
        /// The symlink's owner.
        link_owner: u32,
        /// The owner of the file or directory it resolves to.
        target_owner: u32,
    },
    /// The file system denied access (403).
    #[error("permission denied")]
    PermissionDenied,
    /// If-Match or If-Unmodified-Since does not hold (412).
    #[error("precondition failed")]
    PreconditionFailed,
    /// The one range asked for starts at or past the end of the file (416).
    #[error("range not satisfiable: the file has {len} bytes")]
    RangeNotSatisfiable {
        /// The file's length.
        len: u64,
    },
    /// Any other file system error (500).
    #[error("I/O error: {0}")]
    Io(String),
}

impl Refusal {
    /// The status code the request is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Refusal::MethodNotImplemented => StatusCode::NOT_IMPLEMENTED,
            Refusal::Path(e) => e.status(),
            Refusal::BadQuery => StatusCode::BAD_REQUEST,
            Refusal::NotFound
            | Refusal::FileAsDirectory
            | Refusal::NoIndex
            | Refusal::NotRegularFile
            | Refusal::HiddenTarget { .. }
            | Refusal::SymlinkLoop
            | Refusal::NameTooLong => StatusCode::NOT_FOUND,
            Refusal::SymlinkOutOfRoot { .. }
            | Refusal::SymlinkRefused { .. }
            | Refusal::SymlinkOwnerDiffers { .. }
            | Refusal::PermissionDenied => StatusCode::FORBIDDEN,
            Refusal::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            Refusal::RangeNotSatisfiable { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            Refusal::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A short code naming the reason, one token (`symlink-out-of-root`), for
    /// the access log's `reason` field; docs/origin.md lists them all.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::MethodNotAllowed => "method-not-allowed",
            Refusal::MethodNotImplemented => "method-not-implemented",
            Refusal::Path(e) => e.code(),
            Refusal::BadQuery => "bad-query",
            Refusal::NotFound => "not-found",
            Refusal::FileAsDirectory => "file-as-directory",
            Refusal::NoIndex => "no-index",
            Refusal::NotRegularFile => "not-regular-file",
            Refusal::HiddenTarget { .. } => "hidden-target",
            Refusal::SymlinkLoop => "symlink-loop",
            Refusal::NameTooLong => "name-too-long",
            Refusal::SymlinkOutOfRoot { .. } => "symlink-out-of-root",
            Refusal::SymlinkRefused { .. } => "symlink-refused",
            Refusal::SymlinkOwnerDiffers { .. } => "symlink-owner-differs",
            Refusal::PermissionDenied => "permission-denied",
            Refusal::PreconditionFailed => "precondition-failed",
            Refusal::RangeNotSatisfiable { .. } => "range-not-satisfiable",
            Refusal::Io(_) => "io-error",
        }
    }

    /// The response: a short error text, with `Allow` for 405 and
    /// `Content-Range: bytes */len` for 416.
    pub fn response(&self) -> FileResponse {
        let mut response = FileResponse::error(self.status());
        match self {
            Refusal::MethodNotAllowed => response
                .head
                .push(ALLOW, HeaderValue::from_static("GET, HEAD")),
            Refusal::RangeNotSatisfiable { len } => response
                .head
                .push(CONTENT_RANGE, header_value(format!("bytes */{len}"))),
            _ => {}
        }
        response
    }

    /// The refusal for a failed file system call: missing and unresolvable
    /// names are 404, denied access 403, anything else 500.
    fn from_io(e: &io::Error) -> Refusal {
        match e.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR) => Refusal::NotFound,
            Some(libc::ELOOP) => Refusal::SymlinkLoop,
            Some(libc::ENAMETOOLONG) => Refusal::NameTooLong,
            Some(libc::EACCES | libc::EPERM) => Refusal::PermissionDenied,
            _ if e.kind() == io::ErrorKind::NotFound => Refusal::NotFound,
            _ => Refusal::Io(e.to_string()),
        }
    }
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
    follow_symlinks: FollowSymlinks,
    /// Relative to the root; validated.
    symlinks_from: Option<PathBuf>,
    /// Small files found and read by earlier lookups; `None` when off.
    small_files: Option<SmallFileCache>,
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
                follow_symlinks: config.follow_symlinks,
                symlinks_from: config.symlinks_from.clone(),
                small_files: SmallFileCache::new(
                    config.small_file_cache_bytes,
                    config.small_file_recheck,
                ),
            }),
        })
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Answers one request. Never fails: every refusal is a response (4xx, or 500
    /// for an I/O error). A HEAD gets the GET head and an empty body.
    pub async fn respond(&self, request: &RequestHead) -> FileResponse {
        self.answer(request).await.0
    }

    /// [`StaticFiles::respond`], and the reason when the request was refused
    /// (which is also logged here, with the request).
    pub async fn answer(&self, request: &RequestHead) -> (FileResponse, Option<Refusal>) {
        let (mut response, refusal) = match self.respond_get(request).await {
            Ok(response) => (response, None),
            Err(refusal) => {
                log_refusal(request, &refusal);
                (refusal.response(), Some(refusal))
            }
        };
        if request.method == Method::HEAD {
            response.body = FileBody::Empty;
        }
        (response, refusal)
    }

    async fn respond_get(&self, request: &RequestHead) -> Result<FileResponse, Refusal> {
        if request.method != Method::GET && request.method != Method::HEAD {
            return Err(method_refusal(&request.method));
        }
        let (url_path, query) = UrlPath::from_target(&request.target).map_err(Refusal::Path)?;
        // The target's path passed the checks above, so it can be the key.
        let key = request.target.split('?').next().unwrap_or_default();
        let cache = self.inner.small_files.as_ref();
        if let Some(kept) = cache.and_then(|cache| cache.get(key, Instant::now())) {
            return self.file_response(request, &kept.facts, Body::Memory(kept.contents.clone()));
        }
        let inner = Arc::clone(&self.inner);
        let lookup_path = url_path.clone();
        let whole = request.method == Method::GET;
        let resolved = tokio::task::spawn_blocking(move || {
            let mut resolved = inner.resolve(&lookup_path)?;
            if let Resolved::File(opened) = &mut resolved
                && whole
            {
                opened.read_if_small()?;
            }
            Ok(resolved)
        })
        .await
        .map_err(|e| Refusal::Io(format!("static file lookup task failed: {e}")))?;
        let opened = match resolved? {
            Resolved::File(opened) => opened,
            Resolved::Directory => return redirect(&url_path, query),
        };
        let facts = self.facts(&opened)?;
        let Some(contents) = opened.contents else {
            return self.file_response(request, &facts, Body::File(opened.file));
        };
        let response = self.file_response(request, &facts, Body::Memory(contents.clone()));
        if let Some(cache) = cache {
            let kept = Arc::new(SmallFile { facts, contents });
            cache.insert(key, kept, Instant::now());
        }
        response
    }

    /// The head fields of the file `opened`, from its metadata and URL.
    fn facts(&self, opened: &Opened) -> Result<FileFacts, Refusal> {
        let meta = &opened.meta;
        let etag = file_etag(meta.mtime(), meta.mtime_nsec(), meta.len(), meta.ino());
        let Ok(etag) = HeaderValue::from_str(&etag) else {
            return Err(Refusal::Io(format!("ETag {etag:?} is not a field value")));
        };
        let modified = u64::try_from(meta.mtime()).unwrap_or(0);
        Ok(FileFacts {
            len: meta.len(),
            etag,
            modified,
            last_modified: http_date(UNIX_EPOCH + Duration::from_secs(modified)),
            content_type: content_type(&opened.url),
            cache_control: self.cache_control_for(&opened.url),
            url: opened.url.clone(),
        })
    }

    /// The response to `request` for the file `facts` describes, whose bytes
    /// are `body`: preconditions, range, head, body.
    fn file_response(
        &self,
        request: &RequestHead,
        facts: &FileFacts,
        body: Body,
    ) -> Result<FileResponse, Refusal> {
        let (url, len) = (facts.url.as_str(), facts.len);
        let validator_fields = |head: &mut ResponseHead| {
            head.push(LAST_MODIFIED, facts.last_modified.clone());
            head.push(ETAG, facts.etag.clone());
            if let Some(value) = &facts.cache_control {
                head.push(CACHE_CONTROL, value.clone());
            }
        };

        let validators = facts.validators();
        match conditional::evaluate_preconditions(&request.method, &request.headers, &validators) {
            Precondition::Proceed => {}
            Precondition::NotModified => {
                let mut head = ResponseHead::new(StatusCode::NOT_MODIFIED);
                validator_fields(&mut head);
                return Ok(FileResponse {
                    head,
                    body: FileBody::Empty,
                });
            }
            Precondition::Failed => return Err(Refusal::PreconditionFailed),
        }

        let range = range_request(request, &validators);
        let (status, start, count) = match range {
            Some(RangeRequest::Single(spec)) => match spec.resolve(len) {
                Some((first, last)) => (StatusCode::PARTIAL_CONTENT, first, last - first + 1),
                None => return Err(Refusal::RangeNotSatisfiable { len }),
            },
            Some(RangeRequest::Multiple(_)) | None => (StatusCode::OK, 0, len),
        };

        let mut head = ResponseHead::new(status);
        head.push(CONTENT_TYPE, facts.content_type.clone());
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
            return Ok(FileResponse {
                head,
                body: FileBody::Empty,
            });
        }
        let body = match body {
            Body::Memory(contents) => {
                let range = usize::try_from(start)
                    .ok()
                    .zip(usize::try_from(start + count).ok());
                let Some(part) = range.and_then(|(from, to)| {
                    contents.get(from..to).map(|_| contents.slice(from..to))
                }) else {
                    return Err(Refusal::Io(format!("{url} changed size while read")));
                };
                FileBody::Bytes(part)
            }
            Body::File(mut file) => {
                if start > 0 {
                    // lseek on a regular file does no I/O: no blocking-pool trip.
                    io::Seek::seek(&mut file, SeekFrom::Start(start))
                        .map_err(|e| Refusal::Io(format!("seek in {url}: {e}")))?;
                }
                FileBody::File(FileRegion {
                    file: tokio::fs::File::from_std(file),
                    remaining: count,
                })
            }
        };
        Ok(FileResponse { head, body })
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
fn range_request(request: &RequestHead, validators: &Validators<'_>) -> Option<RangeRequest> {
    if request.method != Method::GET || request.header_count("range") != 1 {
        return None;
    }
    let value = request.header("range")?;
    if !conditional::if_range_holds(&request.headers, validators) {
        return None;
    }
    range::parse_range(value.as_bytes())
}

/// The strong entity tag of a file version, quotes included:
/// `"<mtime ns>-<size>-<inode>"` in hex. A file rewritten within the same
/// second changes its nanoseconds, or its size, or (renamed over) its inode.
fn file_etag(mtime_secs: i64, mtime_nsec: i64, size: u64, inode: u64) -> String {
    let mtime_ns = i128::from(mtime_secs) * 1_000_000_000 + i128::from(mtime_nsec);
    format!("\"{mtime_ns:x}-{size:x}-{inode:x}\"")
}

/// Logs why `request` was refused: at info for 403 (the operator's business: a
/// symlink the configuration refuses, file permissions), at warn for 5xx, at
/// debug for the rest (the access log has the reason code of every refusal).
fn log_refusal(request: &RequestHead, refusal: &Refusal) {
    let status = refusal.status().as_u16();
    let (method, target, reason) = (&request.method, &request.target, refusal.code());
    if refusal.status() == StatusCode::FORBIDDEN {
        tracing::info!(%method, %target, status, reason, "refused: {refusal}");
    } else if refusal.status().is_server_error() {
        gateway_transport::warn_limited!(%method, %target, status, reason, "refused: {refusal}");
    } else {
        tracing::debug!(%method, %target, status, reason, "refused: {refusal}");
    }
}

/// 405 for the methods RFC 9110 defines (with Allow), 501 for the others.
fn method_refusal(method: &Method) -> Refusal {
    let known = [
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::OPTIONS,
        Method::PATCH,
        Method::TRACE,
        Method::CONNECT,
    ];
    if known.contains(method) {
        Refusal::MethodNotAllowed
    } else {
        Refusal::MethodNotImplemented
    }
}

/// 301 from `/dir` to `/dir/`, query kept.
fn redirect(url_path: &UrlPath, query: Option<&str>) -> Result<FileResponse, Refusal> {
    let location = url_path.directory_location(query);
    let location = HeaderValue::from_str(&location).map_err(|_| Refusal::BadQuery)?;
    let mut response = FileResponse::error(StatusCode::MOVED_PERMANENTLY);
    response.head.push(LOCATION, location);
    Ok(response)
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

/// What a response head says of a file, worked out once per lookup (and kept
/// with a small file in [`SmallFileCache`]).
#[derive(Debug)]
struct FileFacts {
    /// The URL path of the file served (the index file's for a directory URL).
    url: String,
    len: u64,
    etag: HeaderValue,
    /// Modification time, whole seconds since the Unix epoch (what
    /// Last-Modified can express; 0 before the epoch).
    modified: u64,
    last_modified: HeaderValue,
    content_type: HeaderValue,
    cache_control: Option<HeaderValue>,
}

impl FileFacts {
    /// The validators preconditions and If-Range compare with.
    fn validators(&self) -> Validators<'_> {
        Validators {
            etag: EntityTag::parse(self.etag.as_bytes()),
            last_modified: Some(self.modified),
        }
    }
}

/// Where a file's bytes come from.
enum Body {
    /// Read whole (a small file), now or by an earlier lookup.
    Memory(Bytes),
    /// Open, to be read in chunks.
    File(std::fs::File),
}

/// What a lookup found.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "returned once per request and consumed at once"
)]
enum Resolved {
    /// A regular file, opened.
    File(Opened),
    /// A directory named without the trailing slash.
    Directory,
}

/// A regular file, opened, with its metadata (from the open handle), its URL
/// path (the index file's for a directory URL) and, once read, its contents.
#[derive(Debug)]
struct Opened {
    file: std::fs::File,
    meta: Metadata,
    url: String,
    /// The whole file, when [`Opened::read_if_small`] read it.
    contents: Option<Bytes>,
}

impl Opened {
    /// Blocking: reads the file whole if it has at most
    /// [`WHOLE_FILE_MAX_BYTES`]. A file shorter than its metadata said (cut
    /// since it was opened) is an I/O error: its length is what the head
    /// will promise.
    fn read_if_small(&mut self) -> Result<(), Refusal> {
        let len = self.meta.len();
        if len > WHOLE_FILE_MAX_BYTES {
            return Ok(());
        }
        let mut contents = vec![0; usize::try_from(len).unwrap_or_default()];
        std::io::Read::read_exact(&mut self.file, &mut contents)
            .map_err(|e| Refusal::Io(format!("reading {}: {e}", self.url)))?;
        self.contents = Some(Bytes::from(contents));
        Ok(())
    }
}

impl Inner {
    /// Blocking: finds and opens the file `path` names.
    ///
    /// The joined path is checked for symlinks as `follow_symlinks` says, then
    /// canonicalized; inside the root it must have no hidden component (a
    /// symlink to a dotfile is 404), and outside (where the setting allows it)
    /// none in the part not shared with the root's own path. The canonical path is then opened with
    /// `O_NOFOLLOW | O_NONBLOCK`, so a final component swapped for a symlink since
    /// is refused, a FIFO cannot block the open, and the type is checked again on
    /// the open handle.
    fn resolve(&self, path: &UrlPath) -> Result<Resolved, Refusal> {
        let mut joined = self.root.clone();
        joined.extend(path.segments());
        let canonical = self.resolve_path(&joined)?;
        let meta = std::fs::metadata(&canonical).map_err(|e| Refusal::from_io(&e))?;
        let (target, url) = if meta.is_dir() {
            if !path.is_directory_form() {
                return Ok(Resolved::Directory);
            }
            let index = match self.resolve_path(&joined.join(&self.index)) {
                Err(Refusal::NotFound) => return Err(Refusal::NoIndex),
                other => other?,
            };
            (index, format!("{}{}", path.decoded(), self.index))
        } else if path.is_directory_form() {
            return Err(Refusal::FileAsDirectory);
        } else {
            (canonical, path.decoded())
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&target)
            .map_err(|e| Refusal::from_io(&e))?;
        let meta = file.metadata().map_err(|e| Refusal::from_io(&e))?;
        if !meta.is_file() {
            return Err(Refusal::NotRegularFile);
        }
        Ok(Resolved::File(Opened {
            file,
            meta,
            url,
            contents: None,
        }))
    }

    /// The canonical form of `joined` (the root and checked segments), if the
    /// symlinks on the way are allowed.
    fn resolve_path(&self, joined: &Path) -> Result<PathBuf, Refusal> {
        match self.follow_symlinks {
            FollowSymlinks::Never | FollowSymlinks::IfOwnerMatches => self.check_links(joined)?,
            FollowSymlinks::InsideRoot | FollowSymlinks::Always => {}
        }
        let canonical = std::fs::canonicalize(joined).map_err(|e| Refusal::from_io(&e))?;
        let hidden = |p: &Path| {
            p.components().any(|c| match c {
                Component::Normal(name) => name.to_str().is_none_or(path::is_hidden),
                _ => false,
            })
        };
        let checked = match canonical.strip_prefix(&self.root) {
            Ok(relative) => relative,
            // `never` without `symlinks_from` reaches here only if a symlink
            // appeared since the check.
            Err(_)
                if self.follow_symlinks == FollowSymlinks::InsideRoot
                    || (self.follow_symlinks == FollowSymlinks::Never
                        && self.symlinks_from.is_none()) =>
            {
                return Err(Refusal::SymlinkOutOfRoot {
                    resolved: canonical,
                });
            }
            // Outside the root, the part not shared with the root's path is
            // checked: the root may itself lie under a hidden directory.
            Err(_) => {
                let shared = canonical
                    .components()
                    .zip(self.root.components())
                    .take_while(|(a, b)| a == b)
                    .count();
                let mut rest = canonical.components();
                for _ in 0..shared {
                    rest.next();
                }
                rest.as_path()
            }
        };
        if hidden(checked) {
            return Err(Refusal::HiddenTarget {
                resolved: canonical,
            });
        }
        Ok(canonical)
    }

    /// `never` and `if-owner-matches`: looks at each component below the root
    /// (without following it) and refuses a symlink, or one whose owner differs
    /// from that of what it resolves to. Path-based like the rest of the lookup:
    /// the document root is trusted content, not writable by clients.
    fn check_links(&self, joined: &Path) -> Result<(), Refusal> {
        let Ok(relative) = joined.strip_prefix(&self.root) else {
            return Err(Refusal::NotFound);
        };
        // nginx's `from=`: the components up to and including it are trusted.
        let trusted = match &self.symlinks_from {
            Some(from) if relative.starts_with(from) => from.components().count(),
            _ => 0,
        };
        let mut prefix = self.root.clone();
        for (i, component) in relative.components().enumerate() {
            prefix.push(component);
            if i < trusted {
                continue;
            }
            let link = std::fs::symlink_metadata(&prefix).map_err(|e| Refusal::from_io(&e))?;
            if !link.file_type().is_symlink() {
                continue;
            }
            if self.follow_symlinks == FollowSymlinks::Never {
                return Err(Refusal::SymlinkRefused { link: prefix });
            }
            let target = std::fs::metadata(&prefix).map_err(|e| Refusal::from_io(&e))?;
            if target.uid() != link.uid() {
                return Err(Refusal::SymlinkOwnerDiffers {
                    link: prefix,
                    link_owner: link.uid(),
                    target_owner: target.uid(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etag_format() {
        assert_eq!(
            file_etag(1_700_000_000, 123, 4096, 42),
            "\"17979cfe362a007b-1000-2a\""
        );
    }

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
    fn follow_symlinks_values() -> Result<(), toml::de::Error> {
        let parse = |value: &str| {
            toml::from_str::<FilesConfig>(&format!(
                "root = \"/srv\"\nfollow_symlinks = \"{value}\"\n"
            ))
            .map(|c| c.follow_symlinks)
        };
        assert_eq!(parse("never")?, FollowSymlinks::Never);
        assert_eq!(parse("inside-root")?, FollowSymlinks::InsideRoot);
        assert_eq!(parse("if-owner-matches")?, FollowSymlinks::IfOwnerMatches);
        assert_eq!(parse("always")?, FollowSymlinks::Always);
        let default: FilesConfig = toml::from_str("root = \"/srv\"")?;
        assert_eq!(default.follow_symlinks, FollowSymlinks::InsideRoot);
        assert_eq!(
            FilesConfig::new("/srv").follow_symlinks,
            FollowSymlinks::InsideRoot
        );
        // nginx's spellings and booleans are not guessed at: the error names the
        // key and the values allowed.
        for bad in ["off", "if_not_owner", "yes"] {
            let text = format!("[files]\nroot = \"/srv\"\nfollow_symlinks = \"{bad}\"\n");
            let error = crate::config::OriginConfig::from_toml(&text)
                .expect_err(bad)
                .to_string();
            assert!(error.contains("follow_symlinks"), "{error}");
            assert!(error.contains("if-owner-matches"), "{error}");
        }
        let text = "[files]\nroot = \"/srv\"\nfollow_symlinks = true\n";
        assert!(crate::config::OriginConfig::from_toml(text).is_err());
        Ok(())
    }

    #[test]
    fn symlinks_from_is_a_plain_directory_below_the_root() -> Result<(), toml::de::Error> {
        let config: FilesConfig = toml::from_str(
            "root = \"/srv\"\nfollow_symlinks = \"never\"\nsymlinks_from = \"docs/v1\"\n",
        )?;
        assert_eq!(config.symlinks_from, Some(PathBuf::from("docs/v1")));
        assert!(config.validate().is_ok());
        let mut config = FilesConfig::new("/srv");
        config.follow_symlinks = FollowSymlinks::IfOwnerMatches;
        for bad in ["", "/abs", "../up", "a/../b", "./a", ".hidden", "a/.git"] {
            config.symlinks_from = Some(bad.into());
            let error = config.validate().map_err(|e| e.to_string());
            assert!(
                matches!(&error, Err(m) if m.starts_with("files.symlinks_from") && m.contains("below the root")),
                "{bad:?}: {error:?}"
            );
        }
        config.symlinks_from = Some("docs".into());
        for follow in [FollowSymlinks::InsideRoot, FollowSymlinks::Always] {
            config.follow_symlinks = follow;
            let error = config.validate().map_err(|e| e.to_string());
            assert!(
                matches!(&error, Err(m) if m.starts_with("files.symlinks_from") && m.contains("applies only")),
                "{follow:?}: {error:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn refusal_codes_are_distinct_tokens() {
        let path = PathBuf::from("/x");
        let all = [
            Refusal::MethodNotAllowed,
            Refusal::MethodNotImplemented,
            Refusal::Path(PathError::NotOriginForm),
            Refusal::Path(PathError::BadEscape),
            Refusal::Path(PathError::EncodedSeparator),
            Refusal::Path(PathError::ControlCharacter),
            Refusal::Path(PathError::RawCharacter),
            Refusal::Path(PathError::NotUtf8),
            Refusal::Path(PathError::DotSegment),
            Refusal::Path(PathError::Hidden),
            Refusal::BadQuery,
            Refusal::NotFound,
            Refusal::FileAsDirectory,
            Refusal::NoIndex,
            Refusal::NotRegularFile,
            Refusal::HiddenTarget {
                resolved: path.clone(),
            },
            Refusal::SymlinkLoop,
            Refusal::NameTooLong,
            Refusal::SymlinkOutOfRoot {
                resolved: path.clone(),
            },
            Refusal::SymlinkRefused { link: path.clone() },
            Refusal::SymlinkOwnerDiffers {
                link: path,
                link_owner: 1,
                target_owner: 0,
            },
            Refusal::PermissionDenied,
            Refusal::PreconditionFailed,
            Refusal::RangeNotSatisfiable { len: 0 },
            Refusal::Io("disk on fire".into()),
        ];
        let codes: std::collections::HashSet<&str> = all.iter().map(Refusal::code).collect();
        assert_eq!(codes.len(), all.len());
        for refusal in &all {
            let code = refusal.code();
            assert!(
                code.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{code}"
            );
            assert!(refusal.status().is_client_error() || refusal.status().is_server_error());
        }
        let forbidden = all
            .iter()
            .filter(|r| r.status() == StatusCode::FORBIDDEN)
            .count();
        assert_eq!(forbidden, 4);
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
        let response = method_refusal(&Method::POST).response();
        assert_eq!(response.head.status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(
            response.head.get("allow"),
            Some(&HeaderValue::from_static("GET, HEAD"))
        );
        let brew = Method::from_bytes(b"BREW").map(|m| method_refusal(&m));
        assert_eq!(brew.ok(), Some(Refusal::MethodNotImplemented));
        assert_eq!(
            Refusal::MethodNotImplemented.response().head.status,
            StatusCode::NOT_IMPLEMENTED
        );
        let response = Refusal::RangeNotSatisfiable { len: 7 }.response();
        assert_eq!(response.head.status, StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(
            response.head.get("content-range"),
            Some(&HeaderValue::from_static("bytes */7"))
        );
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
