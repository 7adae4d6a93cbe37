//! The prefetch queue's I/O-free core: what a page will ask for, and when the
//! gateway should ask first. docs/prefetch.md has the design, the rules taken
//! from browsers and the decisions.
//!
//! - The extraction is the `page-resources` crate, which the origin uses too
//!   (re-exported here as [`extract`] and [`css`]): [`HtmlScanner`] copies
//!   an HTML body as it streams to the browser (never holding it back) and
//!   yields the subresources a browser would request, in document order;
//!   [`extract_css`] does a stylesheet. [`PrefetchConfig::extract_config`]
//!   gives it the `[prefetch]` knobs. Start there.
//! - [`queue`]: [`PrefetchQueue`], the state machine that orders prefetches
//!   per page, enforces the limits, promotes a prefetch a browser asks for,
//!   cancels what an abandoned page no longer needs, and counts what was used
//!   and wasted. Input through `handle_*` calls, output through
//!   [`PrefetchQueue::poll_action`]; time is an argument.
//! - [`manners`]: the request fields a prefetch may carry and whether its
//!   response may be kept.
//! - [`config`]: the `[prefetch]` section.
//! - [`prefetcher`]: the I/O layer around the queue ([`Prefetcher`]): it
//!   scans the HTML a browser receives, runs the queue's actions, and fetches
//!   through the cache's one entry point ([`Cache::serve`]) over an
//!   [`Upstream`] the front hands it per page.
//!
//! What the core (everything but `prefetcher`) never does: touch sockets, the
//! cache or the clock. `prefetcher` carries out its actions, through the cache
//! and the [`Upstream`] trait, never through the front (it names neither the
//! front nor the route table).
//!
//! [`Cache::serve`]: crate::cache::Cache::serve
//! [`Upstream`]: crate::upstream::Upstream

pub mod config;
pub mod manners;
pub mod prefetcher;
pub mod queue;

pub use config::PrefetchConfig;
pub use manners::{NotKept, keep_prefetched, prefetch_request_headers};
pub use page_resources::{
    CssResources, ExtractConfig, HtmlScanner, Kind, Resource, css, extract, extract_css,
    extract_html, is_css, is_html,
};
pub use prefetcher::{Prefetcher, RouteKind, Watched};
pub use queue::{
    Action, Demand, FetchId, PageId, PageOutcome, PageState, PrefetchQueue, PrefetchStats,
    RecentPage,
};
