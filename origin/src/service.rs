//! The origin's request handler: answers from the document root, or forwards to
//! a TCP HTTP/1.1 upstream (reverse-proxy mode); one of the two, per config.
//! With `[push] enabled` or `[tls] early_hints`, a page served from the root
//! names its closure (`crate::closure`) as what to push, or to hint in a 103
//! inside a TLS tunnel; a proxied page names nothing yet.

use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use bytes::Bytes;

use crate::closure::{ClosureConfig, Closures, PageScheme};
use crate::files::{FileBody, Refusal, StaticFiles};
use crate::learned::{LearnedConfig, Manifest, RequestFacts};
use crate::proxy::{Proxy, ProxyBody};
use crate::server::{BodySource, Handler, IncomingRequest, PushTarget, Reply};
use http_semantics::{RequestHead, ResponseHead};

/// Answers requests from a document root or an upstream.
#[derive(Debug)]
pub enum Service {
    /// Static files, and the closures of their pages when pushes are on.
    Files {
        /// The document root.
        files: StaticFiles,
        /// `[push] enabled` or `[tls] early_hints`: each page's closure,
        /// worked out once per version; `None`: nothing is pushed or hinted.
        closures: Option<Closures>,
        /// `[push] enabled` and `learn`: what gateways asked for after each
        /// page (`crate::learned`), fed by every answer, pushed after the
        /// closure.
        learned: Option<Box<Mutex<Manifest>>>,
    },
    /// Reverse proxy; one pool of upstream connections for all associations.
    Proxy(Box<Proxy>),
}

/// The body of any reply the service gives.
#[derive(Debug)]
pub enum ServiceBody {
    /// A file region or a generated body.
    File(FileBody),
    /// An upstream's body, streamed.
    Upstream(ProxyBody),
}

impl BodySource for ServiceBody {
    async fn next_chunk(&mut self, max: usize) -> std::io::Result<Option<Bytes>> {
        match self {
            ServiceBody::File(body) => body.read_chunk(max).await,
            ServiceBody::Upstream(body) => body.next_chunk(max).await,
        }
    }
}

fn reply(mut head: ResponseHead, body: FileBody) -> Reply<ServiceBody> {
    head.push_date(SystemTime::now());
    Reply {
        head: head.render(),
        body_len: Some(body.remaining()),
        body: ServiceBody::File(body),
    }
}

impl Handler for Service {
    type Body = ServiceBody;

    async fn handle(&self, request: IncomingRequest) -> Reply<ServiceBody> {
        self.answer(request).await.0
    }

    /// A page's closure from its files, in push order. Static files are the
    /// same for everyone, so each target is public.
    async fn pushes(&self, page: &IncomingRequest) -> Vec<PushTarget> {
        let Service::Files {
            closures: Some(closures),
            learned,
            ..
        } = self
        else {
            return Vec::new();
        };
        let Ok(head) = RequestHead::parse(&page.request.head) else {
            return Vec::new();
        };
        let Some(host) = head.header_str("host") else {
            return Vec::new();
        };
        let scheme = if page.tunnelled {
            PageScheme::Https
        } else {
            PageScheme::Http
        };
        let mut targets: Vec<PushTarget> = closures
            .closure_for(scheme, &head.target, host)
            .await
            .iter()
            .map(|entry| PushTarget {
                target: entry.target.clone(),
                render_blocking: entry.render_blocking,
                public: true,
                kind: Some(entry.kind),
            })
            .collect();
        if let Some(learned) = learned {
            // What only scripts find, after what the files name. Each is
            // told back as pushed (or held), so that a gateway not asking
            // for it again does not count against it.
            let mut manifest = crate::sync::lock(learned);
            for entry in manifest.learned(scheme, host, &head.target, Instant::now()) {
                if targets.iter().any(|t| t.target == entry.target) {
                    continue;
                }
                manifest.handle_pushed(scheme, host, &head.target, &entry.target);
                targets.push(PushTarget {
                    target: entry.target,
                    render_blocking: false,
                    // Learned only from credential-free, shared-cacheable
                    // answers (`learned::shared_cacheable`).
                    public: true,
                    kind: entry.kind,
                });
            }
        }
        targets
    }
}

impl Service {
    /// Serves `files`; with `closures`, also names each page's closure as
    /// its pushes, and with `learned` what gateways asked for after it.
    pub fn files(
        files: StaticFiles,
        closures: Option<ClosureConfig>,
        learned: Option<LearnedConfig>,
    ) -> Service {
        let closures = closures.map(|config| Closures::new(files.clone(), config));
        let learned = learned.map(|config| Box::new(Mutex::new(Manifest::new(config))));
        Service::Files {
            files,
            closures,
            learned,
        }
    }

    /// Answers one request, and says why (a one-token code, as
    /// [`crate::files::Refusal::code`]) when it was refused. A proxied
    /// response has no reason: the upstream's status is passed on.
    pub async fn answer(
        &self,
        request: IncomingRequest,
    ) -> (Reply<ServiceBody>, Option<&'static str>) {
        let (files, learned) = match self {
            Service::Files { files, learned, .. } => (files, learned),
            Service::Proxy(proxy) => {
                let reply = proxy.handle(request).await;
                let reply = Reply {
                    head: reply.head,
                    body_len: reply.body_len,
                    body: ServiceBody::Upstream(reply.body),
                };
                return (reply, None);
            }
        };
        let head = match RequestHead::parse(&request.request.head) {
            Ok(head) => head,
            Err(e) => {
                tracing::debug!(id = request.id, error = %e, "bad request head");
                let (head, body) = e.response();
                return (reply(head, FileBody::Bytes(body)), Some("bad-request-head"));
            }
        };
        let (response, refusal) = files.answer(&head).await;
        if let Some(learned) = learned {
            learn(learned, &request, &head, &response.head);
        }
        tracing::debug!(
            id = request.id,
            stream = request.stream,
            method = %head.method,
            target = %head.target,
            status = response.head.status.as_u16(),
            "request"
        );
        (
            reply(response.head, response.body),
            refusal.as_ref().map(Refusal::code),
        )
    }
}

/// Tells the learned manifest about one answered request.
fn learn(
    learned: &Mutex<Manifest>,
    request: &IncomingRequest,
    head: &RequestHead,
    response: &ResponseHead,
) {
    let scheme = if request.tunnelled {
        PageScheme::Https
    } else {
        PageScheme::Http
    };
    let fields: http::HeaderMap = response.headers.iter().cloned().collect();
    if let Some(facts) = RequestFacts::new(scheme, head, response.status, &fields) {
        crate::sync::lock(learned).handle_request(&facts, Instant::now());
    }
}
