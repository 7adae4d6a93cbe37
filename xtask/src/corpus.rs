//! `cargo xtask corpus`: writes the generated page corpus (testbed's
//! `corpus::generate`) to a directory, to look at or to serve by hand, and
//! prints each page's objects, bytes and lower bound over a sample link.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use testbed::corpus::{self, Link, ObjectKind};

/// What to write where.
#[derive(Debug, clap::Args)]
pub(crate) struct CorpusOptions {
    /// The directory to write the pages to (`DIR/p50/index.html`, ...).
    #[arg(long)]
    out: PathBuf,
    /// The seed: the same seed writes the same bytes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// The link the printed lower bounds are for: the page-load benchmark's
/// default round-trip time over a 20 Mbit/s bottleneck.
const SAMPLE_LINK: Link = Link {
    rtt: Duration::from_millis(80),
    rate_bits_per_second: 20_000_000,
};

pub(crate) fn run(options: &CorpusOptions) -> Result<()> {
    let pages = corpus::generate(&options.out, options.seed)
        .with_context(|| format!("writing the corpus to {}", options.out.display()))?;
    println!(
        "corpus (seed {}) in {}; lower bounds at {:?} RTT, {} Mbit/s:",
        options.seed,
        options.out.display(),
        SAMPLE_LINK.rtt,
        SAMPLE_LINK.rate_bits_per_second / 1_000_000
    );
    for page in &pages {
        let counts: Vec<String> = ObjectKind::ALL
            .iter()
            .map(|kind| format!("{} {}", page.of_kind(*kind).count(), kind.as_str()))
            .collect();
        println!(
            "  {:<4} {:>3} objects ({}), {:>5} KiB, lower bound {:?}",
            page.name,
            page.objects.len(),
            counts.join(", "),
            page.total_bytes() / 1024,
            corpus::lower_bound(page, &SAMPLE_LINK)
        );
    }
    Ok(())
}
